// Per-rank draws and batch hashes of a step (lanes.h). The AVX2 paths mirror the scalar definitions
// operation for operation in integer arithmetic (splitmix64, XXH3's mum fold) and in the same order of
// IEEE operations (no fused multiply-add), so they give the same bits.
#include "sim/simulate/lanes.h"

#include <cstring>
#include <utility>
#include <vector>

#include <immintrin.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "run/sampler.h"
#include "sim/simulate/model.h"

namespace flatline::simdetail {
namespace {

bool avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}

// ---- AVX2: four 64-bit lanes

// The low 64 bits of a x b (lane-wise), from three 32 x 32 -> 64 multiplies.
__attribute__((target("avx2"))) inline __m256i mul64(__m256i a, __m256i b) {
  const __m256i lo = _mm256_mul_epu32(a, b);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                         _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

// model.h's mix (splitmix64's finaliser).
__attribute__((target("avx2"))) inline __m256i mix4(__m256i x) {
  x = _mm256_add_epi64(x, _mm256_set1_epi64x(static_cast<int64_t>(0x9e3779b97f4a7c15ULL)));
  x = mul64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 30)), _mm256_set1_epi64x(static_cast<int64_t>(0xbf58476d1ce4e5b9ULL)));
  x = mul64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 27)), _mm256_set1_epi64x(static_cast<int64_t>(0x94d049bb133111ebULL)));
  return _mm256_xor_si256(x, _mm256_srli_epi64(x, 31));
}

// Noise{a, q, b, c}: out = (a x (q + b x draw)) x c, in that order of IEEE operations (lanes.h).
template <bool Affine>
__attribute__((target("avx2"))) void gauss_avx2(uint64_t key, int64_t first, size_t n, double* out, const Noise& f) {
  const __m256d fa = _mm256_set1_pd(f.a), fq = _mm256_set1_pd(f.q), fb = _mm256_set1_pd(f.b), fc = _mm256_set1_pd(f.c);
  const __m256i k = _mm256_set1_epi64x(static_cast<int64_t>(key)), four = _mm256_set1_epi64x(4);
  const __m256i odd_bytes = _mm256_set1_epi64x(static_cast<int64_t>(0xff00ff00ff00ff00ULL)), zero = _mm256_setzero_si256();
  // 2^52 + 2^17 as a double: its bits or'ed with s < 2^18 are 2^52 + s, so the difference is s - 2^17 exactly
  const __m256d magic = _mm256_castsi256_pd(_mm256_set1_epi64x(0x4330000000000000LL)),
                offset = _mm256_set1_pd(4503599627370496.0 + 131072.0);
  const __m256d scale = _mm256_set1_pd(1.7320508075688772 / 65536.0);  // exact: a power of two apart
  __m256i r = _mm256_setr_epi64x(first, first + 1, first + 2, first + 3);
  size_t i = 0;
  for (; i + 4 <= n; i += 4, r = _mm256_add_epi64(r, four)) {
    const __m256i h = mix4(_mm256_xor_si256(k, r));
    // s = the sum of h's four 16-bit quarters = (sum of its bytes) + 255 x (sum of its odd bytes), each
    // byte sum by vpsadbw; below 2^18
    const __m256i odd = _mm256_sad_epu8(_mm256_and_si256(h, odd_bytes), zero);
    const __m256i s = _mm256_add_epi64(_mm256_sad_epu8(h, zero), _mm256_sub_epi64(_mm256_slli_epi64(odd, 8), odd));
    // gauss: (s / 65536 - 2) x sqrt(3) = (s - 2^17) x (sqrt(3) / 2^16): both forms round the same exact
    // product once (scaling by a power of two is exact here)
    const __m256d c = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(s, _mm256_castpd_si256(magic))), offset);
    const __m256d g = _mm256_mul_pd(c, scale);
    _mm256_storeu_pd(out + i, Affine ? _mm256_mul_pd(_mm256_mul_pd(fa, _mm256_add_pd(fq, _mm256_mul_pd(fb, g))), fc) : g);
  }
  for (; i < n; ++i) {
    const double g = gauss(draw(key, first + static_cast<int64_t>(i)));
    out[i] = Affine ? f(g) : g;
  }
}

