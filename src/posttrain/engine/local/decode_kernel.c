/* pt_forward_tokens: the decode forward of the native Llama/Qwen2 model for a few new tokens per row,
 * in float32, over the engine's plain slot cache and the panel-packed weights of engine/local/fused.py.
 *
 * Built on first use by engine/local/native_decode.py (`cc -O3 -march=native`, GCC/Clang vector
 * extensions) and called through ctypes; that module's docstring says why it exists and how it
 * falls back. The build cache is keyed by a hash of this file, the compiler and the flags: editing
 * this file rebuilds it. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX__  /* hsum8 (AVX), the int8 widening loads (AVX2) */
#include <immintrin.h>
#endif

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));  /* an unaligned load/store of 8 floats */

typedef int v8i __attribute__((vector_size(32)));

static inline v8 vsplat(float x) { return (v8){x, x, x, x, x, x, x, x}; }
static inline v8 vselect(v8i m, v8 a, v8 b) { return (v8)((m & (v8i)a) | (~m & (v8i)b)); }

/* e^x in eight lanes (Cephes' expf: range reduction by ln 2, a degree-6 polynomial, 2^n through the
 * exponent bits; within 2 ulp of libm's expf), for the softmax and SiLU loops */
static inline v8 exp_v8(v8 x) {
    x = vselect(x > vsplat(88.3762626647949f), vsplat(88.3762626647949f), x);
    x = vselect(x < vsplat(-87.3365447504f), vsplat(-87.3365447504f), x);
    v8 fx = x * vsplat(1.44269504088896341f) + vsplat(0.5f);
    v8 n = __builtin_convertvector(__builtin_convertvector(fx, v8i), v8);  /* truncation toward zero */
    n = n - vselect(n > fx, vsplat(1.0f), vsplat(0.0f));                    /* -> floor */
    x = x - n * vsplat(0.693359375f) - n * vsplat(-2.12194440e-4f);
    v8 y = vsplat(1.9875691500e-4f);
    y = y * x + vsplat(1.3981999507e-3f);
    y = y * x + vsplat(8.3334519073e-3f);
    y = y * x + vsplat(4.1665795894e-2f);
    y = y * x + vsplat(1.6666665459e-1f);
    y = y * x + vsplat(5.0000001201e-1f);
    y = y * (x * x) + x + vsplat(1.0f);
    v8i e = (__builtin_convertvector(n, v8i) + 127) << 23;
    return y * (v8)e;
}

/* x[i] = e^(x[i] - shift), returning the sum */
static float exp_shift_sum(float *x, int64_t n, float shift) {
    v8 acc = vsplat(0.f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8 e = exp_v8(*(v8u *)(x + i) - vsplat(shift));
        *(v8u *)(x + i) = e;
        acc += e;
    }
    float z = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) { x[i] = expf(x[i] - shift); z += x[i]; }
    return z;
}

