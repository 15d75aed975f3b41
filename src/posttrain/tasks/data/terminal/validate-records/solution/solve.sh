#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
python3 - <<'EOF'
import json
bad, seen = [], set()
for n, line in enumerate(open("records.jsonl").read().split("\n")[:-1], 1):
    try:
        r = json.loads(line)
    except ValueError:
        bad.append(n)
        continue
    isint = lambda v: isinstance(v, int) and not isinstance(v, bool)
    ok = (isinstance(r, dict) and isint(r.get("id")) and isinstance(r.get("email"), str) and "@" in r["email"]
          and isint(r.get("age")) and 0 <= r["age"] <= 150 and r["id"] not in seen)
    if isinstance(r, dict) and isint(r.get("id")):
        seen.add(r["id"])
    if not ok:
        bad.append(n)
open("invalid.txt", "w").write("".join(f"{n}\n" for n in bad))
EOF
