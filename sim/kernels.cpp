#include "sim/kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

// Every loop works on 8 floats at a time in a GCC vector type: one AVX2 register (AVX-512's 16 lanes
// would gain little: Zen 4 executes 512-bit operations as two halves, and GCC lowers a 64-byte type's
// compares and selects to scalar code on AVX2; on SSE2 this 32-byte type's are, so the baseline variant
// is correct but slow). A row's last, partial chunk is loaded zero-padded and stored back in part, so
// every element goes through the same code.
// Compiled with -ffp-contract=off (CMakeLists.txt): a * b + c stays two roundings in every variant;
// and -fno-trapping-math, without which the selects below may stay branches.
#define FLATLINE_INLINE inline __attribute__((always_inline))

namespace flatline::kernels {
namespace {

constexpr int64_t kLanes = 8;
typedef float V __attribute__((vector_size(4 * kLanes)));
typedef int32_t VI __attribute__((vector_size(4 * kLanes)));
typedef uint32_t VU __attribute__((vector_size(4 * kLanes)));

constexpr float kTwoK = 1.5957691216057308f;  // 2 sqrt(2 / pi)
constexpr float kCubic = 0.044715f;
constexpr float kCubic3TwoK = 3 * 0.044715f * 1.5957691216057308f;
constexpr float kGeluClamp = 1e4f;
constexpr float kInf = std::numeric_limits<float>::infinity();

FLATLINE_INLINE V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
FLATLINE_INLINE void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
// The first k (< kLanes) values, the rest 0.
FLATLINE_INLINE V load_part(const float* p, int64_t k) {
  V v = {};
  std::memcpy(&v, p, sizeof(float) * static_cast<size_t>(k));
  return v;
}
FLATLINE_INLINE void store_part(float* p, V v, int64_t k) { std::memcpy(p, &v, sizeof(float) * static_cast<size_t>(k)); }
FLATLINE_INLINE V splat(float f) { return V{} + f; }
// Lanes whose column j + l is below n.
FLATLINE_INLINE VI below(int64_t j, int64_t n) {
  const VI iota = {0, 1, 2, 3, 4, 5, 6, 7};
  return iota < static_cast<int32_t>(n - j);
}

// A row of n in chunks: `for (CHUNKS(n))` visits columns [j, j + k), k = kLanes but in the last chunk.
// (Loops, not lambdas: GCC inlines a lambda into a target clone only if it is forced to.)
#define CHUNKS(n) int64_t j = 0, k = std::min<int64_t>(kLanes, n); j < (n); j += kLanes, k = std::min<int64_t>(kLanes, (n) - j)
FLATLINE_INLINE V load_n(const float* p, int64_t k) { return k == kLanes ? load(p) : load_part(p, k); }
FLATLINE_INLINE void store_n(float* p, V v, int64_t k) {
  if (k == kLanes) store(p, v);
  else store_part(p, v, k);
}

// Lanes combined in a fixed tree: lane l + 4 into lane l, then l + 2, l + 1.
FLATLINE_INLINE float sum_tree(V v) {
  float a[kLanes];
  std::memcpy(a, &v, sizeof a);
  for (int l = 0; l < 4; ++l) a[l] += a[l + 4];
  for (int l = 0; l < 2; ++l) a[l] += a[l + 2];
  return a[0] + a[1];
}
FLATLINE_INLINE float max_tree(V v) {
  float a[kLanes];
  std::memcpy(a, &v, sizeof a);
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) a[l] = a[l + w] > a[l] ? a[l + w] : a[l];
  return a[0];
}

// Cephes expf (S. Moshier): x = n ln2 + r, |r| <= ln2 / 2, exp(r) by its degree-6 minimax polynomial,
// times 2^n built in two halves (so that n = 128 overflows to inf and n < -126 gives subnormals).
FLATLINE_INLINE V expv(V x) {
  x = x > 88.75f ? splat(88.75f) : x;  // comparisons with nan are false: nan passes through
  x = x < -105.0f ? splat(-105.0f) : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: t's low mantissa bits hold n = round(x log2 e)
  const V t = x * 1.44269504088896341f + kRound;
  const V n = t - kRound;
  V r = x - n * 0.693359375f;  // ln 2 = 0.693359375 - 2.12194440e-4 (+ ...): the first product is exact
  r = r - n * -2.12194440e-4f;
  V p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const V y = p * (r * r) + r + 1.0f;
  const VI ni = (VI)t - 0x4B400000;  // vector casts reinterpret the bits
  const VI n1 = ni >> 1, n2 = ni - n1;
  return y * (V)(((VU)n1 + 127u) << 23) * (V)(((VU)n2 + 127u) << 23);
}

FLATLINE_INLINE V sigmoidv(V u) { return 1.0f / (1.0f + expv(-u)); }
FLATLINE_INLINE V geluv(V x) { return x * sigmoidv(kTwoK * (x + kCubic * x * x * x)); }
// gelu'(x) from x clamped to [-kGeluClamp, kGeluClamp] and its sigmoid s.
FLATLINE_INLINE V gelu_grad_of(V x, V s) { return (x * x * kCubic3TwoK + kTwoK) * x * s * (1.0f - s) + s; }
FLATLINE_INLINE V clamp_for_grad(V x) {
  x = x > kGeluClamp ? splat(kGeluClamp) : x;
  return x < -kGeluClamp ? splat(-kGeluClamp) : x;
}
FLATLINE_INLINE V gelu_gradv(V x) {
  x = clamp_for_grad(x);
  return gelu_grad_of(x, sigmoidv(kTwoK * (x + kCubic * x * x * x)));
}

FLATLINE_INLINE void ln_row(const float* x, const float* gamma, const float* beta, float* y, float* mean_out,
                            float* rstd_out, int64_t cols, float eps) {
  V acc = {};
  for (CHUNKS(cols)) { acc += load_n(x + j, k); }
  const float mean = sum_tree(acc) / static_cast<float>(cols);
  V sq = {};
  for (CHUNKS(cols)) {
    const V d = load_n(x + j, k) - mean;
    sq += k == kLanes ? d * d : (below(0, k) ? d * d : V{});  // the padding is not (0 - mean)^2
  }
  const float rstd = 1.0f / std::sqrt(sum_tree(sq) / static_cast<float>(cols) + eps);
  for (CHUNKS(cols)) {
    store_n(y + j, (load_n(x + j, k) - mean) * rstd * load_n(gamma + j, k) + load_n(beta + j, k), k);
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

// dst[j] += v over a chunk.
FLATLINE_INLINE void accumulate(float* dst, V v, int64_t k) { store_n(dst, load_n(dst, k) + v, k); }

}  // namespace

// The kernels' one definition, compiled into each variant below.
namespace body {

FLATLINE_INLINE void exp(const float* x, float* y, int64_t n) {
  for (CHUNKS(n)) { store_n(y + j, expv(load_n(x + j, k)), k); }
}

FLATLINE_INLINE void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                       float* rstd, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) ln_row(x + r * cols, gamma, beta, y + r * cols, mean + r, rstd + r, cols, eps);
}

FLATLINE_INLINE void add_layernorm_forward(const float* a, const float* b, const float* bias, float* s,
                                           const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                                           int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *ar = a + r * cols, *br = b + r * cols;
    float* sr = s + r * cols;
    for (CHUNKS(cols)) {
      store_n(sr + j, load_n(ar + j, k) + load_n(br + j, k) + load_n(bias + j, k), k);
    }
    ln_row(sr, gamma, beta, y + r * cols, mean + r, rstd + r, cols, eps);
  }
}

