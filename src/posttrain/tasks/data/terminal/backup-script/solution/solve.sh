#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > backup.sh <<'EOF'
#!/bin/bash
set -euo pipefail
cd /app
mkdir -p backups
list=$(mktemp)
find data -name cache -type d -prune -o -type f ! -name '*.tmp' -print0 > "$list"
tar --null -czf backups/data.tar.gz --no-recursion -T "$list"
echo "archived $(tr -cd '\0' < "$list" | wc -c) files"
rm -f "$list"
EOF
chmod +x backup.sh