template <bool Affine>
__attribute__((target("avx2"))) void unif_avx2(uint64_t key, int64_t first, size_t n, double* out, const Offset& f) {
  const __m256d fa = _mm256_set1_pd(f.a), fb = _mm256_set1_pd(f.b);
  const __m256i k = _mm256_set1_epi64x(static_cast<int64_t>(key)), four = _mm256_set1_epi64x(4);
  const __m256i one_bits = _mm256_set1_epi64x(0x3ff0000000000000LL), bit11 = _mm256_set1_epi64x(1LL << 11);
  const __m256d one = _mm256_set1_pd(1.0), half_ulp = _mm256_set1_pd(0x1.0p-53);
  __m256i r = _mm256_setr_epi64x(first, first + 1, first + 2, first + 3);
  size_t i = 0;
  for (; i + 4 <= n; i += 4, r = _mm256_add_epi64(r, four)) {
    const __m256i h = mix4(_mm256_xor_si256(k, r));
    // (h >> 11) x 2^-53 = (h >> 12) x 2^-52 + (bit 11 of h) x 2^-53: the first term is (1 + (h >> 12) x
    // 2^-52) - 1, exact; the sum is a multiple of 2^-53 below 1, so exact too
    const __m256d hi = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(h, 12), one_bits)), one);
    const __m256d lo = _mm256_and_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(h, bit11), bit11)), half_ulp);
    const __m256d u = _mm256_add_pd(hi, lo);
    _mm256_storeu_pd(out + i, Affine ? _mm256_add_pd(fa, _mm256_mul_pd(fb, u)) : u);
  }
  for (; i < n; ++i) {
    const double u = unif(draw(key, first + static_cast<int64_t>(i)));
    out[i] = Affine ? f(u) : u;
  }
}

// XXH3-64 (xxhash.h, XXH3_len_17to128_64b, seed 0) of lanes of 17..128 bytes.
uint64_t secret_word(int w) {
  uint64_t v;
  std::memcpy(&v, XXH3_kSecret + 8 * w, 8);
  return v;
}

// lo(a x b) ^ hi(a x b) of the full 128-bit product (XXH3_mul128_fold64), lane-wise.
__attribute__((target("avx2"))) inline __m256i fold4(__m256i a, __m256i b) {
  const __m256i m32 = _mm256_set1_epi64x(0xffffffffLL);
  const __m256i ah = _mm256_srli_epi64(a, 32), bh = _mm256_srli_epi64(b, 32);
  const __m256i ll = _mm256_mul_epu32(a, b), lh = _mm256_mul_epu32(a, bh), hl = _mm256_mul_epu32(ah, b),
                hh = _mm256_mul_epu32(ah, bh);
  const __m256i cross = _mm256_add_epi64(_mm256_add_epi64(_mm256_srli_epi64(ll, 32), _mm256_and_si256(lh, m32)), hl);
  const __m256i hi = _mm256_add_epi64(_mm256_add_epi64(_mm256_srli_epi64(lh, 32), _mm256_srli_epi64(cross, 32)), hh);
  const __m256i lo = _mm256_blend_epi32(ll, _mm256_slli_epi64(cross, 32), 0xaa);
  return _mm256_xor_si256(lo, hi);
}

__attribute__((target("avx2"))) void hashes_avx2(const int64_t* ids, int m, size_t lanes, uint64_t* out) {
  const uint64_t len = 8u * static_cast<uint64_t>(m);
  // the mix16B calls of XXH3_len_17to128_64b: (first word of the input, first word of the secret)
  int calls[8][2], nc = 0;
  auto call = [&](int w, int s) { calls[nc][0] = w, calls[nc][1] = s, ++nc; };
  if (len > 32) {
    if (len > 64) {
      if (len > 96) call(6, 12), call(m - 8, 14);
      call(4, 8), call(m - 6, 10);
    }
    call(2, 4), call(m - 4, 6);
  }
  call(0, 0), call(m - 2, 2);
  __m256i sec[8][2];
  for (int c = 0; c < nc; ++c)
    for (int k = 0; k < 2; ++k) sec[c][k] = _mm256_set1_epi64x(static_cast<int64_t>(secret_word(calls[c][1] + k)));
  const __m256i start = _mm256_set1_epi64x(static_cast<int64_t>(len * XXH_PRIME64_1));
  const __m256i prime = _mm256_set1_epi64x(static_cast<int64_t>(0x165667919E3779F9ULL));
  size_t j = 0;
  for (; j + 4 <= lanes; j += 4) {
    __m256i acc = start;
    for (int c = 0; c < nc; ++c) {
      const auto* a = reinterpret_cast<const __m256i*>(ids + static_cast<size_t>(calls[c][0]) * lanes + j);
      const auto* b = reinterpret_cast<const __m256i*>(ids + static_cast<size_t>(calls[c][0] + 1) * lanes + j);
      acc = _mm256_add_epi64(acc, fold4(_mm256_xor_si256(_mm256_loadu_si256(a), sec[c][0]),
                                        _mm256_xor_si256(_mm256_loadu_si256(b), sec[c][1])));
    }
    acc = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 37));  // XXH3_avalanche
    acc = mul64(acc, prime);
    acc = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), acc);
  }
  std::vector<int64_t> one(static_cast<size_t>(m));
  for (; j < lanes; ++j) {
    for (int k = 0; k < m; ++k) one[static_cast<size_t>(k)] = ids[static_cast<size_t>(k) * lanes + j];
    out[j] = batch_hash(one.data(), one.size());
  }
}

