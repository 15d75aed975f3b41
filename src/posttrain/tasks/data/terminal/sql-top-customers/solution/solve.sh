#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > query.sql <<'EOF'
SELECT c.name, ROUND(SUM(o.amount), 2) AS total_paid
FROM customers c JOIN orders o ON o.customer_id = c.id
WHERE o.status = 'paid'
GROUP BY c.id
ORDER BY total_paid DESC
LIMIT 3;
EOF
