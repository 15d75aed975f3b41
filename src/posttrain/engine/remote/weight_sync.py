"""The learner's side of the vLLM weight sync: the state dict in bucketed chunks, each loaded by one named RPC.

Covers: `unique_tensors` (a tied weight sent once), `plan_buckets` (pure: consecutive tensors grouped into
buckets of at most `bucket_bytes`, a larger
tensor alone in its own), `send_weights`, which packs each bucket into one flat buffer in the wire dtype
(vLLM's serving dtype, bf16 by default: half the bytes of fp32, and vLLM would round to it anyway) and calls
`posttrain_load_bucket` on every vLLM worker (engine/remote/_vllm_worker.py) through the `rpc` it is given
(`LLM.collective_rpc`), then frees the buffer; and `SyncStats`, what the sync moved. The transport follows the
tensors' device, explicitly: CUDA tensors (a learner on the GPU vLLM shares) go by CUDA IPC, the buffer
staying on that GPU; host tensors go through one file in memory-backed storage (/dev/shm) per bucket. Either
way the RPC message holds names, shapes, offsets and a handle, never the weights, so the whole fp32 model
never goes through vLLM's msgpack channel.
Does not cover: NCCL broadcast to vLLM on other GPUs or machines (the learner on one GPU and vLLM on another
takes the host path), LoRA adapters (written to disk and named per version by the engine).
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from posttrain.engine.remote._vllm_worker import DTYPES, dtype_name

LOAD_METHOD = "posttrain_load_bucket"  # the extension's method, called by name
DEFAULT_BUCKET_BYTES = 256 << 20  # a 0.5B bf16 model in 4 buckets; one bucket's buffer is the sync's extra memory


@dataclass(frozen=True, slots=True)
class SyncStats:
    """One sync: tensors and bytes moved, buckets (= RPC calls), the transport, and seconds taken."""

    tensors: int
    bytes: int
    buckets: int
    transport: str
    seconds: float


def plan_buckets(sizes: list[int], bucket_bytes: int) -> list[list[int]]:
    """Indices of consecutive tensors of `sizes` bytes grouped so each bucket holds <= `bucket_bytes` (a tensor
    larger than that forms a bucket of its own)."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    buckets: list[list[int]] = []
    used = 0
    for i, n in enumerate(sizes):
        if buckets and used + n <= bucket_bytes:
            buckets[-1].append(i)
            used += n
        else:
            buckets.append([i])
            used = n
    return buckets


def transport_for(device: torch.device) -> str:
    """CUDA IPC for tensors on a GPU (colocated with vLLM), the host file otherwise."""
    return "cuda_ipc" if device.type == "cuda" else "host"


def send_weights(
    state: Mapping[str, Tensor],
    rpc: Callable[..., list[Any]],
    wire_dtype: torch.dtype = torch.bfloat16,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> SyncStats:
    """Every tensor of `state` to vLLM's workers, one `rpc(LOAD_METHOD, args=...)` per bucket. Floating tensors
    travel in `wire_dtype`; every worker must report the bucket's tensor count back."""
    if dtype_name(wire_dtype) not in DTYPES:
        raise ValueError(f"wire dtype {wire_dtype} is not one of {', '.join(DTYPES)}")
    t0 = time.perf_counter()
    items = unique_tensors(state)
    if not items:
        return SyncStats(0, 0, 0, "none", 0.0)
    device = items[0][1].device
    transport = transport_for(device)
    sizes = [t.numel() * _wire(t, wire_dtype).itemsize for _, t in items]
    plan = plan_buckets(sizes, bucket_bytes)
    total = 0
    for bucket in plan:
        part = [items[i] for i in bucket]
        flat, entries = _pack(part, wire_dtype, device)
        total += flat.numel()
        with _BucketHandle(flat, transport) as handle:
            counts = rpc(LOAD_METHOD, args=(transport, handle, flat.numel(), entries))
        if any(c != len(part) for c in counts):
            raise RuntimeError(f"a vLLM worker loaded {counts} tensors of a bucket of {len(part)}")
        del flat
    return SyncStats(len(items), total, len(plan), transport, time.perf_counter() - t0)


def unique_tensors(state: Mapping[str, Tensor]) -> list[tuple[str, Tensor]]:
    """(name, tensor) once per tensor: a tied weight (the lm_head sharing the embedding) travels under its first
    name only (vLLM's loaders tie it again; for Qwen2.5-0.5B that is a quarter of the bytes saved)."""
    seen: set[tuple] = set()
    out = []
    for name, t in state.items():
        key = (t.data_ptr(), t.device, t.dtype, tuple(t.shape), t.stride())
        if key in seen and t.numel() > 0:
            continue
        seen.add(key)
        out.append((name, t.detach()))
    return out


def _wire(t: Tensor, wire_dtype: torch.dtype) -> torch.dtype:
    return wire_dtype if t.is_floating_point() else t.dtype


def _pack(part: list[tuple[str, Tensor]], wire_dtype: torch.dtype, device: torch.device) -> tuple[Tensor, list[list]]:
    """Tensors -> one flat uint8 buffer [nbytes] on `device` and its entries [name, dtype, shape, offset]."""
    entries, offset = [], 0
    for name, t in part:
        dt = _wire(t, wire_dtype)
        entries.append([name, dtype_name(dt), list(t.shape), offset])
        offset += t.numel() * dt.itemsize
    flat = torch.empty(offset, dtype=torch.uint8, device=device)
    for (_, t), (_, dtype, _, at) in zip(part, entries):
        src = t.to(DTYPES[dtype]).contiguous().reshape(-1).view(torch.uint8)
        flat[at : at + src.numel()].copy_(src)
    return flat, entries


class _BucketHandle:
    """The transport's handle of a packed bucket, valid inside the `with` (the host file is removed after)."""

    def __init__(self, flat: Tensor, transport: str) -> None:
        self.flat, self.transport, self.path = flat, transport, None

    def __enter__(self) -> Any:
        if self.transport == "cuda_ipc":
            from torch.multiprocessing.reductions import reduce_tensor

            torch.cuda.synchronize(self.flat.device)  # the copies into the buffer are done before another process reads
            return pickle.dumps(reduce_tensor(self.flat))
        fd, path = tempfile.mkstemp(prefix="posttrain-weights-", suffix=".bin", dir=_memory_dir())
        with os.fdopen(fd, "wb") as f:
            f.write(memoryview(self.flat.numpy()))
        self.path = path
        return path

    def __exit__(self, *exc: object) -> None:
        if self.path is not None:
            Path(self.path).unlink(missing_ok=True)


def _memory_dir() -> str | None:
    """/dev/shm where there is one (the file never touches a disk), else the temporary directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else None
