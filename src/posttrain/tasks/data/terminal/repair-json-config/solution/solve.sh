#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > config/service.json <<'EOF'
{
  "name": "orders-api",
  "port": 8080,
  "workers": 4,
  "debug": false,
  "database": {"url": "postgres://db.internal:5432/orders", "pool_size": 10},
  "allowed_hosts": ["orders.example.com", "localhost"]
}
EOF
