"""The in-process engine: `LocalEngine` and the parts it is built from.

Modules: `engine.py` (the scheduler and `generate`/`stream`/`agenerate`), `worker.py` (the worker
thread every concurrent caller shares), `sequence.py` (request and sample state), `kv.py` (the
slot cache), `prefix_cache.py` (cross-request KV reuse), `spec_decode.py` (speculative decoding),
`fused.py` (the packed decode step), `native_decode.py` with `decode_kernel.c` (its compiled C
kernel). Importing this package loads torch.
"""

from posttrain.engine.local.engine import LocalEngine, WeightsMismatchError
from posttrain.engine.local.kv import WindowSpec
from posttrain.engine.local.spec_decode import SpecConfig

__all__ = ["LocalEngine", "SpecConfig", "WeightsMismatchError", "WindowSpec"]
