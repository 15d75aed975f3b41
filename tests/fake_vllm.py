"""A stand-in for vLLM's offline `LLM` as vLLM V1 (0.10-0.33) runs it, for tests without a GPU.

What makes it faithful where the sync protocol can break:
- the engine core runs in ANOTHER PROCESS (spawned), so nothing the client holds (functions, objects, the
  learner's tensors) is visible to the worker except through the channel;
- every call crosses that channel msgpack-encoded as vLLM's `MsgpackEncoder` does with insecure serialisation
  off (the default): a function or any other non-native object is refused with vLLM's TypeError; a tensor is
  encoded as (dtype, shape, raw bytes or an index into the side buffers) through `.numpy()` (a CUDA tensor
  fails there, as in vLLM); the core decodes the arguments of a utility call WITHOUT a type, so a tensor
  argument arrives as a plain [dtype, shape, buffer] list, as it does in vLLM;
- `collective_rpc` takes a method NAME, looked up on a worker whose class has the `worker_extension_cls`
  (resolved by its qualified name in the core process) among its bases, as vLLM's worker wrapper does;
- `sleep` needs `enable_sleep_mode`; `wake_up(tags=...)`; `reset_prefix_cache`; LoRA requests.
The worker's model records what `load_weights` receives (real tensors, or a TypeError as vLLM's loader would
raise on a list). `events()` is the core's ordered log; `messages` the size in bytes of each request sent.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import traceback
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import msgspec
import torch

CUSTOM_TYPE_RAW_VIEW = 3  # vLLM's ext code for an inline buffer
SIZE_THRESHOLD = 256  # vLLM's VLLM_MSGPACK_ZERO_COPY_THRESHOLD default: larger buffers travel as side frames


class V1Encoder:
    """vLLM V1's `MsgpackEncoder` with VLLM_ALLOW_INSECURE_SERIALIZATION unset (the tensor and refusal paths)."""

    def __init__(self) -> None:
        self.encoder = msgspec.msgpack.Encoder(enc_hook=self.enc_hook)
        self.aux: list | None = None

    def encode(self, obj: Any) -> list[bytes]:
        self.aux = bufs = [b""]
        try:
            bufs[0] = self.encoder.encode(obj)
            return [bytes(b) for b in bufs]
        finally:
            self.aux = None

    def enc_hook(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            arr = obj.flatten().contiguous().view(torch.uint8).numpy()  # vLLM's own call: host tensors only
            if obj.nbytes < SIZE_THRESHOLD:
                data: Any = msgspec.msgpack.Ext(CUSTOM_TYPE_RAW_VIEW, arr.data)
            else:
                data = len(self.aux)
                self.aux.append(arr.data)
            return str(obj.dtype).removeprefix("torch."), obj.shape, data
        raise TypeError(f"Object of type {type(obj)} is not serializable. Set VLLM_ALLOW_INSECURE_SERIALIZATION=1 to "
                        "allow fallback to pickle-based serialization.")


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == CUSTOM_TYPE_RAW_VIEW:
        return bytes(data)
    raise NotImplementedError(f"Extension type code {code} is not supported")


DECODER = msgspec.msgpack.Decoder(ext_hook=_ext_hook)  # untyped, as the core decodes utility arguments


def _send(conn, frames: list[bytes]) -> None:
    conn.send(len(frames))
    for f in frames:
        conn.send_bytes(f)


def _recv(conn) -> Any:
    frames = [conn.recv_bytes() for _ in range(conn.recv())]
    return DECODER.decode(frames[0])  # side-frame indices stay ints: nothing here asks for a typed tensor


# -- the engine core (another process) ----------------------------------------------------------------------
class FakeModel:
    """vLLM's model as the weight loader sees it: `load_weights` takes (name, tensor) pairs."""

    def __init__(self, events: list) -> None:
        self.events, self.params = events, {}

    def load_weights(self, weights) -> set[str]:
        loaded = set()
        for name, w in weights:
            if not isinstance(w, torch.Tensor):  # vLLM's loaders do param.data.copy_(w)
                raise TypeError(f"load_weights got {type(w).__name__} for {name}, not a tensor")
            self.params[name] = w.detach().to("cpu", copy=True)
            loaded.add(name)
        self.events.append(["load", len(loaded)])
        return loaded


class FakeGPUWorker:
    """vLLM's worker as an extension sees it: `model_runner.model`, `device`."""

    def __init__(self, events: list) -> None:
        self.device = torch.device("cpu")
        self.model_runner = SimpleNamespace(model=FakeModel(events))

    def fake_arg_types(self, *args) -> list[str]:
        """The type each argument arrived as (test-only method)."""
        return [type(a).__name__ for a in args]

    def fake_loaded(self) -> dict:
        """name -> [dtype, shape, sum in float64]: what the model now holds (test-only method)."""
        return {n: [str(t.dtype).removeprefix("torch."), list(t.shape), float(t.double().sum())]
                for n, t in self.model_runner.model.params.items()}


def _worker_class(qualname: str | None) -> type:
    if not qualname:
        return FakeGPUWorker
    module, _, name = qualname.rpartition(".")
    ext = getattr(importlib.import_module(module), name)
    return type("WorkerWithExtension", (FakeGPUWorker, ext), {})


def core_main(conn, kwargs: dict) -> None:
    events: list = []
    worker = _worker_class(kwargs.get("worker_extension_cls"))(events)
    encoder = V1Encoder()
    while True:
        try:
            op, payload = _recv(conn)
        except EOFError:
            return
        try:
            if op == "shutdown":
                _send(conn, encoder.encode(["ok", None]))
                return
            result = _handle(worker, events, kwargs, op, payload)
            reply = ["ok", result]
        except Exception as exc:  # noqa: BLE001 - the client re-raises it, as vLLM's utility calls do
            reply = ["error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"]
        _send(conn, encoder.encode(reply))


def _handle(worker, events: list, kwargs: dict, op: str, payload: list) -> Any:
    if op == "collective_rpc":
        method, _timeout, args, kw = payload
        if not isinstance(method, str):
            raise TypeError(f"collective_rpc method must be a name here, got {type(method).__name__}")
        return [getattr(worker, method)(*args, **(kw or {}))]  # one worker (tensor parallel 1)
    if op == "generate":
        prompts, sp, lora = payload
        events.append(["generate", lora])
        out = {"index": 0, "text": "7", "token_ids": [7], "logprobs": [[7, -0.1]], "finish_reason": "stop"}
        return [[dict(out, index=i) for i in range(sp["n"])] for _ in prompts]
    if op == "sleep":
        if not kwargs.get("enable_sleep_mode"):
            raise AssertionError("Sleep mode is not enabled in the model config")
        events.append(["sleep", payload[0]])
        return None
    if op == "wake_up":
        events.append(["wake", payload[0]])
        return None
    if op == "reset_prefix_cache":
        events.append(["reset"])
        return True
    if op == "events":
        return events
    raise ValueError(f"unknown op {op}")


# -- the client (this process) -------------------------------------------------------------------------------
@dataclass
class FakeLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


class FakeLLM:
    """Stands in for `vllm.LLM`; every call goes through the encoder to the core process."""

    instances: list[FakeLLM] = []
    PLAIN = ("worker_extension_cls", "enable_sleep_mode", "dtype", "model")

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        self.messages: list[int] = []  # bytes of every request this client sent
        self.encoder = V1Encoder()
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        plain = {k: v for k, v in kwargs.items() if k in self.PLAIN}
        self.proc = ctx.Process(target=core_main, args=(child, plain), daemon=True)
        self.proc.start()
        child.close()
        FakeLLM.instances.append(self)

    def _call(self, op: str, *payload: Any) -> Any:
        frames = self.encoder.encode([op, list(payload)])  # raises before sending, as vLLM's client does
        self.messages.append(sum(len(f) for f in frames))
        _send(self.conn, frames)
        status, result = _recv(self.conn)
        if status == "error":
            raise RuntimeError(f"engine core: {result}")
        return result

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        return self._call("collective_rpc", method, timeout, list(args), kwargs or {})

    def generate(self, prompts, sampling_params, use_tqdm=True, lora_request=None):
        lora = None if lora_request is None else [lora_request.lora_name, lora_request.lora_int_id]
        groups = self._call("generate", prompts, sampling_params, lora)
        return [SimpleNamespace(outputs=[SimpleNamespace(index=o["index"], text=o["text"], token_ids=o["token_ids"],
                                                         logprobs=[{t: SimpleNamespace(logprob=lp)}
                                                                   for t, lp in o["logprobs"]],
                                                         finish_reason=o["finish_reason"]) for o in g])
                for g in groups]

    def reset_prefix_cache(self):
        return self._call("reset_prefix_cache")

    def sleep(self, level=1):
        return self._call("sleep", level)

    def wake_up(self, tags=None):
        return self._call("wake_up", tags)

    def events(self) -> list:
        return [tuple(e) for e in self._call("events")]

    def shutdown(self) -> None:
        if self.proc.is_alive():
            try:
                self._call("shutdown")
            except (EOFError, BrokenPipeError, OSError):
                pass
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
