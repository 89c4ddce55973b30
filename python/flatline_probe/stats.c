/* The probe's per-step statistics over a model's float32 tensors in one pass each (docs/DESIGN.md §16),
 * for CPU tensors: compiled by python/flatline_probe/native.py with the system's C compiler and called
 * through ctypes (standard library). Without a compiler the probe takes the same statistics with torch
 * calls (norms.py); both give the same numbers up to float summation order.
 *
 * Tensors are given as k pointers to contiguous float32 elements and k element counts. Sums of squares
 * are taken in float32 over blocks of 256 elements and in double over the blocks (below: a relative
 * error under ~2e-6; finite to a norm of ~1e154, where float32 sums overflow past ~1.8e19; blocks of
 * elements under ~1e-19, whose squares underflow float32, are summed in double too). Nothing here
 * allocates, keeps a pointer, or touches Python: ctypes releases the interpreter lock around each call.
 *
 *   flatline_grad_stats    sum of squares and the count of elements that are not 0 (-0.0 is 0; a NaN
 *                          counts as not 0, and makes the sum NaN: the probe then drops the count)
 *   flatline_gather        the tensors' elements into one flat buffer, in order (the snapshot of the
 *                          parameters before an update)
 *   flatline_update_stats  after an update: the sum of squares of the parameters, and of (parameter -
 *                          snapshot) computed in float32 as torch.sub would; the snapshot then takes the
 *                          parameters' values (the next update's "before"), in the same pass
 *   flatline_blake2b64     BLAKE2b with an 8-byte digest (RFC 7693, unkeyed) of k buffers one after the
 *                          other: hashlib.blake2b(digest_size=8) updated with each, the batch's hash
 */
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLATLINE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FLATLINE_CLONES
#endif

/* Eight floats (GCC/clang vector extensions, lowered to what the target has: one AVX register, two
 * SSE ones). Squares are summed in float32, in blocks of BLOCK elements (two accumulators, 16 products a
 * lane, then the lanes, widened: a relative error under ~2e-6 of the block's sum), and the blocks' sums
 * in double; summing every square in double cost three times as long (the widening is the pass's work).
 * A block whose float32 sum is not finite (an element past ~1.8e19, an inf, a NaN) is summed again in
 * double, so sums stay finite to a norm of ~1e154 and a NaN or an inf comes out as itself; so is a block
 * whose float32 sum is under TINY and whose elements are not all 0: squares under float32's smallest
 * normal (elements under ~1.1e-19) lose digits or become 0 there, and only such a sum can hold enough of
 * them to matter (each loses under 2^-150: 2^-142 a block, 2^-42 of TINY). Tensors' last
 * elements past a whole block are summed in double. The order of the operations is the source's on
 * every target (no FMA in the clones: no contraction), so a machine gives the same bits either clone. */
typedef float f8 __attribute__((vector_size(32)));
typedef int32_t i8 __attribute__((vector_size(32)));

#define BLOCK 256
#define TINY 0x1p-100 /* a block's float32 sum under this may have lost its subnormal squares (above) */

static inline f8 load8(const float *p) { f8 v; memcpy(&v, p, sizeof v); return v; }
static inline double lanes_sum(f8 v)
{
    return (((double)v[0] + v[1]) + ((double)v[2] + v[3])) + (((double)v[4] + v[5]) + ((double)v[6] + v[7]));
}
static inline int finite(double x) { return x - x == 0.0; } /* not for inf or NaN (no libm) */
static inline int any_nonzero(i8 bits) /* or'ed float bits: whether one was neither 0.0 nor -0.0 */
{
    const int32_t m = 0x7fffffff;
    return ((bits[0] | bits[1] | bits[2] | bits[3] | bits[4] | bits[5] | bits[6] | bits[7]) & m) != 0;
}

static double sq_sum_double(const float *x, int64_t m)
{
    double s = 0.0;
    for (int64_t i = 0; i < m; ++i) {
        const double v = x[i];
        s += v * v;
    }
    return s;
}

FLATLINE_CLONES
void flatline_grad_stats(int64_t k, const float *const *ptr, const int64_t *n, double *sum_sq, int64_t *nonzero)
{
    double s = 0.0;
    int64_t total = 0, zeros = 0;
    for (int64_t t = 0; t < k; ++t) {
        const float *x = ptr[t];
        const int64_t m = n[t];
        int64_t i = 0;
        total += m;
        for (; i + BLOCK <= m; i += BLOCK) {
            f8 a0 = {0}, a1 = {0};
            i8 z = {0}; /* minus the count of elements equal to 0, per lane */
            for (int j = 0; j < BLOCK; j += 16) {
                const f8 v0 = load8(x + i + j), v1 = load8(x + i + j + 8);
                a0 += v0 * v0;
                a1 += v1 * v1;
                z += (v0 == 0.0f) + (v1 == 0.0f); /* -1 per true */
            }
            const double b = lanes_sum(a0 + a1);
            const int64_t bz = -((int64_t)z[0] + z[1] + z[2] + z[3] + z[4] + z[5] + z[6] + z[7]);
            s += finite(b) && (b >= TINY || bz == BLOCK) ? b : sq_sum_double(x + i, BLOCK);
            zeros += bz;
        }
        for (; i < m; ++i) {
            const double v = x[i];
            s += v * v;
            zeros += x[i] == 0.0f;
        }
    }
    *sum_sq = s;
    *nonzero = total - zeros; /* a NaN is not 0 */
}

