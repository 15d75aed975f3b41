#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
python3 - <<'EOF'
import json, re
from collections import Counter
pat = re.compile(r'^(\S+) \S+ \S+ \[[^\]]+\] "(\S+) (\S+) [^"]*" (\d{3}) ')
reqs = [m.groups() for m in map(pat.match, open("access.log")) if m]
paths = Counter(r[2].split("?")[0] for r in reqs)
report = {
    "total_requests": len(reqs),
    "unique_ips": len({r[0] for r in reqs}),
    "status_counts": dict(Counter(r[3] for r in reqs)),
    "top_paths": [[p, c] for p, c in sorted(paths.items(), key=lambda x: (-x[1], x[0]))[:3]],
    "error_rate": round(sum(r[3].startswith("5") for r in reqs) / len(reqs), 4),
}
json.dump(report, open("report.json", "w"), indent=2)
EOF
