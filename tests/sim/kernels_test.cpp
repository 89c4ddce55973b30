// The fused CPU kernels (sim/kernels.h) one by one against float64 references: exp and its edges, the
// causal softmax and its backward, LayerNorm with the residual add, the head split and merge with their
// column sums, the bias GELU; sizes that are not multiples of the 8 reduction lanes included.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "sim/kernels.h"

namespace flatline {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(1e-30, std::fabs(b)); }

}  // namespace

TEST(Kernels, ExpIsWithinTwoUlpOfLibmAndKeepsItsEdges) {
  std::vector<float> x;
  for (double v = -103.0; v <= 88.7; v += 0.01234) x.push_back(static_cast<float>(v));
  std::vector<float> y(x.size());
  kernels::exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(static_cast<double>(x[i]));
    if (ref >= std::numeric_limits<float>::min()) worst = std::max(worst, rel(y[i], ref));  // normal results
    else EXPECT_NEAR(y[i], ref, 2 * std::numeric_limits<float>::denorm_min()) << x[i];        // subnormal ones
  }
  EXPECT_LT(worst, 2.4e-7);  // measured 1.2e-7: about one float ulp (2^-23 = 1.19e-7)
  EXPECT_GT(worst, 0.0);     // it is an approximation, not libm
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> edge = {0.0f, 88.72f, 88.73f, 1e30f, inf, -104.0f, -1e30f, -inf, nan, 1.0f};
  std::vector<float> out(edge.size());
  kernels::exp(edge.data(), out.data(), static_cast<int64_t>(edge.size()));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_TRUE(std::isfinite(out[1]) && out[1] > 3.3e38f);  // the last finite values
  EXPECT_EQ(out[2], inf);
  EXPECT_EQ(out[3], inf);
  EXPECT_EQ(out[4], inf);
  EXPECT_EQ(out[5], 0.0f);
  EXPECT_EQ(out[6], 0.0f);
  EXPECT_EQ(out[7], 0.0f);
  EXPECT_TRUE(std::isnan(out[8]));
  EXPECT_NEAR(out[9], 2.718281828f, 3e-7);
}

TEST(Kernels, CausalSoftmaxAndItsBackwardMatchFloat64) {
  for (int64_t t : {1, 5, 16, 37}) {
    const int64_t mats = 3, rows = mats * t;
    const float scale = 0.35f;
    std::vector<float> s = randn(rows * t, 7 + t, 3.0f), p(rows * t, -1.0f), dp = randn(rows * t, 8 + t),
                       ds(rows * t, -1.0f);
    for (int64_t r = 0; r < rows; ++r)  // above the diagonal: never read
      for (int64_t j = r % t + 1; j < t; ++j) s[r * t + j] = std::numeric_limits<float>::quiet_NaN();
    // in two calls, so that row0 carries the position in the matrix
    kernels::causal_softmax_forward(s.data(), p.data(), scale, 0, 4, t);
    kernels::causal_softmax_forward(s.data() + 4 * t, p.data() + 4 * t, scale, 4, rows - 4, t);
    kernels::causal_softmax_backward(p.data(), dp.data(), ds.data(), scale, 0, rows, t);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r % t + 1;
      double m = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, scale * static_cast<double>(s[r * t + j]));
      std::vector<double> e(n);
      for (int64_t j = 0; j < n; ++j) sum += e[j] = std::exp(scale * static_cast<double>(s[r * t + j]) - m);
      double dot = 0;
      for (int64_t j = 0; j < n; ++j) dot += dp[r * t + j] * e[j] / sum;
      for (int64_t j = 0; j < t; ++j) {
        const double pj = j < n ? e[j] / sum : 0.0;
        // the float rounding of scale * s (|.| up to ~10 here) alone moves exp by up to ~6e-7 of itself
        EXPECT_NEAR(p[r * t + j], pj, 1e-6 * std::max(pj, 1e-3)) << "t " << t << " row " << r << " col " << j;
        const double dsj = j < n ? scale * pj * (dp[r * t + j] - dot) : 0.0;
        EXPECT_NEAR(ds[r * t + j], dsj, 2e-6) << "t " << t << " row " << r << " col " << j;
      }
    }
  }
}