// ---- the sampler's batch hashes (lanes.h sampler_batch_hashes): eight ranks a group, in 32-bit lanes

// The ids of word k of eight ranks: y holds a p + b for each rank's position of word 0 (32-bit lanes), ak
// = a k. Lane order 0, 4, 1, 5, 2, 6, 3, 7: the even 32-bit lanes (the ones _mm256_mul_epu32 reads) are
// ranks 0..3 of the group, the odd ones 4..7.
__attribute__((target("avx2"))) inline __m256i ids8(__m256i y, __m256i ak, __m256i mask, __m128i shift, __m256i c) {
  __m256i x = _mm256_and_si256(_mm256_add_epi32(y, ak), mask);
  x = _mm256_xor_si256(x, _mm256_srl_epi32(x, shift));
  return _mm256_and_si256(_mm256_mullo_epi32(c, x), mask);
}

// XXH3_mul128_fold64(a, b) of 64-bit lanes whose high 32 bits are known constants: a = ah 2^32 + (the low
// 32 bits of va's lane), b likewise; ah_b = ah, bh_a = bh in the low halves, hh = ah x bh. The schoolbook
// 128-bit product (XXH_mult64to128's portable form) without its constant fourth product.
__attribute__((target("avx2"))) inline __m256i fold_known_high(__m256i va, __m256i vb, __m256i ah, __m256i bh,
                                                              __m256i hh) {
  const __m256i m32 = _mm256_set1_epi64x(0xffffffffLL);
  const __m256i ll = _mm256_mul_epu32(va, vb), lh = _mm256_mul_epu32(va, bh), hl = _mm256_mul_epu32(ah, vb);
  const __m256i cross = _mm256_add_epi64(_mm256_add_epi64(_mm256_srli_epi64(ll, 32), _mm256_and_si256(lh, m32)), hl);
  const __m256i hi = _mm256_add_epi64(_mm256_add_epi64(_mm256_srli_epi64(lh, 32), _mm256_srli_epi64(cross, 32)), hh);
  const __m256i lo = _mm256_blend_epi32(ll, _mm256_slli_epi64(cross, 32), 0xaa);
  return _mm256_xor_si256(lo, hi);
}

__attribute__((target("avx2"))) inline __m256i avalanche4(__m256i h) {
  const __m256i prime = _mm256_set1_epi64x(static_cast<int64_t>(0x165667919E3779F9ULL));
  h = _mm256_xor_si256(h, _mm256_srli_epi64(h, 37));
  h = mul64(h, prime);
  return _mm256_xor_si256(h, _mm256_srli_epi64(h, 32));
}

