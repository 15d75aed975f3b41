"""The decode step as one compiled C function: the engine's batch-1 (small-batch) fast path.

Covers: a C kernel for the one-token decode forward of the native Llama/Qwen2
model in float32 over the engine's plain slot cache, built on first use with
the system C compiler (`cc -O3 -march=native`, about a second) into
`$POSTTRAIN_CACHE/kernels/` (default `~/.cache/posttrain/kernels`), keyed by a
hash of its source and flags, and called through ctypes on the packed weights
of `engine/fused.py`.

Why: at the sizes posttrain decodes on a CPU one token of one sequence costs a
few hundred tiny PyTorch kernels (~3-5 us of dispatch each), and that
overhead, not arithmetic, sets batch-1 latency. One C call per step streams
each weight matrix once (rows of several sequences share the pass), keeps the
activations in L1, and does RMSNorm, RoPE, attention, SwiGLU and the residual
adds in the same loops. Larger batches are compute-bound and go to MKL
through `FusedDecoder.step` instead.
Numerics: the same maths in float32 with a different summation order (and FMA
contraction), so logits agree with the reference forward to ~1e-6; tests check
it against `CausalLM.forward` and the learner's logprobs.

Falls back (returns None from `load_kernel`, and the engine uses the PyTorch
path) when there is no C compiler, the build fails, or
`POSTTRAIN_NATIVE_KERNELS=0`; the reason is logged once.
Does not cover: prefill, speculative verification, cascade rows, sliding
windows, dtypes other than float32, non-x86/ARM quirks beyond what `-march=native` gives.
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
from pathlib import Path

log = logging.getLogger(__name__)

CFLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-std=c11")

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* y[r, :] += x[r, :] @ W  for r < b;  W is [K, N] row-major, streamed once for all rows. */
static void gemv_acc(int b, int K, int N, const float *restrict x, const float *restrict W, float *restrict y) {
    int k = 0;
    for (; k + 4 <= K; k += 4) {
        const float *w0 = W + (size_t)k * N, *w1 = w0 + N, *w2 = w1 + N, *w3 = w2 + N;
        for (int r = 0; r < b; r++) {
            const float *xr = x + (size_t)r * K + k;
            const float x0 = xr[0], x1 = xr[1], x2 = xr[2], x3 = xr[3];
            float *restrict yr = y + (size_t)r * N;
            for (int n = 0; n < N; n++) yr[n] += x0 * w0[n] + x1 * w1[n] + x2 * w2[n] + x3 * w3[n];
        }
    }
    for (; k < K; k++) {
        const float *w0 = W + (size_t)k * N;
        for (int r = 0; r < b; r++) {
            const float x0 = x[(size_t)r * K + k];
            float *restrict yr = y + (size_t)r * N;
            for (int n = 0; n < N; n++) yr[n] += x0 * w0[n];
        }
    }
}

/* out[r, :] = h[r, :] * rsqrt(mean(h[r, :]^2) + eps)  (the norm's weight is folded into the next matrix) */
static void rms_scale(int b, int H, const float *h, float *out, float eps) {
    for (int r = 0; r < b; r++) {
        const float *hr = h + (size_t)r * H;
        float ss = 0.f;
        for (int i = 0; i < H; i++) ss += hr[i] * hr[i];
        const float s = 1.0f / sqrtf(ss / (float)H + eps);
        for (int i = 0; i < H; i++) out[(size_t)r * H + i] = hr[i] * s;
    }
}

/* x * cos + rotate_half(x) * sin, in place, for one head of D values */
static void rope(float *x, const float *c, const float *s, int D) {
    const int h = D / 2;
    float tmp[h];
    for (int i = 0; i < h; i++) tmp[i] = x[i];
    for (int i = 0; i < h; i++) x[i] = x[i] * c[i] - x[i + h] * s[i];
    for (int i = 0; i < h; i++) x[i + h] = x[i + h] * c[i + h] + tmp[i] * s[i + h];
}

/*
 * One decode step for b rows.
 * mats: per layer 5 pointers (w_qkv [H, (Hq+2Hkv)D], b_qkv [(Hq+2Hkv)D] or NULL, w_o [HqD, H],
 *       w_gu [H, 2I], w_down [I, H]), then w_head [H, V].
 * kc, vc: per layer the cache base pointer, laid out [row, Hkv, slot, D] with row stride
 *         Hkv*slots*D. Row r's new token goes to slot starts[r] and attends to slots 0..starts[r].
 * rope_cos/rope_sin: [L, D] tables; pos[r] selects the row.
 * ids: [b] token ids; embed: [V, H]. logits: [b, V] out.
 */
int pt_decode_step(int b, int n_layers, int H, int Hq, int Hkv, int D, int I, int V,
                   const float *const *mats, float *const *kc, float *const *vc, int64_t slots,
                   const int64_t *starts, const int64_t *pos, const float *rope_cos, const float *rope_sin,
                   const int64_t *ids, const float *embed, float eps, float *logits) {
    const int nq = Hq * D, nk = Hkv * D, nqkv = nq + 2 * nk, rep = Hq / Hkv;
    int64_t span = 0;
    for (int r = 0; r < b; r++) if (starts[r] + 1 > span) span = starts[r] + 1;
    size_t need = (size_t)b * (H + H + nqkv + nq + 2 * (size_t)I + I) + (size_t)span;
    float *buf = (float *)malloc(need * sizeof(float));
    if (!buf) return -1;
    float *h = buf, *x = h + (size_t)b * H, *qkv = x + (size_t)b * H, *att = qkv + (size_t)b * nqkv;
    float *gu = att + (size_t)b * nq, *act = gu + (size_t)b * 2 * I, *sc = act + (size_t)b * I;
    for (int r = 0; r < b; r++) memcpy(h + (size_t)r * H, embed + (size_t)ids[r] * H, sizeof(float) * H);
    const int64_t row_stride = (int64_t)Hkv * slots * D, head_stride = slots * D;
    for (int l = 0; l < n_layers; l++) {
        const float *const *m = mats + 5 * l;
        rms_scale(b, H, h, x, eps);
        if (m[1]) { for (int r = 0; r < b; r++) memcpy(qkv + (size_t)r * nqkv, m[1], sizeof(float) * nqkv); }
        else memset(qkv, 0, sizeof(float) * (size_t)b * nqkv);
        gemv_acc(b, H, nqkv, x, m[0], qkv);
        for (int r = 0; r < b; r++) {
            float *q = qkv + (size_t)r * nqkv, *k = q + nq, *v = k + nk;
            const float *c = rope_cos + pos[r] * D, *s = rope_sin + pos[r] * D;
            for (int j = 0; j < Hq; j++) rope(q + j * D, c, s, D);
            for (int g = 0; g < Hkv; g++) rope(k + g * D, c, s, D);
            const int64_t slot = starts[r], n = slot + 1;
            float *orow = att + (size_t)r * nq;
            for (int g = 0; g < Hkv; g++) {
                float *K = kc[l] + r * row_stride + g * head_stride, *Vv = vc[l] + r * row_stride + g * head_stride;
                memcpy(K + slot * D, k + g * D, sizeof(float) * D);
                memcpy(Vv + slot * D, v + g * D, sizeof(float) * D);
                for (int j = 0; j < rep; j++) {
                    const float *qh = q + (g * rep + j) * D;
                    float mx = -INFINITY;
                    for (int64_t t = 0; t < n; t++) {
                        const float *kt = K + t * D;
                        float a = 0.f;
                        for (int i = 0; i < D; i++) a += qh[i] * kt[i];
                        sc[t] = a;
                        if (a > mx) mx = a;
                    }
                    float z = 0.f;
                    for (int64_t t = 0; t < n; t++) { sc[t] = expf(sc[t] - mx); z += sc[t]; }
                    const float inv = 1.0f / z;
                    float *o = orow + (g * rep + j) * D;
                    for (int i = 0; i < D; i++) o[i] = 0.f;
                    for (int64_t t = 0; t < n; t++) {
                        const float p = sc[t] * inv, *vt = Vv + t * D;
                        for (int i = 0; i < D; i++) o[i] += p * vt[i];
                    }
                }
            }
        }
        gemv_acc(b, nq, H, att, m[2], h);  /* residual add: h += attention @ W_o */
        rms_scale(b, H, h, x, eps);
        memset(gu, 0, sizeof(float) * (size_t)b * 2 * I);
        gemv_acc(b, H, 2 * I, x, m[3], gu);
        for (int r = 0; r < b; r++) {
            const float *g = gu + (size_t)r * 2 * I, *u = g + I;
            float *a = act + (size_t)r * I;
            for (int i = 0; i < I; i++) a[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        }
        gemv_acc(b, I, H, act, m[4], h);  /* residual add: h += silu(gate) * up @ W_down */
    }
    rms_scale(b, H, h, x, eps);
    memset(logits, 0, sizeof(float) * (size_t)b * V);
    gemv_acc(b, H, V, x, mats[5 * n_layers], logits);
    free(buf);
    return 0;
}
"""


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
    key = hashlib.sha256("\0".join((SOURCE, cc, *CFLAGS)).encode()).hexdigest()[:16]
    root = _cache_root()
    lib = root / f"decode-{key}.so"
    if not lib.exists():
        try:
            root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                src = Path(tmp) / "decode.c"
                src.write_text(SOURCE)
                out = Path(tmp) / "decode.so"
                proc = subprocess.run([cc, *CFLAGS, "-o", str(out), str(src), "-lm"], capture_output=True, text=True, timeout=120)
                if proc.returncode != 0:
                    log.warning("building the native decode kernel failed, using PyTorch kernels: %s", proc.stderr.strip()[-2000:])
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
    fn = dll.pt_decode_step
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    fn.argtypes = [i32] * 8 + [p, p, p, i64, p, p, p, p, p, p, ctypes.c_float, p]
    fn.restype = i32
    return dll
