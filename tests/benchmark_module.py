"""`load_benchmark(name)`: a script of `benchmarks/` imported as a module, for tests of its pure functions.

Registered in `sys.modules` under `<name>_bench` before it runs (its dataclasses look their module up), with
`benchmarks/` on `sys.path` while it loads (a benchmark may import its siblings by name, as engine.py does).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """`benchmarks/<name>.py`, loaded afresh on each call (a test that changes a module's globals changes its own)."""
    key = f"{name}_bench"
    spec = importlib.util.spec_from_file_location(key, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module
