#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > convert.py <<'EOF'
import sys

FACTORS = {"m": ("length", 1.0), "km": ("length", 1000.0), "mi": ("length", 1609.344), "ft": ("length", 0.3048),
           "g": ("mass", 1.0), "kg": ("mass", 1000.0), "lb": ("mass", 453.59237)}
TO_K = {"C": lambda v: v + 273.15, "F": lambda v: (v - 32) * 5 / 9 + 273.15, "K": lambda v: v}
FROM_K = {"C": lambda k: k - 273.15, "F": lambda k: (k - 273.15) * 9 / 5 + 32, "K": lambda k: k}


def fail(msg):
    print(f"convert: {msg}", file=sys.stderr)
    sys.exit(2)


def main(argv):
    if len(argv) != 3:
        fail("usage: convert.py VALUE FROM TO")
    raw, src, dst = argv
    try:
        value = float(raw)
    except ValueError:
        fail(f"not a number: {raw!r}")
    kind = lambda u: "temperature" if u in TO_K else FACTORS[u][0] if u in FACTORS else fail(f"unknown unit {u!r}")
    if kind(src) != kind(dst):
        fail(f"cannot convert {src} to {dst}")
    if src in TO_K:
        k = TO_K[src](value)
        if k < 0:
            fail("below absolute zero")
        out = FROM_K[dst](k)
    else:
        out = value * FACTORS[src][1] / FACTORS[dst][1]
    print(f"{out:.4f} {dst}")


main(sys.argv[1:])
EOF
