/* The probe's per-step statistics over a model's float32 tensors in one pass each (docs/DESIGN.md §16),
 * for CPU tensors: compiled by python/flatline_probe/native.py with the system's C compiler and called
 * through ctypes (standard library). Without a compiler the probe takes the same statistics with torch
 * calls (norms.py); both give the same numbers up to float summation order.
 *
 * Tensors are given as k pointers to contiguous float32 elements and k element counts. Sums of squares
 * are accumulated in double (each float32 square is exact in double; the sums stay finite to a norm of
 * ~1e154, where float32 sums overflow past ~1.8e19). Nothing here allocates, keeps a pointer, or touches
 * Python: ctypes releases the interpreter lock around each call.
 *
 *   flatline_grad_stats    sum of squares and the count of elements that are not 0 (-0.0 is 0; a NaN
 *                          counts as not 0, and makes the sum NaN: the probe then drops the count)
 *   flatline_gather        the tensors' elements into one flat buffer, in order (the snapshot of the
 *                          parameters before an update)
 *   flatline_update_stats  after an update: the sum of squares of the parameters, and of (parameter -
 *                          snapshot) computed in float32 as torch.sub would; the snapshot then takes the
 *                          parameters' values (the next update's "before"), in the same pass
 */
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLATLINE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FLATLINE_CLONES
#endif

/* Four floats, widened to four doubles: GCC/clang vector extensions, lowered to what the target has.
 * The sums run in four independent vectors so the adds' latency overlaps (one accumulator would make
 * the pass wait on each add). */
typedef float f4 __attribute__((vector_size(16)));
typedef double d4 __attribute__((vector_size(32)));
typedef int32_t i4 __attribute__((vector_size(16)));

static inline f4 load4(const float *p) { f4 v; memcpy(&v, p, sizeof v); return v; }
static inline void store4(float *p, f4 v) { memcpy(p, &v, sizeof v); }
static inline d4 wide(f4 v) { return __builtin_convertvector(v, d4); }
static inline double hsum(d4 a, d4 b, d4 c, d4 d)
{
    d4 s = (a + b) + (c + d);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

#define COUNT_BLOCK ((int64_t)1 << 28) /* elements a lane's int32 count may take before it is moved on */

FLATLINE_CLONES
void flatline_grad_stats(int64_t k, const float *const *ptr, const int64_t *n, double *sum_sq, int64_t *nonzero)
{
    d4 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    double s = 0.0;
    int64_t c = 0;
    for (int64_t t = 0; t < k; ++t) {
        const float *x = ptr[t];
        for (int64_t at = 0; at < n[t]; at += COUNT_BLOCK) {
            const int64_t m = n[t] - at < COUNT_BLOCK ? n[t] - at : COUNT_BLOCK;
            const float *b = x + at;
            i4 z = {0}; /* minus the count of elements equal to 0, per lane */
            int64_t i = 0;
            for (; i + 16 <= m; i += 16) {
                const f4 a0 = load4(b + i), a1 = load4(b + i + 4), a2 = load4(b + i + 8), a3 = load4(b + i + 12);
                const d4 w0 = wide(a0), w1 = wide(a1), w2 = wide(a2), w3 = wide(a3);
                s0 += w0 * w0;
                s1 += w1 * w1;
                s2 += w2 * w2;
                s3 += w3 * w3;
                z += (a0 == 0.0f) + (a1 == 0.0f) + (a2 == 0.0f) + (a3 == 0.0f); /* -1 per true */
            }
            int64_t zeros = -((int64_t)z[0] + z[1] + z[2] + z[3]);
            for (; i < m; ++i) {
                const double v = b[i];
                s += v * v;
                zeros += b[i] == 0.0f;
            }
            c += m - zeros; /* a NaN is not 0 */
        }
    }
    *sum_sq = s + hsum(s0, s1, s2, s3);
    *nonzero = c;
}

void flatline_gather(int64_t k, const float *const *ptr, const int64_t *n, float *dst)
{
    for (int64_t t = 0; t < k; ++t) {
        memcpy(dst, ptr[t], (size_t)n[t] * sizeof(float));
        dst += n[t];
    }
}

FLATLINE_CLONES
void flatline_update_stats(int64_t k, const float *const *ptr, const int64_t *n, float *before, double *param_sq,
                           double *update_sq)
{
    d4 p0 = {0}, p1 = {0}, u0 = {0}, u1 = {0};
    double ps = 0.0, us = 0.0;
    for (int64_t t = 0; t < k; ++t) {
        const float *p = ptr[t];
        const int64_t m = n[t];
        int64_t i = 0;
        for (; i + 8 <= m; i += 8) {
            const f4 a0 = load4(p + i), a1 = load4(p + i + 4);
            const d4 w0 = wide(a0), w1 = wide(a1);
            const d4 d0 = wide(a0 - load4(before + i)), d1 = wide(a1 - load4(before + i + 4));
            p0 += w0 * w0;
            p1 += w1 * w1;
            u0 += d0 * d0;
            u1 += d1 * d1;
            store4(before + i, a0);
            store4(before + i + 4, a1);
        }
        for (; i < m; ++i) {
            const float x = p[i];
            const double d = (double)(x - before[i]);
            ps += (double)x * (double)x;
            us += d * d;
            before[i] = x;
        }
        before += m;
    }
    const d4 zero = {0};
    *param_sq = ps + hsum(p0, p1, zero, zero);
    *update_sq = us + hsum(u0, u1, zero, zero);
}