// XXH3_len_17to128_64b of M 8-byte words (3 <= M <= 16), eight ranks at a time; returns the first rank
// not done (the groups of eight).
template <int M>
__attribute__((target("avx2"))) size_t sampler_hashes_avx2(const Permutation32& p, uint32_t first, size_t ranks,
                                                           uint64_t* out) {
  constexpr uint64_t len = 8u * M;
  // the mix16B calls: (first word of the input, first word of the secret), in XXH3's order of addition
  constexpr int nc = len > 96 ? 8 : len > 64 ? 6 : len > 32 ? 4 : 2;
  constexpr int calls[8][2] = {{6, 12}, {M - 8, 14}, {4, 8}, {M - 6, 10}, {2, 4}, {M - 4, 6}, {0, 0}, {M - 2, 2}};
  constexpr int c0 = 8 - nc;
  __m256i ak[2 * nc], lo_sec[2 * nc], hi_sec[2 * nc], hh[nc];
  for (int c = 0; c < nc; ++c) {
    for (int k = 0; k < 2; ++k) {
      const int w = calls[c0 + c][0] + k;
      const uint64_t s = secret_word(calls[c0 + c][1] + k);
      ak[2 * c + k] = _mm256_set1_epi32(static_cast<int>(p.a * static_cast<uint32_t>(w)));
      lo_sec[2 * c + k] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(s)));
      hi_sec[2 * c + k] = _mm256_set1_epi64x(static_cast<int64_t>(s >> 32));
    }
    hh[c] = _mm256_mul_epu32(hi_sec[2 * c], hi_sec[2 * c + 1]);
  }
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(p.mask)), c = _mm256_set1_epi32(static_cast<int>(p.c));
  const __m128i shift = _mm_cvtsi32_si128(p.shift);
  const __m256i start = _mm256_set1_epi64x(static_cast<int64_t>(len * XXH_PRIME64_1));
  // a x (position of word 0 of each lane's rank) + b; the next group's: + a x 8M
  const uint32_t am = p.a * static_cast<uint32_t>(M);
  __m256i y = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(p.a * first + p.b)),
                               _mm256_mullo_epi32(_mm256_set1_epi32(static_cast<int>(am)),
                                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  const __m256i group = _mm256_set1_epi32(static_cast<int>(am * 8u));
  size_t j = 0;
  for (; j + 8 <= ranks; j += 8, y = _mm256_add_epi32(y, group)) {
    __m256i even = start, odd = start;
    for (int k = 0; k < nc; ++k) {  // unrolled: nc is a constant
      const __m256i va = _mm256_xor_si256(ids8(y, ak[2 * k], mask, shift, c), lo_sec[2 * k]);
      const __m256i vb = _mm256_xor_si256(ids8(y, ak[2 * k + 1], mask, shift, c), lo_sec[2 * k + 1]);
      even = _mm256_add_epi64(even, fold_known_high(va, vb, hi_sec[2 * k], hi_sec[2 * k + 1], hh[k]));
      odd = _mm256_add_epi64(odd, fold_known_high(_mm256_srli_epi64(va, 32), _mm256_srli_epi64(vb, 32),
                                                  hi_sec[2 * k], hi_sec[2 * k + 1], hh[k]));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), avalanche4(even));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j + 4), avalanche4(odd));
  }
  return j;
}

// kSetBits[m]: the positions of m's set bits, ascending, a byte each (the rest 0).
constexpr auto kSetBits = [] {
  struct Table { uint64_t v[256]; } t{};
  for (unsigned m = 0; m < 256; ++m) {
    int k = 0;
    for (unsigned b = 0; b < 8; ++b)
      if (m >> b & 1) t.v[m] |= uint64_t{b} << (8 * k++);
  }
  return t;
}();

// Eight ranks a step: two compares, their mask's set-bit positions from kSetBits widened to 32 bits
// and offset by the first rank, all eight stored (out has room for 8 past n), the count advanced by
// the mask's popcount.
__attribute__((target("avx2,popcnt"))) size_t due_avx2(const double* t, size_t n, double until, uint32_t* out) {
  const __m256d u = _mm256_set1_pd(until);
  const __m256i eight = _mm256_set1_epi32(8);
  __m256i base = _mm256_setzero_si256();
  size_t k = 0, r = 0;
  for (; r + 8 <= n; r += 8, base = _mm256_add_epi32(base, eight)) {
    const unsigned m = static_cast<unsigned>(_mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(t + r), u, _CMP_LT_OQ))) |
                       static_cast<unsigned>(_mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(t + r + 4), u, _CMP_LT_OQ))) << 4;
    const __m256i at = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(kSetBits.v[m])));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm256_add_epi32(at, base));
    k += static_cast<size_t>(__builtin_popcount(m));
  }
  for (; r < n; ++r)
    if (t[r] < until) out[k++] = static_cast<uint32_t>(r);
  return k;
}

__attribute__((target("avx2"))) double max_avx2(double init, const double* v, size_t n) {
  __m256d m = _mm256_set1_pd(init);  // _mm256_max_pd(x, m) = x > m ? x : m
  size_t r = 0;
  for (; r + 8 <= n; r += 8) m = _mm256_max_pd(_mm256_loadu_pd(v + r + 4), _mm256_max_pd(_mm256_loadu_pd(v + r), m));
  for (; r + 4 <= n; r += 4) m = _mm256_max_pd(_mm256_loadu_pd(v + r), m);
  double lane[4];
  _mm256_storeu_pd(lane, m);
  for (; r < n; ++r) lane[0] = v[r] > lane[0] ? v[r] : lane[0];
  for (size_t k = 1; k < 4; ++k) lane[0] = lane[k] > lane[0] ? lane[k] : lane[0];
  return lane[0];
}

