"""The decode forward as one compiled C function: the engine's batch-1 (small-batch) fast path.

Covers: building and loading the C kernel `pt_forward_tokens` (and
`pt_forward_tokens_q`, the same forward on int8 or bf16 weight panels with
per-column scales, dequantised in registers: engine/local/precision.py, and
`pt_decode_greedy`, a loop of one-token forwards with the argmax and its
logprob in C: a lone greedy sequence's decode with no Python between tokens)
(`decode_kernel.c`, shipped beside this module as package data and read when
the kernel is built) for the forward of a few new tokens
per row of the native Llama/Qwen2 model in float32 over the engine's plain
slot cache (one token per row when decoding, 1 + k when verifying speculative
drafts), built on first use with the system C compiler (`cc -O3
-march=native`, about a second) into `$POSTTRAIN_CACHE/kernels/` (default
`~/.cache/posttrain/kernels`), keyed by a hash of its source, compiler and
flags, installed atomically, and called through ctypes on the panel-packed
weights of `engine/local/fused.py`.

Why: at the sizes posttrain decodes on a CPU one token of one sequence costs a
few hundred tiny PyTorch kernels (~3-5 us of dispatch each), and that
overhead, not arithmetic, sets batch-1 latency. One C call per forward streams
each weight panel once for all its tokens (register-tiled FMA, the K loop
split so that even one row hides FMA latency), keeps the activations in L1,
and does RMSNorm, RoPE, attention (an 8-lane exp in the softmax) and SwiGLU in
the same loops. Wider forwards are compute-bound and go to MKL through
`FusedDecoder.step` or the model's forward instead.
Numerics: the same maths in float32 with a different summation order (and FMA
contraction; the vector exp is within 2 ulp of libm's), so logits agree with
the reference forward to ~1e-6; tests check it against `CausalLM.forward` and
the learner's logprobs.

Non-temporal weight prefetches for forwards that read each panel once are
chosen per CPU (`stream_prefetch_default`): they help an AMD Zen 4 a little
and slow an Intel Xeon with a large shared L3 down 4x.

Falls back (returns None from `load_kernel`, and the engine uses the PyTorch
path) when there is no C compiler, the build fails, or
`POSTTRAIN_NATIVE_KERNELS=0`; the reason is logged once.
Does not cover: prefill, cascade rows, sliding windows, activations or a
KV cache in anything but float32, compilers other than GCC/Clang (the code uses their vector extensions).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

log = logging.getLogger(__name__)

CFLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-std=gnu11", "-ffp-contract=fast")

# package data (pyproject's [tool.setuptools.package-data]): found in a source tree, a wheel or an editable install
KERNEL_SOURCE: Traversable = resources.files(__package__).joinpath("decode_kernel.c")


def kernel_source() -> str:
    """The kernel's C source, as shipped with the package."""
    return KERNEL_SOURCE.read_text(encoding="utf-8")


def _cache_root() -> Path:
    return Path(os.environ.get("POSTTRAIN_CACHE") or Path.home() / ".cache" / "posttrain") / "kernels"


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


@functools.cache
def load_kernel() -> ctypes.CDLL | None:
    """The compiled kernel (built once per source/flags/compiler), or None with the reason logged."""
    if os.environ.get("POSTTRAIN_NATIVE_KERNELS", "1") == "0":
        log.info("native decode kernel disabled by POSTTRAIN_NATIVE_KERNELS=0")
        return None
    cc = _compiler()
    if cc is None:
        log.warning("no C compiler found (cc/gcc/clang): the engine decodes with PyTorch kernels (slower at batch 1)")
        return None
    try:
        source = kernel_source()
    except OSError as e:  # an installation without its package data
        log.warning("the native decode kernel's source %s is missing (%s): using PyTorch kernels", KERNEL_SOURCE, e)
        return None
    key = hashlib.sha256("\0".join((source, cc, *CFLAGS)).encode()).hexdigest()[:16]
    root = _cache_root()
    lib = root / f"decode-{key}.so"
    if not lib.exists():
        try:
            root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                src = Path(tmp) / "decode.c"
                src.write_text(source)
                out = Path(tmp) / "decode.so"
                proc = subprocess.run([cc, *CFLAGS, "-o", str(out), str(src), "-lm"], capture_output=True, text=True, timeout=120)
                if proc.returncode != 0:
                    log.warning(
                        "building the native decode kernel failed, using PyTorch kernels: %s", proc.stderr.strip()[-2000:]
                    )
                    return None
                os.replace(out, lib)  # atomic: concurrent builders never load a half-written file
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("building the native decode kernel failed, using PyTorch kernels: %s", e)
            return None
    try:
        dll = ctypes.CDLL(str(lib))
    except OSError as e:
        log.warning("loading the native decode kernel failed, using PyTorch kernels: %s", e)
        return None
    fn = dll.pt_forward_tokens
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    fn.argtypes = [i32] * 8 + [p, p, p, i64, p, p, p, p, p, p, p, ctypes.c_float, p]
    fn.restype = i32
    fq = dll.pt_forward_tokens_q  # the same forward on int8 / bf16 panels: a leading weight-type code
    fq.argtypes = [i32] * 9 + [p, p, p, i64, p, p, p, p, p, p, p, ctypes.c_float, p]
    fq.restype = i32
    fg = dll.pt_decode_greedy  # a whole greedy decode of one row: forward, argmax and logprob per step, in C
    fg.argtypes = [i32] * 9 + [p, p, p, i64, i64, i64, p, p, i64, p, ctypes.c_float, p, i32, p, p, p]
    fg.restype = i32
    dll.pt_set_stream_prefetch.argtypes = [i32]
    dll.pt_set_stream_prefetch.restype = None
    dll.pt_cascade_attend.argtypes = [i32] * 5 + [p, ctypes.c_float, p, p, i64, i64, p, p, p, p, i64, i64, p, p, p]
    dll.pt_cascade_attend.restype = i32
    dll.pt_stream_read.argtypes = [p, i64, i32]
    dll.pt_stream_read.restype = ctypes.c_double
    dll.pt_set_stream_prefetch(int(stream_prefetch_default()))
    return dll


def cpu_vendor() -> str:
    """The CPU's vendor id from /proc/cpuinfo (`AuthenticAMD`, `GenuineIntel`), or "" where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def stream_prefetch_default() -> bool:
    """Whether forwards of up to 4 rows prefetch their weights non-temporally (prefetchnta).

    `POSTTRAIN_STREAM_PREFETCH=1` or `0` decides; unset (or `auto`), only AMD CPUs do: it helped on a Zen 4 and
    hurt badly on an Intel Xeon with a large shared L3 (benchmarks/RESULTS.md; the kernel's comment), and an
    untried CPU gets the plain prefetches that were never slower. A hint only: the numbers are the same either
    way (tested)."""
    value = os.environ.get("POSTTRAIN_STREAM_PREFETCH", "auto").strip().lower()
    if value in ("1", "0"):
        return value == "1"
    if value != "auto":
        log.warning("POSTTRAIN_STREAM_PREFETCH=%r is not 1, 0 or auto: using auto", value)
    return cpu_vendor() == "AuthenticAMD"


def set_stream_prefetch(on: bool) -> None:
    """Switch the loaded kernel's non-temporal weight prefetches (tests and benchmarks' A/B); no-op without it."""
    dll = load_kernel()
    if dll is not None:
        dll.pt_set_stream_prefetch(int(on))