FLATLINE_INLINE void add_bias_residual(const float* a, const float* b, const float* bias, float* out, int64_t rows,
                                       int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *ar = a + r * cols, *br = b + r * cols;
    float* o = out + r * cols;
    for (CHUNKS(cols)) {
      store_n(o + j, load_n(ar + j, k) + load_n(br + j, k) + load_n(bias + j, k), k);
    }
  }
}

FLATLINE_INLINE void layernorm_backward(const float* dy, const float* x, const float* mean, const float* rstd,
                                        const float* gamma, const float* dres, float* dx, float* dgamma, float* dbeta,
                                        float* dx_sum, float* dres_sum, int64_t rows, int64_t cols) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float *dyr = dy + r * cols, *xr = x + r * cols;
    const float m = mean[r], rs = rstd[r];
    V sg = {}, sgx = {};  // the padding's dy is 0: it adds nothing
    for (CHUNKS(cols)) {
      const V g = load_n(dyr + j, k) * load_n(gamma + j, k);
      sg += g;
      sgx += g * ((load_n(xr + j, k) - m) * rs);
    }
    const float mean_g = sum_tree(sg) * inv_cols, mean_gx = sum_tree(sgx) * inv_cols;
    float* dxr = dx + r * cols;
    const float* rr = dres ? dres + r * cols : nullptr;
    for (CHUNKS(cols)) {
      const V d = load_n(dyr + j, k), xhat = (load_n(xr + j, k) - m) * rs;
      V out = rs * (d * load_n(gamma + j, k) - mean_g - xhat * mean_gx);
      accumulate(dgamma + j, d * xhat, k);
      accumulate(dbeta + j, d, k);
      if (rr) {
        const V res = load_n(rr + j, k);
        out = res + out;
        if (dres_sum) accumulate(dres_sum + j, res, k);
      }
      if (dx_sum) accumulate(dx_sum + j, out, k);
      store_n(dxr + j, out, k);
    }
  }
}