static inline float hsum(v8 a) {
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

/* a . b in eight lanes (one AVX register): a strict left-to-right float sum cannot be vectorised */
static inline float dot(const float *a, const float *b, int n) {
    v8 acc = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int i = 0;
    for (; i + 8 <= n; i += 8) acc += *(const v8u *)(a + i) * *(const v8u *)(b + i);
    float s = hsum(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y += a * x over n floats */
static inline void axpy(float a, const float *x, float *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) *(v8u *)(y + i) += a * *(const v8u *)(x + i);
    for (; i < n; i++) y[i] += a * x[i];
}

/* acc[r, 0:16] += x[r, :] @ P for r < R: P is one [K, 16] column panel, streamed once for all R rows.
 * The R x 16 accumulators live in registers, and K is split S ways (k = S*j + s go to partial sums s)
 * so that R * 2 * S >= 8 independent FMA chains hide the FMA latency even for a single row. */
/* How far ahead in a weight panel the K loop prefetches, one prefetch per 64-byte line. A forward of 4+ rows
 * (a speculative verify, a wide decode batch) streams 40 MB of 10M-parameter weights per pass, and without it
 * the hardware prefetcher fell behind the 4-row tile: 3.6 ms against 1.8 ms for 3 rows on one core; with it,
 * 1.6 ms (a 6-layer 10M-shape microbenchmark of gemm_acc alone, Intel Xeon). Prefetching only the first line of
 * the S lines a split-K step reads left one row (S = 4) at 19-20 GB/s on a 50M model against 25-26 GB/s with
 * every line prefetched (AMD EPYC Zen 4, one thread; a sum over the same buffer: 26-30 GB/s). A prefetch
 * never faults, past a panel's end included. */
#define PREFETCH_BYTES 4096

/* A weight prefetch: NT = 1 (a forward of up to 4 rows, which reads each panel once, with non-temporal
 * prefetches switched on by pt_set_stream_prefetch) asks for a non-temporal line (prefetchnta), so a pass over
 * weights larger than the caches does not evict what the step reuses. Whether that pays is the CPU's business,
 * so the loader chooses (engine/local/native_decode.py): on the AMD EPYC Zen 4 of the A/B (one thread, greedy
 * batch-1 decode, notes in RESULTS.md) 50M went 7.89 -> 7.40 ms a token, faster in 6 of 6 rounds, and 10M stayed
 * within noise; on an Intel Xeon (AVX-512, large shared L3) the same prefetches made batch-1 decode 3.7-4.6x
 * slower (1M 0.20 -> 0.75 ms, 10M 1.47 -> 6.75, 50M 9.3 -> 38). Wider forwards read each panel once per 4 rows
 * and keep it in cache between passes (NT = 0 always). */
static int stream_nt = 0;

void pt_set_stream_prefetch(int on) { stream_nt = on != 0; }

#define WPREFETCH(addr, NT) ((NT) ? __builtin_prefetch((addr), 0, 0) : __builtin_prefetch((addr)))

static inline __attribute__((always_inline)) void panel_tile(const int R, const int S, const int NT, int K, const float *restrict x,
                                                             int ldx, const float *restrict P, float *restrict acc) {
    v8 a0[4][4], a1[4][4];
    for (int r = 0; r < R; r++) {
        a0[0][r] = *(const v8u *)(acc + r * 16);
        a1[0][r] = *(const v8u *)(acc + r * 16 + 8);
        for (int s = 1; s < S; s++) { a0[s][r] = vsplat(0.f); a1[s][r] = vsplat(0.f); }
    }
    int k = 0;
    for (; k + S <= K; k += S) {
        for (int s = 0; s < S; s++) {
            WPREFETCH(P + (size_t)(k + s) * 16 + PREFETCH_BYTES / 4, NT);  /* every 64-byte row: S rows a step */
            const v8 w0 = *(const v8u *)(P + (size_t)(k + s) * 16), w1 = *(const v8u *)(P + (size_t)(k + s) * 16 + 8);
            for (int r = 0; r < R; r++) {
                const float xv = x[(size_t)r * ldx + k + s];
                a0[s][r] += xv * w0;
                a1[s][r] += xv * w1;
            }
        }
    }
    for (; k < K; k++) {
        const v8 w0 = *(const v8u *)(P + (size_t)k * 16), w1 = *(const v8u *)(P + (size_t)k * 16 + 8);
        for (int r = 0; r < R; r++) {
            const float xv = x[(size_t)r * ldx + k];
            a0[0][r] += xv * w0;
            a1[0][r] += xv * w1;
        }
    }
    for (int r = 0; r < R; r++) {
        for (int s = 1; s < S; s++) { a0[0][r] += a0[s][r]; a1[0][r] += a1[s][r]; }
        *(v8u *)(acc + r * 16) = a0[0][r];
        *(v8u *)(acc + r * 16 + 8) = a1[0][r];
    }
}

/* y[r, :] += x[r, :] @ W for r < b; W packed as ceil(N/16) panels of [K, 16] (zero-padded columns) */
static void gemm_acc(int b, int K, int N, const float *restrict x, const float *restrict W, float *restrict y) {
    const int np = (N + 15) / 16;
    float acc[4 * 16];
    for (int p = 0; p < np; p++) {
        const float *P = W + (size_t)p * K * 16;
        const int n0 = p * 16, w = N - n0 < 16 ? N - n0 : 16;
        for (int r0 = 0; r0 < b; r0 += 4) {
            const int R = b - r0 < 4 ? b - r0 : 4;
            for (int r = 0; r < R; r++)
                for (int c = 0; c < 16; c++) acc[r * 16 + c] = c < w ? y[(size_t)(r0 + r) * N + n0 + c] : 0.f;
            const float *xr = x + (size_t)r0 * K;
            if (b <= 4 && stream_nt) {  /* the panel's only pass: streamed past the caches */
                switch (R) {
                    case 4: panel_tile(4, 1, 1, K, xr, K, P, acc); break;
                    case 3: panel_tile(3, 2, 1, K, xr, K, P, acc); break;
                    case 2: panel_tile(2, 2, 1, K, xr, K, P, acc); break;
                    default: panel_tile(1, 4, 1, K, xr, K, P, acc); break;
                }
            } else {
                switch (R) {
                    case 4: panel_tile(4, 1, 0, K, xr, K, P, acc); break;
                    case 3: panel_tile(3, 2, 0, K, xr, K, P, acc); break;
                    case 2: panel_tile(2, 2, 0, K, xr, K, P, acc); break;
                    default: panel_tile(1, 4, 0, K, xr, K, P, acc); break;
                }
            }
            for (int r = 0; r < R; r++)
                for (int c = 0; c < w; c++) y[(size_t)(r0 + r) * N + n0 + c] = acc[r * 16 + c];
        }
    }
}

/* The quantised panels (wt = 1: int8, wt = 2: bf16 bits), dequantised in registers: 16 weights of row k
 * of a panel -> two v8. The per-column scale is applied once per output, after the K loop. */
typedef signed char c8u __attribute__((vector_size(8), aligned(1)));
typedef unsigned short u8u __attribute__((vector_size(16), aligned(2)));

static inline __attribute__((always_inline)) void wload(const int wt, const void *restrict P, size_t k, v8 *w0, v8 *w1) {
    if (wt == 1) {
        const signed char *p = (const signed char *)P + k * 16;
#ifdef __AVX2__  /* GCC 12 scalarises the char -> float convertvector: say vpmovsxbd + vcvtdq2ps ourselves */
        const __m128i b16 = _mm_loadu_si128((const __m128i *)p);
        *w0 = (v8)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b16));
        *w1 = (v8)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b16, b16)));
