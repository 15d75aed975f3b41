"""The in-process engine: `LocalEngine` and the parts it is built from.

Modules: `engine.py` (the facade: `submit`/`step`, `generate`/`stream`/`agenerate`, the step loop),
its parts as nano-vllm splits an engine: `scheduler.py` (queues, admission, retirement), `rows.py` (the
row allocator over the slot caches), `runner.py` (the forwards: prefill, decode, greedy runs,
verification), `sampler.py`, `emit.py` (stop strings, finish, stream deltas), `speculator.py` (the
speculative step), `counters.py` (typed counters, `metrics()`), `threads.py` (who drives the engine),
`weights.py` (`load_weights`); `worker.py` (the worker thread every concurrent caller shares),
`sequence.py` (request and sample state), `kv.py` (the slot cache), `prefix_cache.py` (cross-request
KV reuse), `spec_decode.py` (proposers and the acceptance rule), `fused.py` (the packed decode step),
`derived.py` (the one owner of weight-derived copies), `precision.py` (bf16 / int8 serving copies),
`native_decode.py` with `decode_kernel.c` (the compiled C kernel). Importing this package loads torch.
"""

from posttrain.engine.local.engine import LocalEngine
from posttrain.engine.local.kv import WindowSpec
from posttrain.engine.local.spec_decode import SpecConfig
from posttrain.engine.local.weights import WeightsMismatchError

__all__ = ["LocalEngine", "SpecConfig", "WeightsMismatchError", "WindowSpec"]