FLATLINE_INLINE void gelu_forward(const float* x, float* y, int64_t n) {
  for (CHUNKS(n)) { store_n(y + j, geluv(load_n(x + j, k)), k); }
}

FLATLINE_INLINE void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (CHUNKS(n)) { store_n(dx + j, load_n(dy + j, k) * gelu_gradv(load_n(x + j, k)), k); }
}

FLATLINE_INLINE void bias_gelu_forward(float* h, const float* bias, float* a, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* hr = h + r * cols;
    float* ar = a + r * cols;
    for (CHUNKS(cols)) {
      // One sigmoid for both: at the clamped x it is the unclamped one's (exactly 0 or 1 past the clamp),
      // so a and gelu' have the bits of gelu_forward's and gelu_backward's.
      const V x = load_n(hr + j, k) + load_n(bias + j, k), xc = clamp_for_grad(x);
      const V s = sigmoidv(kTwoK * (xc + kCubic * xc * xc * xc));
      store_n(ar + j, x * s, k);
      store_n(hr + j, gelu_grad_of(xc, s), k);
    }
  }
}

FLATLINE_INLINE void bias_gelu_backward(const float* gelu_grad, const float* da, float* dh, float* dbias, int64_t rows,
                                        int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *gr = gelu_grad + r * cols, *dar = da + r * cols;
    float* dhr = dh + r * cols;
    for (CHUNKS(cols)) {
      const V d = load_n(dar + j, k) * load_n(gr + j, k);
      store_n(dhr + j, d, k);
      accumulate(dbias + j, d, k);
    }
  }
}

// scale s[j .. j + k), -inf at and past column n.
FLATLINE_INLINE V masked_scores(const float* s, float scale, int64_t j, int64_t k, int64_t n) {
  const V z = scale * load_n(s + j, k);
  return below(j, n) ? z : splat(-kInf);
}

// A causal row touches columns [0, n) in chunks of kLanes that may run past n (not past t): lanes at
// or past n are masked, to -inf before the exp (which makes them 0) and to 0 after.
FLATLINE_INLINE void causal_softmax_forward(const float* s, float* p, float scale, int64_t row0, int64_t rows,
                                            int64_t t) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = (row0 + r) % t + 1;  // the row's unmasked entries
    const int64_t span = std::min(t, (n + kLanes - 1) / kLanes * kLanes);
    const float* sr = s + r * t;
    float* pr = p + r * t;
    V mx = splat(-kInf);
    for (CHUNKS(span)) {
      const V z = masked_scores(sr, scale, j, k, n);
      mx = z > mx ? z : mx;
    }
    const float m = max_tree(mx);
    V sum = {};
    for (CHUNKS(span)) {
      const V e = expv(masked_scores(sr, scale, j, k, n) - m);
      store_n(pr + j, e, k);
      sum += e;
    }
    const float inv = 1.0f / sum_tree(sum);
    for (CHUNKS(span)) { store_n(pr + j, load_n(pr + j, k) * inv, k); }
    for (int64_t j = span; j < t; ++j) pr[j] = 0.0f;
  }
}