#else
        *w0 = __builtin_convertvector(*(const c8u *)p, v8);
        *w1 = __builtin_convertvector(*(const c8u *)(p + 8), v8);
#endif
    } else {  /* bf16 -> f32: the 16 bits are the float's high half */
        const unsigned short *p = (const unsigned short *)P + k * 16;
        *w0 = (v8)(__builtin_convertvector(*(const u8u *)p, v8i) << 16);
        *w1 = (v8)(__builtin_convertvector(*(const u8u *)(p + 8), v8i) << 16);
    }
}

/* acc[r, 0:16] = x[r, :] @ Q for r < R, Q one quantised [K, 16] panel; as panel_tile, from zero */
static inline __attribute__((always_inline)) void panel_tile_q(const int wt, const int R, const int S, const int NT, int K, const float *restrict x,
                                                               int ldx, const void *restrict P, float *restrict acc) {
    v8 a0[4][4], a1[4][4];
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) { a0[s][r] = vsplat(0.f); a1[s][r] = vsplat(0.f); }
    int k = 0;
    for (; k + S <= K; k += S) {
        /* one prefetch per 64-byte line of the S rows this step reads (int8 rows are 16 bytes, bf16 rows 32) */
        for (int off = 0; off < S * 16 * (wt == 1 ? 1 : 2); off += 64)
            WPREFETCH((const char *)P + (size_t)k * 16 * (wt == 1 ? 1 : 2) + PREFETCH_BYTES + off, NT);
        for (int s = 0; s < S; s++) {
            v8 w0, w1;
            wload(wt, P, (size_t)(k + s), &w0, &w1);
            for (int r = 0; r < R; r++) {
                const float xv = x[(size_t)r * ldx + k + s];
                a0[s][r] += xv * w0;
                a1[s][r] += xv * w1;
            }
        }
    }
    for (; k < K; k++) {
        v8 w0, w1;
        wload(wt, P, (size_t)k, &w0, &w1);
        for (int r = 0; r < R; r++) {
            const float xv = x[(size_t)r * ldx + k];
            a0[0][r] += xv * w0;
            a1[0][r] += xv * w1;
        }
    }
    for (int r = 0; r < R; r++) {
        for (int s = 1; s < S; s++) { a0[0][r] += a0[s][r]; a1[0][r] += a1[s][r]; }
        *(v8u *)(acc + r * 16) = a0[0][r];
        *(v8u *)(acc + r * 16 + 8) = a1[0][r];
    }
}

/* y[r, :] += (x[r, :] @ Q) * scale for r < b; Q packed as ceil(N/16) quantised panels of [K, 16],
 * scale [ceil(N/16) * 16] (zero-padded columns) */
