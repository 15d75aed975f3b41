#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
find billing -name '*.py' -exec sed -i 's/calc_total/compute_total/g' {} +