FLATLINE_INLINE void causal_softmax_backward(const float* p, const float* dp, float* ds, float scale, int64_t row0,
                                             int64_t rows, int64_t t) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = (row0 + r) % t + 1;
    const int64_t span = std::min(t, (n + kLanes - 1) / kLanes * kLanes);
    const float *pr = p + r * t, *dpr = dp + r * t;
    float* dsr = ds + r * t;
    V acc = {};
    for (CHUNKS(span)) {
      const V v = load_n(dpr + j, k) * load_n(pr + j, k);
      acc += below(j, n) ? v : V{};
    }
    const float dot = sum_tree(acc);
    for (CHUNKS(span)) {
      const V v = scale * (load_n(pr + j, k) * (load_n(dpr + j, k) - dot));
      store_n(dsr + j, below(j, n) ? v : V{}, k);
    }
    for (int64_t j = span; j < t; ++j) dsr[j] = 0.0f;
  }
}

FLATLINE_INLINE void split_heads(const float* src, int64_t src_cols, int64_t col0, const float* bias, float* dst,
                                 int64_t t, int64_t n_head, int64_t head_dim, int64_t row0, int64_t rows) {
  for (int64_t row = row0; row < row0 + rows; ++row) {
    const int64_t b = row / t, i = row % t;
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t c = col0 + h * head_dim;
      const float* s = src + row * src_cols + c;
      float* d = dst + ((b * n_head + h) * t + i) * head_dim;
      if (bias) {
        for (CHUNKS(head_dim)) store_n(d + j, load_n(s + j, k) + load_n(bias + c + j, k), k);
      } else {
        std::memcpy(d, s, sizeof(float) * static_cast<size_t>(head_dim));
      }
    }
  }
}

FLATLINE_INLINE void merge_heads(const float* heads, float* dst, int64_t dst_cols, int64_t col0, float* col_sum,
                                 int64_t t, int64_t n_head, int64_t head_dim, int64_t row0, int64_t rows) {
  for (int64_t row = row0; row < row0 + rows; ++row) {
    const int64_t b = row / t, i = row % t;
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t c = col0 + h * head_dim;
      const float* s = heads + ((b * n_head + h) * t + i) * head_dim;
      float* d = dst + row * dst_cols + c;
      std::memcpy(d, s, sizeof(float) * static_cast<size_t>(head_dim));
      if (col_sum)
        for (CHUNKS(head_dim)) accumulate(col_sum + c + j, load_n(s + j, k), k);
    }
  }
}

FLATLINE_INLINE void add_column_sums(const float* x, float* dst, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (CHUNKS(cols)) { accumulate(dst + j, load_n(x + r * cols + j, k), k); }
}

}  // namespace body

// ---- variants and dispatch ----
// Each kernel three times: the body inlined into a function compiled for x86-64-v4 (AVX-512), v3 (AVX2)
// and the baseline; a table of each variant's functions; the best one the CPU runs, chosen once.
#define FLATLINE_KERNELS(X) \
  X(exp, (const float* x, float* y, int64_t n), \
          (x, y, n)) \
  X(layernorm_forward, (const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd, \
                        int64_t rows, int64_t cols, float eps), \
                        (x, gamma, beta, y, mean, rstd, rows, cols, eps)) \
  X(add_layernorm_forward, (const float* a, const float* b, const float* bias, float* s, const float* gamma, \
                            const float* beta, float* y, float* mean, float* rstd, int64_t rows, int64_t cols, \
                            float eps), \
                            (a, b, bias, s, gamma, beta, y, mean, rstd, rows, cols, eps)) \
  X(add_bias_residual, (const float* a, const float* b, const float* bias, float* out, int64_t rows, int64_t cols), \
                        (a, b, bias, out, rows, cols)) \
  X(layernorm_backward, (const float* dy, const float* x, const float* mean, const float* rstd, const float* gamma, \
                         const float* dres, float* dx, float* dgamma, float* dbeta, float* dx_sum, float* dres_sum, \
                         int64_t rows, int64_t cols), \
                         (dy, x, mean, rstd, gamma, dres, dx, dgamma, dbeta, dx_sum, dres_sum, rows, cols)) \
  X(gelu_forward, (const float* x, float* y, int64_t n), \
                   (x, y, n)) \
  X(gelu_backward, (const float* x, const float* dy, float* dx, int64_t n), \
                    (x, dy, dx, n)) \
  X(bias_gelu_forward, (float* h, const float* bias, float* a, int64_t rows, int64_t cols), \
                        (h, bias, a, rows, cols)) \
  X(bias_gelu_backward, (const float* gelu_grad, const float* da, float* dh, float* dbias, int64_t rows, \
                         int64_t cols), \
                         (gelu_grad, da, dh, dbias, rows, cols)) \
  X(causal_softmax_forward, (const float* s, float* p, float scale, int64_t row0, int64_t rows, int64_t t), \
                             (s, p, scale, row0, rows, t)) \
  X(causal_softmax_backward, (const float* p, const float* dp, float* ds, float scale, int64_t row0, int64_t rows, \
                              int64_t t), \
                              (p, dp, ds, scale, row0, rows, t)) \
  X(split_heads, (const float* src, int64_t src_cols, int64_t col0, const float* bias, float* dst, int64_t t, \
                  int64_t n_head, int64_t head_dim, int64_t row0, int64_t rows), \
                  (src, src_cols, col0, bias, dst, t, n_head, head_dim, row0, rows)) \
  X(merge_heads, (const float* heads, float* dst, int64_t dst_cols, int64_t col0, float* col_sum, int64_t t, \
                  int64_t n_head, int64_t head_dim, int64_t row0, int64_t rows), \
                  (heads, dst, dst_cols, col0, col_sum, t, n_head, head_dim, row0, rows)) \
  X(add_column_sums, (const float* x, float* dst, int64_t rows, int64_t cols), \
                      (x, dst, rows, cols))