static inline __attribute__((always_inline)) void gemm_acc_q(const int wt, int b, int K, int N, const float *restrict x,
                                                             const void *restrict W, const float *restrict scale, float *restrict y) {
    const int np = (N + 15) / 16;
    const size_t esz = wt == 1 ? 1 : 2;
    float acc[4 * 16];
    for (int p = 0; p < np; p++) {
        const void *P = (const char *)W + (size_t)p * K * 16 * esz;
        const float *sc = scale + (size_t)p * 16;
        const int n0 = p * 16, w = N - n0 < 16 ? N - n0 : 16;
        for (int r0 = 0; r0 < b; r0 += 4) {
            const int R = b - r0 < 4 ? b - r0 : 4;
            const float *xr = x + (size_t)r0 * K;
            if (b <= 4 && stream_nt) {  /* the panel's only pass: streamed past the caches */
                switch (R) {
                    case 4: panel_tile_q(wt, 4, 1, 1, K, xr, K, P, acc); break;
                    case 3: panel_tile_q(wt, 3, 2, 1, K, xr, K, P, acc); break;
                    case 2: panel_tile_q(wt, 2, 2, 1, K, xr, K, P, acc); break;
                    default: panel_tile_q(wt, 1, 4, 1, K, xr, K, P, acc); break;
                }
            } else {
                switch (R) {
                    case 4: panel_tile_q(wt, 4, 1, 0, K, xr, K, P, acc); break;
                    case 3: panel_tile_q(wt, 3, 2, 0, K, xr, K, P, acc); break;
                    case 2: panel_tile_q(wt, 2, 2, 0, K, xr, K, P, acc); break;
                    default: panel_tile_q(wt, 1, 4, 0, K, xr, K, P, acc); break;
                }
            }
            for (int r = 0; r < R; r++)
                for (int c = 0; c < w; c++) y[(size_t)(r0 + r) * N + n0 + c] += acc[r * 16 + c] * sc[c];
        }
    }
}

static void gemm_int8(int b, int K, int N, const float *x, const void *W, const float *s, float *y) { gemm_acc_q(1, b, K, N, x, W, s, y); }
static void gemm_bf16(int b, int K, int N, const float *x, const void *W, const float *s, float *y) { gemm_acc_q(2, b, K, N, x, W, s, y); }

#ifdef __AVX__
/* hsum of each of eight accumulators, as eight lanes: s[j] = hsum(a[j]), summed in hsum's own order (each
 * register's halves first, then pairs), so scores are bitwise those of the key-at-a-time loop */
static inline v8 hsum8(const v8 *a) {
    __m256 p[4];
    for (int j = 0; j < 4; j++) {
        const __m256 x = (__m256)a[j], y = (__m256)a[j + 4];
        p[j] = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
    }
    const __m256 q0 = _mm256_hadd_ps(p[0], p[1]), q1 = _mm256_hadd_ps(p[2], p[3]);
    const __m256 r = _mm256_hadd_ps(q0, q1);  /* keys 0-3 in the low half, 4-7 in the high half, in order */
    return (v8)r;
}
#endif

/* sc[t] = q . K[t] for t < n (one query head; K rows of D floats). Eight keys at a time (eight independent
 * accumulators, one transposing reduction: at a 10M model's 128 positions attention was 5% of a batch-1 step,
 * 30% at 1,024), then four, then one; every score summed in hsum's order whichever loop computes it. */
static void scores(const float *q, const float *K, int64_t n, int D, float *sc) {
    if (D % 8 != 0) {
        for (int64_t t = 0; t < n; t++) sc[t] = dot(q, K + t * D, D);
        return;
    }
    int64_t t = 0;
#ifdef __AVX__
    for (; t + 8 <= n; t += 8) {
        const float *kt = K + t * D;
        v8 a[8] = {{0}};
        for (int i = 0; i < D; i += 8) {
            const v8 qv = *(const v8u *)(q + i);
            for (int j = 0; j < 8; j++) a[j] += qv * *(const v8u *)(kt + j * D + i);
        }
        *(v8u *)(sc + t) = hsum8(a);
    }
#endif
    for (; t + 4 <= n; t += 4) {  /* four keys at a time: independent accumulators, q loaded once */
        const float *k0 = K + t * D, *k1 = k0 + D, *k2 = k1 + D, *k3 = k2 + D;
        v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int i = 0; i < D; i += 8) {
            const v8 qv = *(const v8u *)(q + i);
            a0 += qv * *(const v8u *)(k0 + i);
            a1 += qv * *(const v8u *)(k1 + i);
            a2 += qv * *(const v8u *)(k2 + i);
            a3 += qv * *(const v8u *)(k3 + i);
        }
        sc[t] = hsum(a0); sc[t + 1] = hsum(a1); sc[t + 2] = hsum(a2); sc[t + 3] = hsum(a3);
    }
    for (; t < n; t++) sc[t] = dot(q, K + t * D, D);
}

