def is_prime(k):
    if k < 2:
        return False
    return all(k % d for d in range(2, k))


def count_primes(n):
    """The number of primes p with p < n."""
    return sum(1 for k in range(n) if is_prime(k))
