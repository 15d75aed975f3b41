#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > count_lines.sh <<'EOF'
#!/bin/bash
dir=${1%/}
total=0
while IFS= read -r -d '' f; do
  n=$(wc -l < "$f")
  echo "$n ${f#"$dir"/}"
  total=$((total + n))
done < <(find "$dir" -type f -name '*.txt' -print0 | sort -z)
echo "total $total"
EOF