static float max_of(const float *x, int64_t n) {
    float mx = -INFINITY;
    int64_t t = 0;
    v8 m8 = vsplat(-INFINITY);
    for (; t + 8 <= n; t += 8) { const v8 v = *(const v8u *)(x + t); m8 = vselect(v > m8, v, m8); }
    for (int j = 0; j < 8; j++) if (m8[j] > mx) mx = m8[j];
    for (; t < n; t++) if (x[t] > mx) mx = x[t];
    return mx;
}

/* o[0:D] += sum_t p[t] * V[t] for t < n: 32 columns at a time in registers, even and odd keys in separate
 * chains (twice the FMAs in flight), added into o once per block */
static void weighted_sum(const float *p, const float *V, int64_t n, int D, float *o) {
    if (D % 32 != 0) {
        for (int64_t t = 0; t < n; t++) axpy(p[t], V + t * D, o, D);
        return;
    }
    for (int c = 0; c < D; c += 32) {
        v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        int64_t t = 0;
        for (; t + 2 <= n; t += 2) {
            const float *vt = V + t * D + c, *vu = vt + D;
            const float x = p[t], y = p[t + 1];
            a0 += x * *(const v8u *)(vt);
            a1 += x * *(const v8u *)(vt + 8);
            a2 += x * *(const v8u *)(vt + 16);
            a3 += x * *(const v8u *)(vt + 24);
            b0 += y * *(const v8u *)(vu);
            b1 += y * *(const v8u *)(vu + 8);
            b2 += y * *(const v8u *)(vu + 16);
            b3 += y * *(const v8u *)(vu + 24);
        }
        if (t < n) {
            const float *vt = V + t * D + c;
            const float x = p[t];
            a0 += x * *(const v8u *)(vt);
            a1 += x * *(const v8u *)(vt + 8);
            a2 += x * *(const v8u *)(vt + 16);
            a3 += x * *(const v8u *)(vt + 24);
        }
        *(v8u *)(o + c) += a0 + b0; *(v8u *)(o + c + 8) += a1 + b1;
        *(v8u *)(o + c + 16) += a2 + b2; *(v8u *)(o + c + 24) += a3 + b3;
    }
}

/* o = softmax(q . K1[t] for t < n1, then q . K2[t] for t < n2) @ (V1 then V2) for one query head (q already
 * scaled): plain attention over the two key ranges as one sequence. n2 = 0 is attention over one range.
 * sc: n1 + n2 floats of scratch. */
static void attend2(const float *q, const float *K1, const float *V1, int64_t n1, const float *K2, const float *V2,
                    int64_t n2, int D, float *sc, float *o) {
    scores(q, K1, n1, D, sc);
    if (n2 > 0) scores(q, K2, n2, D, sc + n1);
    const float inv = 1.0f / exp_shift_sum(sc, n1 + n2, max_of(sc, n1 + n2));
    for (int i = 0; i < D; i++) o[i] = 0.f;
    weighted_sum(sc, V1, n1, D, o);
    if (n2 > 0) weighted_sum(sc + n1, V2, n2, D, o);
    for (int i = 0; i < D; i++) o[i] *= inv;
}

/* o = softmax(q . K[t] for t < n) @ V for one query head (the 1/sqrt(D) scale is in q); sc: n floats of scratch */
static void attend(const float *q, const float *K, const float *V, int64_t n, int D, float *sc, float *o) {
    attend2(q, K, V, n, NULL, NULL, 0, D, sc, o);
}

/* out[r, :] = h[r, :] * rsqrt(mean(h[r, :]^2) + eps)  (the norm's weight is folded into the next matrix) */
static void rms_scale(int b, int H, const float *h, float *out, float eps) {
    for (int r = 0; r < b; r++) {
        const float *hr = h + (size_t)r * H;
        const float ss = dot(hr, hr, H);
        const float s = 1.0f / sqrtf(ss / (float)H + eps);
        for (int i = 0; i < H; i++) out[(size_t)r * H + i] = hr[i] * s;
    }
}

