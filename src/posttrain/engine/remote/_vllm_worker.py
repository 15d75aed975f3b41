"""Runs inside vLLM's worker processes: the weight-sync extension of vLLM's GPU worker, and the bucket wire format.

Covers: `WeightSyncExtension`, which vLLM mixes into its worker class when the engine is built with
`worker_extension_cls=<this module>.WeightSyncExtension` (vLLM >= 0.10.2 resolves the name in each worker
process and adds the class to the worker's bases), so the learner reaches it by method NAME through
`LLM.collective_rpc("posttrain_load_bucket", args=...)`: vLLM V1's engine core is another process and its
msgpack channel refuses functions, and decodes a tensor argument as a plain [dtype, shape, buffer] list, so
only names, strings, ints and bytes cross it. Each call carries one bucket of weights (engine/remote/
weight_sync.py packs them): a flat byte buffer holding several tensors back to back, described by `entries`
([name, dtype, shape, byte offset] lists), delivered by one of two transports:
- "cuda_ipc": the buffer lives on the learner's GPU; `handle` is the pickled CUDA IPC handle of it
  (torch.multiprocessing's `reduce_tensor`), opened here without a copy through the host;
- "host": the buffer is a file in memory-backed storage (/dev/shm); `handle` is its path, read here once.
The worker views each tensor in the buffer, moves the bucket to its device in one copy, and hands the list
to the model's `load_weights` (vLLM's loader: HF names, tensor-parallel sharding, dtype conversion).
Does not cover: packing (the learner side), NCCL broadcast across machines, quantised checkpoints' post-load
processing. Stdlib and torch only: this module is imported in vLLM's processes.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch

# wire names of the dtypes a bucket may carry (msgpack-friendly strings, as vLLM names them)
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TRANSPORTS = ("cuda_ipc", "host")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def unpack(flat: torch.Tensor, entries: list[list[Any]]) -> list[tuple[str, torch.Tensor]]:
    """A flat uint8 buffer [nbytes] and its entries -> (name, tensor view) per entry, no copy."""
    out = []
    for name, dtype, shape, offset in entries:
        dt = DTYPES[dtype]
        numel = 1
        for d in shape:
            numel *= int(d)
        nbytes = numel * torch.empty((), dtype=dt).element_size()
        out.append((name, flat[offset : offset + nbytes].view(dt).view([int(d) for d in shape])))
    return out


def open_bucket(transport: str, handle: Any, nbytes: int) -> torch.Tensor:
    """The bucket's flat uint8 buffer [nbytes], where the transport delivers it (the learner's GPU or host)."""
    if transport == "cuda_ipc":
        rebuild, args = pickle.loads(handle)  # noqa: S301 - written by the learner that started this vLLM
        return rebuild(*args)
    if transport == "host":
        return torch.from_file(handle, shared=False, size=nbytes, dtype=torch.uint8)
    raise ValueError(f"unknown weight transport {transport!r} (one of {', '.join(TRANSPORTS)})")


class WeightSyncExtension:
    """Mixed into vLLM's worker class (`self` is the worker: `self.model_runner.model`, `self.device`)."""

    def posttrain_load_bucket(self, transport: str, handle: Any, nbytes: int, entries: list[list[Any]]) -> int:
        """Load one bucket of weights into this worker's model -> how many tensors it held."""
        flat = open_bucket(transport, handle, nbytes)
        device = getattr(self, "device", None) or flat.device  # vLLM's GPU worker sets `device`
        flat = flat.to(device, non_blocking=False)  # one copy (none when already there)
        weights = unpack(flat, entries)
        self.model_runner.model.load_weights(weights=weights)  # type: ignore[attr-defined]
        if flat.is_cuda:
            torch.cuda.synchronize(flat.device)  # the learner frees the buffer when this call returns
        return len(weights)
