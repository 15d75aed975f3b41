#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
python3 - <<'EOF'
p = "stats.py"
s = open(p).read()
s = s.replace("    return s[n // 2]\n", "    if n % 2:\n        return s[n // 2]\n    return (s[n // 2 - 1] + s[n // 2]) / 2\n")
open(p, "w").write(s)
EOF