using SamplerHashes = size_t (*)(const Permutation32&, uint32_t, size_t, uint64_t*);
template <int... M>
constexpr SamplerHashes sampler_kernel(int m, std::integer_sequence<int, M...>) {
  SamplerHashes k = nullptr;
  ((m == M + 3 ? (k = &sampler_hashes_avx2<M + 3>, 0) : 0), ...);
  return k;
}

}  // namespace

void sampler_batch_hashes(const Permutation32& p, uint32_t first, int m, size_t ranks, uint64_t* out) {
  size_t r = 0;
  if (avx2() && m >= 3 && m <= 16)
    r = sampler_kernel(m, std::make_integer_sequence<int, 14>{})(p, first, ranks, out);
  std::vector<int64_t> one(static_cast<size_t>(m > 0 ? m : 0));
  for (; r < ranks; ++r) {  // rank by rank: the ranks after the last group of eight, or every rank
    const uint32_t base = first + static_cast<uint32_t>(r) * static_cast<uint32_t>(m);
    for (int k = 0; k < m; ++k) one[static_cast<size_t>(k)] = p.at(base + static_cast<uint32_t>(k));
    out[r] = batch_hash(one.data(), one.size());
  }
}

size_t due_ranks(const double* t, size_t n, double until, uint32_t* out) {
  if (avx2()) return due_avx2(t, n, until, out);
  size_t k = 0;
  for (size_t r = 0; r < n; ++r)
    if (t[r] < until) out[k++] = static_cast<uint32_t>(r);
  return k;
}

double lanes_max(double init, const double* v, size_t n) {
  if (avx2()) return max_avx2(init, v, n);
  double lane[4] = {init, init, init, init};
  size_t r = 0;
  for (; r + 4 <= n; r += 4)
    for (size_t k = 0; k < 4; ++k) lane[k] = v[r + k] > lane[k] ? v[r + k] : lane[k];
  for (; r < n; ++r) lane[0] = v[r] > lane[0] ? v[r] : lane[0];
  for (size_t k = 1; k < 4; ++k) lane[0] = lane[k] > lane[0] ? lane[k] : lane[0];
  return lane[0];
}

bool lanes_use_avx2() { return avx2(); }

void gauss_draws(uint64_t key, int64_t first, size_t n, double* out) {
  if (avx2()) return gauss_avx2<false>(key, first, n, out, Noise{});
  for (size_t i = 0; i < n; ++i) out[i] = gauss(draw(key, first + static_cast<int64_t>(i)));
}

void gauss_draws(uint64_t key, int64_t first, size_t n, const Noise& f, double* out) {
  if (avx2()) return gauss_avx2<true>(key, first, n, out, f);
  for (size_t i = 0; i < n; ++i) out[i] = f(gauss(draw(key, first + static_cast<int64_t>(i))));
}

void unif_draws(uint64_t key, int64_t first, size_t n, double* out) {
  if (avx2()) return unif_avx2<false>(key, first, n, out, Offset{});
  for (size_t i = 0; i < n; ++i) out[i] = unif(draw(key, first + static_cast<int64_t>(i)));
}

void unif_draws(uint64_t key, int64_t first, size_t n, const Offset& f, double* out) {
  if (avx2()) return unif_avx2<true>(key, first, n, out, f);
  for (size_t i = 0; i < n; ++i) out[i] = f(unif(draw(key, first + static_cast<int64_t>(i))));
}

void batch_hashes(const int64_t* ids, int m, size_t lanes, uint64_t* out) {
  if (avx2() && m >= 3 && m <= 16) return hashes_avx2(ids, m, lanes, out);  // 17..128 bytes
  std::vector<int64_t> one(static_cast<size_t>(m > 0 ? m : 0));
  for (size_t j = 0; j < lanes; ++j) {
    for (int k = 0; k < m; ++k) one[static_cast<size_t>(k)] = ids[static_cast<size_t>(k) * lanes + j];
    out[j] = batch_hash(one.data(), one.size());
  }
}

}  // namespace flatline::simdetail