#define FLATLINE_VARIANT(name, params, args) FLATLINE_TARGET void name params { body::name args; }
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLATLINE_X86_VARIANTS 1
namespace v4 {
#define FLATLINE_TARGET __attribute__((target("arch=x86-64-v4")))
FLATLINE_KERNELS(FLATLINE_VARIANT)
#undef FLATLINE_TARGET
}  // namespace v4
namespace v3 {
#define FLATLINE_TARGET __attribute__((target("arch=x86-64-v3")))
FLATLINE_KERNELS(FLATLINE_VARIANT)
#undef FLATLINE_TARGET
}  // namespace v3
#endif
namespace baseline {
#define FLATLINE_TARGET
FLATLINE_KERNELS(FLATLINE_VARIANT)
#undef FLATLINE_TARGET
}  // namespace baseline

namespace {

struct Table {
  const char* name;
#define FLATLINE_FIELD(name, params, args) void(*name) params;
  FLATLINE_KERNELS(FLATLINE_FIELD)
#undef FLATLINE_FIELD
};
#define FLATLINE_ENTRY(name, params, args) &FLATLINE_NS::name,
#define FLATLINE_NS baseline
const Table kBaseline = {"baseline", FLATLINE_KERNELS(FLATLINE_ENTRY)};
#undef FLATLINE_NS
#ifdef FLATLINE_X86_VARIANTS
#define FLATLINE_NS v3
const Table kV3 = {"x86-64-v3", FLATLINE_KERNELS(FLATLINE_ENTRY)};
#undef FLATLINE_NS
#define FLATLINE_NS v4
const Table kV4 = {"x86-64-v4", FLATLINE_KERNELS(FLATLINE_ENTRY)};
#undef FLATLINE_NS
#endif
#undef FLATLINE_ENTRY

// The variants this CPU runs, best first.
std::vector<const Table*> runnable() {
  std::vector<const Table*> out;
#ifdef FLATLINE_X86_VARIANTS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) out.push_back(&kV4);
  if (__builtin_cpu_supports("x86-64-v3")) out.push_back(&kV3);
#endif
  out.push_back(&kBaseline);
  return out;
}

std::atomic<const Table*>& active() {
  static std::atomic<const Table*> table{runnable().front()};
  return table;
}

}  // namespace

std::vector<std::string> variants() {
  std::vector<std::string> out;
  for (const Table* t : runnable()) out.push_back(t->name);
  return out;
}

std::string variant() { return active().load()->name; }

void use_variant(const std::string& name) {
  for (const Table* t : runnable())
    if (name == t->name) {
      active().store(t);
      return;
    }
  throw std::invalid_argument("kernels: variant '" + name + "' is not one this CPU runs");
}

#define FLATLINE_PUBLIC(name, params, args) \
  void name params { active().load(std::memory_order_relaxed)->name args; }
FLATLINE_KERNELS(FLATLINE_PUBLIC)
#undef FLATLINE_PUBLIC

}  // namespace flatline::kernels
