#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > primes.py <<'EOF'
def count_primes(n):
    """The number of primes p with p < n (a sieve of Eratosthenes)."""
    if n < 3:
        return 0
    sieve = bytearray([1]) * n
    sieve[0] = sieve[1] = 0
    for k in range(2, int((n - 1) ** 0.5) + 1):
        if sieve[k]:
            sieve[k * k::k] = bytes(len(range(k * k, n, k)))
    return sum(sieve)
EOF
