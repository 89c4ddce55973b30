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
 *   flatline_grad_stats    sum of squares (returned) and the count of elements that are not 0 (-0.0
 *                          is 0; a NaN counts as not 0, and makes the sum NaN: the probe then drops
 *                          the count)
 *   flatline_gather        the tensors' elements into one flat buffer, in order (the snapshot of the
 *                          parameters before an update)
 *   flatline_update_stats  after an update: the sum of squares of the parameters (returned), and of
 *                          (parameter - snapshot) computed in float32 as torch.sub would; the snapshot
 *                          then takes the parameters' values (the next update's "before"), same pass
 *   flatline_xxh64         XXH64 (seed 0) of k buffers one after the other, as if joined: the batch's hash
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
double flatline_grad_stats(int64_t k, const float *const *ptr, const int64_t *n, int64_t *nonzero)
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
    *nonzero = total - zeros; /* a NaN is not 0 */
    return s;
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
double flatline_update_stats(int64_t k, const float *const *ptr, const int64_t *n, float *before,
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
    *update_sq = us;
    return ps;
}

/* ---- XXH64 (xxHash's 64-bit hash, seed 0: doc/xxhash_spec.md of github.com/Cyan4973/xxHash, "XXH64
 * algorithm description"; the digest xxhsum prints and libxxhash's XXH64() returns) of k buffers one after
 * the other, as if joined: the batch's hash. ~0.1-0.2 instructions a byte on a 64-bit machine, where
 * BLAKE2b took ~19: only equality within a run matters to the detectors (a hash, not a MAC). ---- */

#define XXH_P1 0x9E3779B185EBCA87ULL
#define XXH_P2 0xC2B2AE3D27D4EB4FULL
#define XXH_P3 0x165667B19E3779F9ULL
#define XXH_P4 0x85EBCA77C2B2AE63ULL
#define XXH_P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl64(uint64_t x, int n) { return (x << n) | (x >> (64 - n)); }

static inline uint64_t read64_le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = (v << 8) | p[i];
    return v; /* a plain load on a little-endian machine (the compiler folds the loop) */
}

static inline uint32_t read32_le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t xxh_round(uint64_t acc, uint64_t lane) { return rotl64(acc + lane * XXH_P2, 31) * XXH_P1; }

static inline uint64_t xxh_merge(uint64_t acc, uint64_t v) { return (acc ^ xxh_round(0, v)) * XXH_P1 + XXH_P4; }

static inline void xxh_stripe(uint64_t v[4], const uint8_t *p)
{
    v[0] = xxh_round(v[0], read64_le(p));
    v[1] = xxh_round(v[1], read64_le(p + 8));
    v[2] = xxh_round(v[2], read64_le(p + 16));
    v[3] = xxh_round(v[3], read64_le(p + 24));
}

uint64_t flatline_xxh64(int64_t k, const uint8_t *const *ptr, const int64_t *nbytes)
{
    uint64_t v[4] = {XXH_P1 + XXH_P2, XXH_P2, 0, (uint64_t)0 - XXH_P1};
    uint8_t mem[32]; /* the last stripe's bytes so far, across buffers */
    int64_t fill = 0;
    uint64_t total = 0;
    for (int64_t j = 0; j < k; ++j) {
        const uint8_t *p = ptr[j];
        int64_t n = nbytes[j];
        if (n == 0)
            continue; /* (an empty tensor's pointer may be NULL) */
        total += (uint64_t)n;
        if (fill > 0) {
            const int64_t take = 32 - fill < n ? 32 - fill : n;
            memcpy(mem + fill, p, (size_t)take);
            fill += take;
            p += take;
            n -= take;
            if (fill < 32)
                continue;
            xxh_stripe(v, mem);
            fill = 0;
        }
        for (; n >= 32; p += 32, n -= 32)
            xxh_stripe(v, p);
        memcpy(mem, p, (size_t)n);
        fill = n;
    }
    uint64_t h = XXH_P5; /* under 32 bytes: no stripe */
    if (total >= 32) {
        h = rotl64(v[0], 1) + rotl64(v[1], 7) + rotl64(v[2], 12) + rotl64(v[3], 18);
        for (int i = 0; i < 4; ++i)
            h = xxh_merge(h, v[i]);
    }
    h += total;
    const uint8_t *p = mem;
    for (; fill >= 8; p += 8, fill -= 8)
        h = rotl64(h ^ xxh_round(0, read64_le(p)), 27) * XXH_P1 + XXH_P4;
    if (fill >= 4) {
        h = rotl64(h ^ (uint64_t)read32_le(p) * XXH_P1, 23) * XXH_P2 + XXH_P3;
        p += 4;
        fill -= 4;
    }
    for (; fill > 0; ++p, --fill)
        h = rotl64(h ^ (uint64_t)*p * XXH_P5, 11) * XXH_P1;
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    return h;
}