void flatline_gather(int64_t k, const float *const *ptr, const int64_t *n, float *dst)
{
    for (int64_t t = 0; t < k; ++t) {
        memcpy(dst, ptr[t], (size_t)n[t] * sizeof(float));
        dst += n[t];
    }
}

/* The update's sums over m elements in double, the snapshot refreshed (the exact fallback, the tails). */
static void update_double(const float *p, float *before, int64_t m, double *ps, double *us)
{
    double a = 0.0, b = 0.0;
    for (int64_t i = 0; i < m; ++i) {
        const float x = p[i];
        const double d = (double)(x - before[i]);
        a += (double)x * (double)x;
        b += d * d;
        before[i] = x;
    }
    *ps += a;
    *us += b;
}

FLATLINE_CLONES
void flatline_update_stats(int64_t k, const float *const *ptr, const int64_t *n, float *before, double *param_sq,
                           double *update_sq)
{
    double ps = 0.0, us = 0.0;
    for (int64_t t = 0; t < k; ++t) {
        const float *p = ptr[t];
        const int64_t m = n[t];
        int64_t i = 0;
        for (; i + BLOCK <= m; i += BLOCK) {
            f8 a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0};
            i8 nx = {0}, nd = {0}; /* the bits of the elements and of the differences, signs off, or'ed */
            for (int j = 0; j < BLOCK; j += 16) {
                const f8 x0 = load8(p + i + j), x1 = load8(p + i + j + 8);
                const f8 d0 = x0 - load8(before + i + j), d1 = x1 - load8(before + i + j + 8);
                a0 += x0 * x0;
                a1 += x1 * x1;
                b0 += d0 * d0;
                b1 += d1 * d1;
                nx |= (i8)x0 | (i8)x1;
                nd |= (i8)d0 | (i8)d1;
            }
            const double pb = lanes_sum(a0 + a1), ub = lanes_sum(b0 + b1);
            if (finite(pb) && finite(ub) && (pb >= TINY || !any_nonzero(nx)) && (ub >= TINY || !any_nonzero(nd))) {
                ps += pb;
                us += ub;
                memcpy(before + i, p + i, BLOCK * sizeof(float)); /* the block, still in L1 */
            } else {
                update_double(p + i, before + i, BLOCK, &ps, &us);
            }
        }
        update_double(p + i, before + i, m - i, &ps, &us);
        before += m;
    }
    *param_sq = ps;
    *update_sq = us;
}

/* ---- BLAKE2b-64 (RFC 7693 section 3; the IV and the message schedule SIGMA are its sections 2.6, 2.7) ---- */

static const uint64_t b2_iv[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t b2_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static inline uint64_t rotr64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64_le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = (v << 8) | p[i];
    return v;
}

#define B2_G(a, b, c, d, x, y)                                                                                         \
    do {                                                                                                               \
        v[a] = v[a] + v[b] + (x);                                                                                      \
        v[d] = rotr64(v[d] ^ v[a], 32);                                                                                \
        v[c] = v[c] + v[d];                                                                                            \
        v[b] = rotr64(v[b] ^ v[c], 24);                                                                                \
        v[a] = v[a] + v[b] + (y);                                                                                      \
        v[d] = rotr64(v[d] ^ v[a], 16);                                                                                \
        v[c] = v[c] + v[d];                                                                                            \
        v[b] = rotr64(v[b] ^ v[c], 63);                                                                                \
    } while (0)

static void b2_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last)
{
    uint64_t v[16], m[16];
    for (int i = 0; i < 8; ++i) {
        v[i] = h[i];
        v[i + 8] = b2_iv[i];
    }
    v[12] ^= t; /* the byte counter's high word is 0: under 2^64 bytes */
    if (last)
        v[14] = ~v[14];
    for (int i = 0; i < 16; ++i)
        m[i] = load64_le(block + 8 * i);
    for (int r = 0; r < 12; ++r) {
        const uint8_t *s = b2_sigma[r];
        B2_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        B2_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        B2_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        B2_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        B2_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        B2_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        B2_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        B2_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; ++i)
        h[i] ^= v[i] ^ v[i + 8];
}

/* The digest's 8 bytes, as the little-endian word they are (h[0]). */
uint64_t flatline_blake2b64(int64_t k, const uint8_t *const *ptr, const int64_t *nbytes)
{
    uint64_t h[8];
    uint8_t buf[128];
    int64_t fill = 0;
    uint64_t t = 0;
    memcpy(h, b2_iv, sizeof h);
    h[0] ^= 0x01010000ULL ^ 8; /* parameter block: digest length 8, no key, fanout 1, depth 1 */
    for (int64_t j = 0; j < k; ++j) {
        const uint8_t *p = ptr[j];
        int64_t n = nbytes[j];
        while (n > 0) {
            if (fill == 128) { /* a full block is compressed only once more input follows it */
                t += 128;
                b2_compress(h, buf, t, 0);
                fill = 0;
            }
            int64_t take = 128 - fill < n ? 128 - fill : n;
            memcpy(buf + fill, p, (size_t)take);
            fill += take;
            p += take;
            n -= take;
        }
    }
    t += (uint64_t)fill;
    memset(buf + fill, 0, (size_t)(128 - fill));
    b2_compress(h, buf, t, 1);
    return h[0];
}
