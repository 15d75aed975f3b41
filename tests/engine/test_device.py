"""The local engine allocates on its device: cache, ids, masks, index tensors, generators and sampling buffers.

Without a GPU the plumbing is proven two ways: (1) on CPU, every tensor factory the engine's modules call during
a run (prefill, cascade decode, plain decode, the prefix cache, ragged chunks, several parameter groups) is
audited and must name the engine's device; (2) an engine on the `meta` device admits, prefills and samples, so
any elementwise mix of a host tensor with the model's would raise, up to the first read back to the host.
Also: the C kernels are chosen by the device, never probed, and a mode that cannot run off the CPU is a one-line
error.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

import posttrain
from posttrain.config import ConfigError, load_config
from posttrain.engine.local import LocalEngine
from posttrain.engine.local.engine import EngineDeviceError
from posttrain.engine.local.kv import SlotCache
from posttrain.models import load_model
from posttrain.types import SamplingParams

FACTORIES = {torch.zeros, torch.empty, torch.full, torch.tensor, torch.arange, torch.ones, torch.randn, torch.rand}
PKG = Path(posttrain.__file__).parent
AUDITED = [PKG / "engine" / "local" / n for n in ("engine.py", "kv.py", "prefix_cache.py", "worker.py", "spec_decode.py")]
AUDITED.append(PKG / "models" / "llama.py")


class FactoryAudit(TorchFunctionMode):
    """Records every tensor factory called from the audited files without `device=` equal to `want`."""

    def __init__(self, want: torch.device) -> None:
        super().__init__()
        self.want, self.calls, self.offenders = want, 0, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES:
            frame = sys._getframe(1)
            where = Path(frame.f_code.co_filename)
            if where in AUDITED:
                self.calls += 1
                dev = kwargs.get("device")
                if dev is None or torch.device(dev) != self.want:
                    self.offenders.append(f"{where.name}:{frame.f_lineno} {func.__name__}(device={dev})")
        return func(*args, **kwargs)


def _exercise(engine: LocalEngine) -> None:
    """Paths that allocate: cascade groups, a lone sample, ragged prefill chunks, mixed params, prefix hits."""
    engine.generate(["12+30=", "7*8="], SamplingParams(n=4, max_tokens=5, temperature=1.0))
    engine.generate(["12+30=", "1+1=", "100-1="], SamplingParams(n=1, max_tokens=4, temperature=0.0))
    engine.submit("3+4=", SamplingParams(n=2, max_tokens=3, temperature=0.7, seed=3))
    engine.submit("3+4=", SamplingParams(n=2, max_tokens=3, temperature=1.0, top_k=5))
    while engine.has_unfinished():
        engine.step()


def test_every_allocation_names_the_engines_device(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    engine = LocalEngine(model, tok, device="cpu", prefill_chunk=4, max_prefill_tokens=8)
    audit = FactoryAudit(torch.device("cpu"))
    with audit:
        _exercise(engine)
    assert audit.calls > 20  # the audit saw the engine's allocations ...
    assert audit.offenders == []  # ... and each one named the device
    held = [*engine.kv.k, *engine.kv.v, *engine.pkv.k, *engine.pkv.v, *engine.prefix.k, *engine.prefix.v]
    assert all(t.device == engine.device for t in held)
    assert engine.generator.device == engine.device


def test_the_audit_catches_a_host_allocation(tiny_model_dir, monkeypatch):
    """Planted failure: a factory without `device=` in the engine's modules is reported."""
    import posttrain.engine.local.kv as kv

    real = kv.SlotCache.clear_row

    def clear_row(self, row):  # a host allocation, called from kv.py's own frame below
        return real(self, row)

    src = "def clear_row(self, row):\n    torch.zeros(1)\n"
    code = compile(src, kv.__file__, "exec")
    ns: dict = {"torch": torch}
    exec(code, ns)
    monkeypatch.setattr(kv.SlotCache, "clear_row", ns["clear_row"])
    model, tok = load_model(tiny_model_dir)
    engine = LocalEngine(model, tok)
    audit = FactoryAudit(torch.device("cpu"))
    with audit:
        engine.generate(["1+1="], SamplingParams(max_tokens=2))
    assert any("kv.py" in o and "device=None" in o for o in audit.offenders)


def test_an_engine_on_another_device_keeps_every_tensor_there(tiny_model_dir, monkeypatch):
    """`meta` stands in for a GPU: the model moves there, the C kernels are off, and admission, chunked prefill,
    the prefix-cache lookup and the cache's masks and positions run without one host tensor meeting a device
    one, up to the first read of a value (a meta tensor has none). torch has no meta generator: the engine's
    is made on the host here."""
    import posttrain.engine.local.engine as engine_module

    class HostGenerators:  # engine.py's `torch`, but its generators are made on the host
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def Generator(device=None):  # noqa: N802 - torch's name
            return torch.Generator(device="cpu" if str(device) == "meta" else device)

    monkeypatch.setattr(engine_module, "torch", HostGenerators())
    model, tok = load_model(tiny_model_dir)
    engine = LocalEngine(copy.deepcopy(model), tok, device="meta", prefill_chunk=4, max_prefill_tokens=8)
    assert next(engine.model.parameters()).device.type == "meta" and engine.fused is None
    engine.submit("12+30=", SamplingParams(n=4, max_tokens=3, temperature=0.0))
    engine.submit("123456789+1=", SamplingParams(n=1, max_tokens=3, temperature=0.0))
    # the first read of a value: the rope table's length, inside the model's forward, after admission, the
    # prefix-cache lookup, the cache's masks and positions and the embedding all ran on the device
    with pytest.raises(RuntimeError, match="cannot be called on meta tensors"):
        engine.step()
    assert len(engine.prefilling) == 2 and engine.pkv.k[0].device.type == "meta"
    assert all(t.device.type == "meta" for t in engine.pkv.k + engine.kv.k + engine.prefix.k)


def test_the_c_kernels_are_chosen_by_device():
    cfg = load_model.__globals__["ModelConfig"](vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                num_attention_heads=2, num_key_value_heads=1)
    assert SlotCache(cfg, 2, 8).native and not SlotCache(cfg, 2, 8, device="meta").native


def test_modes_that_need_the_cpu_are_one_line_errors(tiny_model_dir):
    with pytest.raises(ConfigError, match="precision") as exc:
        load_config(None, ["engine.device='cuda'", "rl.device='cuda'", "engine.precision='int8'"])
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="fused_decode") as exc:
        load_config(None, ["engine.device='cuda'", "rl.device='cuda'", "engine.fused_decode=true"])
    assert "\n" not in str(exc.value)
    load_config(None, ["engine.device='cuda'", "rl.device='cuda'"])  # fp32 on cuda is fine, the kernel unused
    load_config(None, ["engine.device='cuda'", "rl.device='cuda'", "engine.fused_decode=false"])
    model, tok = load_model(tiny_model_dir)
    with pytest.raises(EngineDeviceError, match="CPU only"):
        LocalEngine(copy.deepcopy(model), tok, device="meta", precision="bf16")