TEST(Kernels, LayerNormWithTheResidualAddMatchesFloat64BothWays) {
  for (int64_t cols : {3, 16, 50}) {
    const int64_t rows = 9;
    const float eps = 1e-5f;
    std::vector<float> a = randn(rows * cols, 1, 2.0f), b = randn(rows * cols, 2), bias = randn(cols, 3),
                       gamma = randn(cols, 4), beta = randn(cols, 5), dy = randn(rows * cols, 6),
                       dres = randn(rows * cols, 7);
    for (auto& v : a) v += 5.0f;  // a mean far from 0: the two-pass variance must not cancel
    std::vector<float> s(rows * cols), y(rows * cols), mean(rows), rstd(rows), dx(rows * cols);
    std::vector<float> dgamma(cols, 0.0f), dbeta(cols, 0.0f), dx_sum(cols, 0.0f), dres_sum(cols, 0.0f);
    kernels::add_layernorm_forward(a.data(), b.data(), bias.data(), s.data(), gamma.data(), beta.data(), y.data(),
                                   mean.data(), rstd.data(), rows, cols, eps);
    kernels::layernorm_backward(dy.data(), s.data(), mean.data(), rstd.data(), gamma.data(), dres.data(), dx.data(),
                                dgamma.data(), dbeta.data(), dx_sum.data(), dres_sum.data(), rows, cols);
    std::vector<double> rdg(cols, 0), rdb(cols, 0), rdxs(cols, 0), rdrs(cols, 0);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> x(cols), xh(cols), g(cols);
      double mu = 0, var = 0, mg = 0, mgx = 0;
      for (int64_t j = 0; j < cols; ++j) mu += x[j] = double(a[r * cols + j]) + b[r * cols + j] + bias[j];
      mu /= cols;
      for (int64_t j = 0; j < cols; ++j) var += (x[j] - mu) * (x[j] - mu);
      const double rs = 1 / std::sqrt(var / cols + eps);
      for (int64_t j = 0; j < cols; ++j) {
        xh[j] = (x[j] - mu) * rs;
        g[j] = dy[r * cols + j] * double(gamma[j]);
        mg += g[j] / cols;
        mgx += g[j] * xh[j] / cols;
      }
      EXPECT_NEAR(mean[r], mu, 1e-6 * std::fabs(mu));
      EXPECT_NEAR(rstd[r], rs, 1e-6 * rs);
      for (int64_t j = 0; j < cols; ++j) {
        EXPECT_NEAR(s[r * cols + j], x[j], 1e-6 * std::fabs(x[j]) + 1e-7);
        EXPECT_NEAR(y[r * cols + j], xh[j] * gamma[j] + beta[j], 5e-6);
        const double rdx = dres[r * cols + j] + rs * (g[j] - mg - xh[j] * mgx);
        EXPECT_NEAR(dx[r * cols + j], rdx, 5e-6) << cols << " " << r << " " << j;
        rdg[j] += dy[r * cols + j] * xh[j];
        rdb[j] += dy[r * cols + j];
        rdxs[j] += rdx;
        rdrs[j] += dres[r * cols + j];
      }
    }
    for (int64_t j = 0; j < cols; ++j) {
      EXPECT_NEAR(dgamma[j], rdg[j], 1e-5);
      EXPECT_NEAR(dbeta[j], rdb[j], 1e-5);
      EXPECT_NEAR(dx_sum[j], rdxs[j], 1e-5);
      EXPECT_NEAR(dres_sum[j], rdrs[j], 1e-5);
    }
  }
}

TEST(Kernels, HeadsSplitAndMergeAreInverseAndSumTheirColumns) {
  const int64_t batch = 2, t = 5, n_head = 3, head_dim = 4, C = n_head * head_dim, cols = 3 * C;
  std::vector<float> src = randn(batch * t * cols, 11), bias = randn(cols, 12);
  std::vector<float> heads(3 * batch * n_head * t * head_dim), back(batch * t * cols, -1.0f), col_sum(cols, 0.0f);
  for (int part = 0; part < 3; ++part)
    kernels::split_heads(src.data(), cols, part * C, bias.data(), heads.data() + part * batch * t * C, t, n_head,
                         head_dim, 0, batch * t);
  // q of batch 1, head 2, position 3, element 1 is src row 1 * t + 3, column 2 * head_dim + 1, plus its bias
  EXPECT_EQ(heads[((1 * n_head + 2) * t + 3) * head_dim + 1], src[(1 * t + 3) * cols + 2 * head_dim + 1] + bias[9]);
  for (int part = 0; part < 3; ++part)
    kernels::merge_heads(heads.data() + part * batch * t * C, back.data(), cols, part * C, col_sum.data(), t, n_head,
                         head_dim, 0, batch * t);
  for (int64_t r = 0; r < batch * t; ++r)
    for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(back[r * cols + j], src[r * cols + j] + bias[j]);
  for (int64_t j = 0; j < cols; ++j) {
    double ref = 0;
    for (int64_t r = 0; r < batch * t; ++r) ref += back[r * cols + j];
    EXPECT_NEAR(col_sum[j], ref, 1e-5);
  }
}

TEST(Kernels, BiasGeluMatchesFloat64AndSumsItsBiasGradient) {
  const int64_t rows = 6, cols = 21;
  std::vector<float> h = randn(rows * cols, 21, 3.0f), bias = randn(cols, 22), da = randn(rows * cols, 23);
  h[5] = 2e4f;  // past the derivative's clamp
  h[6] = -2e4f;
  const std::vector<float> h0 = h;
  std::vector<float> a(rows * cols), dh(rows * cols), dbias(cols, 0.0f);
  kernels::bias_gelu_forward(h.data(), bias.data(), a.data(), rows, cols);
  kernels::bias_gelu_backward(h.data(), da.data(), dh.data(), dbias.data(), rows, cols);
  const double k = std::sqrt(2 / M_PI);
  std::vector<double> rdb(cols, 0);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double x = double(h0[i]) + bias[i % cols], th = std::tanh(k * (x + 0.044715 * x * x * x));
    EXPECT_NEAR(a[i], 0.5 * x * (1 + th), 3e-7 * (1 + std::fabs(x)));
    const double d = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
    EXPECT_NEAR(h[i], d, 2e-6 * (1 + std::fabs(d)));  // gelu', what the backward pass reads
    EXPECT_NEAR(dh[i], da[i] * d, 2e-6 * (1 + std::fabs(da[i] * d)));
    rdb[i % cols] += da[i] * d;
  }
  for (int64_t j = 0; j < cols; ++j) EXPECT_NEAR(dbias[j], rdb[j], 1e-5);
  // the fused pass and GELU alone give the same bits
  std::vector<float> x(rows * cols), ga(rows * cols), gd(rows * cols), ones(rows * cols, 1.0f);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = h0[i] + bias[i % cols];
  kernels::gelu_forward(x.data(), ga.data(), rows * cols);
  kernels::gelu_backward(x.data(), ones.data(), gd.data(), rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(ga[i], a[i]) << i;
    ASSERT_EQ(gd[i], h[i]) << i;
  }
}

}  // namespace flatline
