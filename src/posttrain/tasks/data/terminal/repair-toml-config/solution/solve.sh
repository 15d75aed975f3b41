#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > settings.toml <<'EOF'
# service settings
[server]
host = "api.internal"
port = 8443
tls = true

[jobs]
queues = ["email", "reports", "billing"]
cleanup_after = 2024-06-30
EOF
