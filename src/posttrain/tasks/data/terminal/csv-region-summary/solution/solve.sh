#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
python3 - <<'EOF'
import csv
from collections import defaultdict
from decimal import Decimal
units, revenue = defaultdict(int), defaultdict(Decimal)
for row in csv.DictReader(open("sales.csv")):
    units[row["region"]] += int(row["units"])
    revenue[row["region"]] += int(row["units"]) * Decimal(row["unit_price"])
with open("summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["region", "total_units", "revenue"])
    for r in sorted(revenue, key=lambda r: -revenue[r]):
        w.writerow([r, units[r], f"{revenue[r]:.2f}"])
EOF
