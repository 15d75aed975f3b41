#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
python3 - <<'EOF'
import csv, json
users = {row["id"]: row["name"] for row in csv.DictReader(open("users.csv"))}
out = {uid: {"name": name, "orders": 0, "total": 0.0} for uid, name in users.items()}
unmatched = 0
for o in json.load(open("orders.json")):
    u = out.get(str(o["user_id"]))
    if u is None:
        unmatched += 1
        continue
    u["orders"] += 1
    u["total"] += o["amount"]
for u in out.values():
    u["total"] = round(u["total"], 2)
out["unmatched_orders"] = unmatched
json.dump(out, open("user_totals.json", "w"), indent=2)
EOF
