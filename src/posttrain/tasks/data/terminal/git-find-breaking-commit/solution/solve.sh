#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
rm -rf /tmp/r && git clone -q /app/repo.bundle /tmp/r && cd /tmp/r
git bisect start main "$(git rev-list --max-parents=0 main)" >/dev/null
git bisect run sh -c 'test "$(python3 calc.py)" = 42' >/dev/null
git rev-parse refs/bisect/bad > /app/first_bad.txt
