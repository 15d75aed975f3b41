#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
python3 - <<'EOF'
p = "inventory.py"
s = open(p).read()
s = s.replace('Decimal(line["price"]) * line["qty"]', 'Decimal(line["price"]) * int(line["qty"])')
s = s.replace('Decimal(order["discount"])', 'Decimal(order.get("discount", "0"))')
open(p, "w").write(s)
EOF