/* rms_scale, then times the norm's weight g (the quantised layouts cannot fold it into their columns) */
static void rms_scale_g(int b, int H, const float *h, float *out, float eps, const float *g) {
    rms_scale(b, H, h, out, eps);
    for (int r = 0; r < b; r++)
        for (int i = 0; i < H; i++) out[(size_t)r * H + i] *= g[i];
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
 * One forward of M new tokens (several per cache row for speculative verification, one for decode).
 * wt = 0 (fp32, pt_forward_tokens): mats per layer 5 pointers (w_qkv [H, (Hq+2Hkv)D], b_qkv
 *       [(Hq+2Hkv)D] or NULL, w_o [HqD, H], w_gu [H, 2I], w_down [I, H]), then w_head [H, V]; every
 *       matrix [K, N] packed in 16-column panels, the norms' weights and 1/sqrt(D) folded in.
 * wt = 1 (int8) or 2 (bf16), pt_forward_tokens_q: mats per layer 11 pointers (w_qkv, s_qkv, b_qkv or
 *       NULL, g_in, w_o, s_o, g_post, w_gu, s_gu, w_down, s_down), then w_head, s_head, g_final: each
 *       w_* quantised panels of the model's own weights, s_* its per-column scales (1/sqrt(D) in the
 *       query columns' scales and in b_qkv), g_* the RMSNorm weights, applied to the activations.
 * kc, vc: per layer the cache base pointer, laid out [row, Hkv, slot, D] with row stride Hkv*slots*D.
 * Token m lives in cache row rows[m] at slot slot[m] (its position pos[m]) and attends to slots
 * 0..slot[m] of its row, which includes the tokens of this forward before it: every token's keys
 * and values are stored before any attends. slot[m] < 0 marks padding: nothing is stored, its logits are junk.
 * rope_cos/rope_sin: [L, D] tables indexed by position. ids: [M]; embed: [V, H] fp32. logits: [M, V] out.
 */
static inline __attribute__((always_inline)) int forward_body(
        const int wt, int M, int n_layers, int H, int Hq, int Hkv, int D, int I, int V,
        const float *const *mats, float *const *kc, float *const *vc, int64_t slots,
        const int64_t *rows, const int64_t *slot, const int64_t *pos,
        const float *rope_cos, const float *rope_sin,
        const int64_t *ids, const float *embed, float eps, float *logits) {
    const int nq = Hq * D, nk = Hkv * D, nqkv = nq + 2 * nk, rep = Hq / Hkv;
    const int per_layer = wt == 0 ? 5 : 11;
    /* y += x @ w[wi] (times the scales w[wi + 1] when quantised) */
#define LIN(K_, N_, X, WI, Y)                                                  \
    do {                                                                       \
        if (wt == 0) gemm_acc(M, K_, N_, X, w[WI], Y);                         \
        else if (wt == 1) gemm_int8(M, K_, N_, X, w[WI], w[(WI) + 1], Y);      \
        else gemm_bf16(M, K_, N_, X, w[WI], w[(WI) + 1], Y);                   \
    } while (0)
    int64_t span = 1;
    for (int m = 0; m < M; m++) if (slot[m] + 1 > span) span = slot[m] + 1;
    size_t need = (size_t)M * (H + H + nqkv + nq + 2 * (size_t)I + I) + (size_t)span;
    float *buf = (float *)malloc(need * sizeof(float));
    if (!buf) return -1;
    float *h = buf, *x = h + (size_t)M * H, *qkv = x + (size_t)M * H, *att = qkv + (size_t)M * nqkv;
    float *gu = att + (size_t)M * nq, *act = gu + (size_t)M * 2 * I, *sc = act + (size_t)M * I;
    for (int m = 0; m < M; m++) memcpy(h + (size_t)m * H, embed + (size_t)ids[m] * H, sizeof(float) * H);
    const int64_t row_stride = (int64_t)Hkv * slots * D, head_stride = slots * D;
    for (int l = 0; l < n_layers; l++) {
        const float *const *w = mats + per_layer * l;
        const float *bias = wt == 0 ? w[1] : w[2];
        if (wt == 0) rms_scale(M, H, h, x, eps); else rms_scale_g(M, H, h, x, eps, w[3]);
        if (bias) { for (int m = 0; m < M; m++) memcpy(qkv + (size_t)m * nqkv, bias, sizeof(float) * nqkv); }
        else memset(qkv, 0, sizeof(float) * (size_t)M * nqkv);
        LIN(H, nqkv, x, 0, qkv);
        for (int m = 0; m < M; m++) {  /* RoPE, then store keys and values */
            if (slot[m] < 0) continue;
            float *q = qkv + (size_t)m * nqkv, *k = q + nq, *v = k + nk;
            const float *c = rope_cos + pos[m] * D, *s = rope_sin + pos[m] * D;
            for (int j = 0; j < Hq; j++) rope(q + j * D, c, s, D);
            for (int g = 0; g < Hkv; g++) {
                rope(k + g * D, c, s, D);
                const int64_t base = rows[m] * row_stride + g * head_stride + slot[m] * D;
                memcpy(kc[l] + base, k + g * D, sizeof(float) * D);
                memcpy(vc[l] + base, v + g * D, sizeof(float) * D);
            }
        }
        /* attention: each token's query heads over its row's slots up to its own */
        for (int m = 0; m < M; m++) {
            float *orow = att + (size_t)m * nq;
            if (slot[m] < 0) { memset(orow, 0, sizeof(float) * nq); continue; }
            const int64_t seen = slot[m] + 1;
            for (int g = 0; g < Hkv; g++) {
                const float *K = kc[l] + rows[m] * row_stride + g * head_stride;
                const float *Vv = vc[l] + rows[m] * row_stride + g * head_stride;
                for (int j = 0; j < rep; j++)
                    attend(qkv + (size_t)m * nqkv + (g * rep + j) * D, K, Vv, seen, D, sc, orow + (g * rep + j) * D);
            }
        }
        LIN(nq, H, att, wt == 0 ? 2 : 4, h);  /* residual add: h += attention @ W_o */
        if (wt == 0) rms_scale(M, H, h, x, eps); else rms_scale_g(M, H, h, x, eps, w[6]);
        memset(gu, 0, sizeof(float) * (size_t)M * 2 * I);
        LIN(H, 2 * I, x, wt == 0 ? 3 : 7, gu);
        for (int m = 0; m < M; m++) {
            const float *g = gu + (size_t)m * 2 * I, *u = g + I;
            float *a = act + (size_t)m * I;
            int i = 0;
            for (; i + 8 <= I; i += 8) {
                const v8 gv = *(const v8u *)(g + i);
                *(v8u *)(a + i) = gv / (vsplat(1.0f) + exp_v8(-gv)) * *(const v8u *)(u + i);
            }
            for (; i < I; i++) a[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        }
        LIN(I, H, act, wt == 0 ? 4 : 9, h);  /* residual add: h += silu(gate) * up @ W_down */
    }
    {
        const float *const *w = mats + per_layer * n_layers;
        if (wt == 0) rms_scale(M, H, h, x, eps); else rms_scale_g(M, H, h, x, eps, w[2]);
        memset(logits, 0, sizeof(float) * (size_t)M * V);
        LIN(H, V, x, 0, logits);
    }
#undef LIN
    free(buf);
    return 0;
}

int pt_forward_tokens(int M, int n_layers, int H, int Hq, int Hkv, int D, int I, int V,
                      const float *const *mats, float *const *kc, float *const *vc, int64_t slots,
                      const int64_t *rows, const int64_t *slot, const int64_t *pos,
                      const float *rope_cos, const float *rope_sin,
                      const int64_t *ids, const float *embed, float eps, float *logits) {
    return forward_body(0, M, n_layers, H, Hq, Hkv, D, I, V, mats, kc, vc, slots, rows, slot, pos,
                        rope_cos, rope_sin, ids, embed, eps, logits);
}

/* the same forward on quantised panels: wt = 1 int8, 2 bf16 (anything else: -2) */
int pt_forward_tokens_q(int wt, int M, int n_layers, int H, int Hq, int Hkv, int D, int I, int V,
                        const float *const *mats, float *const *kc, float *const *vc, int64_t slots,
                        const int64_t *rows, const int64_t *slot, const int64_t *pos,
                        const float *rope_cos, const float *rope_sin,
                        const int64_t *ids, const float *embed, float eps, float *logits) {
    if (wt == 1)
        return forward_body(1, M, n_layers, H, Hq, Hkv, D, I, V, mats, kc, vc, slots, rows, slot, pos,
                            rope_cos, rope_sin, ids, embed, eps, logits);
    if (wt == 2)
        return forward_body(2, M, n_layers, H, Hq, Hkv, D, I, V, mats, kc, vc, slots, rows, slot, pos,
                            rope_cos, rope_sin, ids, embed, eps, logits);
    return -2;
}

/* pt_decode_greedy: up to n greedy decode steps of one sequence (cache row `row`), each the forward above on
 * one token, then the argmax of its logits (the first maximum, as torch.argmax) and that token's logprob
 * under the unscaled distribution (logit - logsumexp, summed in double). Step i feeds token `first` (i = 0) or
 * the token step i - 1 chose at slot = position start + i. Stops after a token in stop_ids[0..n_stop).
 * wt: 0 fp32, 1 int8, 2 bf16 panels. logits: [V] scratch. Returns the number of tokens written to out_tok /
 * out_lp (1..n), or the forward's negative error code. The caller guarantees start + n < slots and rope
 * tables for positions up to start + n - 1. */
int pt_decode_greedy(int wt, int n, int n_layers, int H, int Hq, int Hkv, int D, int I, int V,
                     const float *const *mats, float *const *kc, float *const *vc, int64_t slots,
                     int64_t row, int64_t start, const float *rope_cos, const float *rope_sin,
                     int64_t first, const float *embed, float eps,
                     const int64_t *stop_ids, int n_stop, float *logits, int64_t *out_tok, float *out_lp) {
    int64_t id = first;
    for (int i = 0; i < n; i++) {
        const int64_t at = start + i;
        const int rc = wt == 0
            ? pt_forward_tokens(1, n_layers, H, Hq, Hkv, D, I, V, mats, kc, vc, slots, &row, &at, &at,
                                rope_cos, rope_sin, &id, embed, eps, logits)
            : pt_forward_tokens_q(wt, 1, n_layers, H, Hq, Hkv, D, I, V, mats, kc, vc, slots, &row, &at, &at,
                                  rope_cos, rope_sin, &id, embed, eps, logits);
        if (rc != 0) return rc;
        int best = 0;
        for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
        const float top = logits[best];
        double sum = 0.0;
        for (int v = 0; v < V; v++) sum += exp((double)(logits[v] - top));
        id = best;
        out_tok[i] = best;
        out_lp[i] = (float)(-log(sum));  /* logits[best] - logsumexp = -log(sum of exp(logit - top)) */
        for (int s = 0; s < n_stop; s++)
            if (stop_ids[s] == best) return i + 1;
    }
    return n;
}

/* A read-bandwidth probe, not part of any forward: the sum of x[0:n], read as the weight panels are (eight-lane
 * loads, four independent accumulators, one prefetch per 64-byte line PREFETCH_BYTES ahead, non-temporal when
 * nt). benchmarks/engine.py times it beside torch's sum to find the fastest one thread streams a buffer here. */
double pt_stream_read(const float *restrict x, int64_t n, int nt) {
    v8 a0 = vsplat(0.f), a1 = vsplat(0.f), a2 = vsplat(0.f), a3 = vsplat(0.f);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        WPREFETCH(x + i + PREFETCH_BYTES / 4, nt);
        WPREFETCH(x + i + 16 + PREFETCH_BYTES / 4, nt);
        a0 += *(const v8u *)(x + i);
        a1 += *(const v8u *)(x + i + 8);
        a2 += *(const v8u *)(x + i + 16);
        a3 += *(const v8u *)(x + i + 24);
    }
    v8 a = (a0 + a1) + (a2 + a3);
    double s = 0.0;
    for (int j = 0; j < 8; j++) s += a[j];
    for (; i < n; i++) s += x[i];
    return s;
}

/* Cascade attention for one new token per row, the rows [r0, r1) of a decode step whose rows share prompts:
 * row i attends to its group's prompt (group[i]'s slots [0, plen[i]) of the prompt cache kp/vp) and then to its
 * own slots [0, rlen[i]) of cache row row[i] of kr/vr, as one softmax: plain attention over prompt + row.
 * q: [b, Hq, D] unscaled (scale multiplies it first, as the PyTorch path does); out: [b, Hq, D]. Caches are
 * laid out [row, Hkv, slot, D] with the strides given (in floats). Query head h reads kv head h / (Hq / Hkv).
 * -> 0, or -1 when the scratch buffer cannot be allocated. */
int pt_cascade_attend(int r0, int r1, int Hq, int Hkv, int D, const float *q, float scale,
                      const float *kp, const float *vp, int64_t p_row, int64_t p_head, const int64_t *group,
                      const int64_t *plen, const float *kr, const float *vr, int64_t r_row, int64_t r_head,
                      const int64_t *row, const int64_t *rlen, float *out) {
    int64_t most = 1;
    for (int i = r0; i < r1; i++) if (plen[i] + rlen[i] > most) most = plen[i] + rlen[i];
    float *sc = (float *)malloc(sizeof(float) * (size_t)(most + D));
    if (!sc) return -1;
    float *qs = sc + most;
    const int rep = Hq / Hkv;
    for (int i = r0; i < r1; i++) {
        for (int h = 0; h < Hq; h++) {
            const float *qh = q + ((size_t)i * Hq + h) * D;
            for (int d = 0; d < D; d++) qs[d] = qh[d] * scale;
            const int g = h / rep;
            const int64_t po = group[i] * p_row + g * p_head, ro = row[i] * r_row + g * r_head;
            attend2(qs, kp + po, vp + po, plen[i], kr + ro, vr + ro, rlen[i], D, sc, out + ((size_t)i * Hq + h) * D);
        }
    }
    free(sc);
    return 0;
}
