"""Buffers on transparent huge pages: the engine's packed weights, read once per decode step.

Covers: `hugepage_empty`, a 1-D tensor whose storage starts on a 2 MiB
boundary of an anonymous mapping advised `MADV_HUGEPAGE` before its first
touch, so the kernel backs it with 2 MiB pages where it can. Why: a batch-1
decode step streams every weight once; on 4 KiB pages that walk misses the TLB
every 4 KiB and the hardware prefetcher stops at every page boundary
(benchmarks/hugepages.py; the measurements are in benchmarks/RESULTS.md).
Linux's default THP mode, `madvise`, gives huge pages only to ranges that ask,
and PyTorch's CPU allocator asks only when `THP_MEM_ALLOC_ENABLE=1` is set
before it starts.
Falls back to a plain `torch.empty` (same contents, same semantics) below
`MIN_BYTES` (16 MiB: 4 KiB pages' TLB reach covers smaller buffers, and the
allocator's reuse of freed memory is cheaper than a fresh mapping for the small
packs made once per training step), off Linux, when THP is `never`, or when the
mapping or the advice fails.
Does not cover: the KV cache or activations (small and reused at decode
sizes), or explicit hugetlbfs pages (need root and a reserved pool).
"""

from __future__ import annotations

import mmap
from pathlib import Path

import torch

HUGE_PAGE = 2 << 20
MIN_BYTES = 16 << 20  # smaller buffers stay on the allocator's 4 KiB pages (see the module's docstring)
_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str:
    """The kernel's transparent-huge-page mode ('always', 'madvise', 'never'), or 'unavailable'."""
    try:
        text = _THP.read_text()
    except OSError:
        return "unavailable"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "unavailable"


def hugepage_empty(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised 1-D tensor of `numel` elements, on huge pages where the system gives them.

    The storage is an anonymous mapping owned by the tensor (freed with it); its first element sits on a
    2 MiB boundary. Contents and behaviour are those of `torch.empty(numel, dtype=dtype)`.
    """
    nbytes = numel * dtype.itemsize
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < MIN_BYTES or advice is None or thp_mode() in ("never", "unavailable"):
        return torch.empty(numel, dtype=dtype)
    try:
        # private: a shared anonymous mapping is shmem, which follows shmem_enabled (usually never), not this advice
        mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        mapping.madvise(advice)  # before any page is touched: faults then take whole 2 MiB pages
    except (OSError, ValueError):
        return torch.empty(numel, dtype=dtype)
    raw = torch.frombuffer(mapping, dtype=torch.uint8)  # holds a reference to the mapping for its lifetime
    offset = -raw.data_ptr() % HUGE_PAGE
    return raw[offset : offset + nbytes].view(dtype)
