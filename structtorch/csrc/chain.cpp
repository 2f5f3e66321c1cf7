// Compiled CPU kernels for linear-chain dynamic programs (structtorch._extension builds this on
// first use). One sequence per task of at::parallel_for; the loop over time runs in C++, with
// double accumulators whatever the input dtype, so long float32 chains keep an exact argmax.
//
// Conventions (validated in Python before any call):
//   unary  (B, T, N) contiguous;  trans (N, N) shared or (B, T-1, N, N) per position;
//   start, end (B, N);  lengths (B,) int64 in [0, T].
//   trans[..., i, j] scores label i at step t followed by label j at step t + 1.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// A factored sum below kTiny, or a factored product whose log-scale exceeds kBigLog, is
// recomputed exactly in log space: the factorization then cannot lose a dominant term.
constexpr double kTiny = 1e-280;
constexpr double kBigLog = 600.0;

// The transition block used between steps t and t + 1 of sequence b.
template <typename T>
struct Blocks {
  const T* data;
  int64_t n;
  int64_t steps;
  bool shared;
  const T* at(int64_t b, int64_t t) const {
    return shared ? data : data + (b * steps + t) * n * n;
  }
};

template <typename T>
Blocks<T> make_blocks(const at::Tensor& trans, int64_t n) {
  const bool shared = trans.dim() == 2;
  return {trans.data_ptr<T>(), n, shared ? 0 : trans.size(1), shared};
}

// Row-normalized exponentials: r[i] = max_j a[i, j] and f[i, j] = exp(a[i, j] - r[i]) <= 1.
template <typename T>
void row_normalize(const T* a, int64_t n, double* r, double* f) {
  for (int64_t i = 0; i < n; ++i) {
    const T* row = a + i * n;
    double m = kNegInf;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(row[j]));
    r[i] = m;
    for (int64_t j = 0; j < n; ++j)
      f[i * n + j] = m == kNegInf ? 0.0 : std::exp(static_cast<double>(row[j]) - m);
  }
}

double finish_lse(double m, double s) { return m == kNegInf ? kNegInf : m + std::log(s); }

// log sum_i exp(alpha[i] + a[i, j]), exactly.
template <typename T>
double exact_lse_column(const double* alpha, const T* a, int64_t n, int64_t j) {
  double m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, alpha[i] + static_cast<double>(a[i * n + j]));
  if (m == kNegInf) return m;
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(alpha[i] + static_cast<double>(a[i * n + j]) - m);
  return finish_lse(m, s);
}

// log sum_j exp(a[i, j] + w[j]), exactly.
template <typename T>
double exact_lse_row(const T* a, const double* w, int64_t n, int64_t i) {
  double m = kNegInf;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(a[i * n + j]) + w[j]);
  if (m == kNegInf) return m;
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(a[i * n + j]) + w[j] - m);
  return finish_lse(m, s);
}

double max_of(const double* x, int64_t n) {
  double m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// ----------------------------------------------------------------------------------------------
// Viterbi: max-plus forward with int16 backpointers, first (smallest) index on ties.

template <typename T>
void viterbi_one(const T* u, const Blocks<T>& blk, const T* st, const T* en, int64_t b, int64_t len,
                 int64_t n, double* score, int64_t* path, std::vector<int16_t>& bp) {
  if (len == 0) {
    *score = 0.0;
    return;
  }
  std::vector<double> alpha(n), next(n);
  for (int64_t j = 0; j < n; ++j) alpha[j] = static_cast<double>(st[j]) + static_cast<double>(u[j]);
  bp.assign(static_cast<size_t>(std::max<int64_t>(len - 1, 0) * n), 0);
  for (int64_t t = 1; t < len; ++t) {
    const T* a = blk.at(b, t - 1);
    int16_t* bpt = bp.data() + (t - 1) * n;
    std::fill(next.begin(), next.end(), kNegInf);
    for (int64_t i = 0; i < n; ++i) {
      const double ai = alpha[i];
      if (ai == kNegInf) continue;
      const T* row = a + i * n;
      for (int64_t j = 0; j < n; ++j) {
        const double v = ai + static_cast<double>(row[j]);
        if (v > next[j]) {
          next[j] = v;
          bpt[j] = static_cast<int16_t>(i);
        }
      }
    }
    const T* ut = u + t * n;
    for (int64_t j = 0; j < n; ++j) alpha[j] = next[j] + static_cast<double>(ut[j]);
  }
  double best = kNegInf;
  int64_t arg = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double v = alpha[j] + static_cast<double>(en[j]);
    if (v > best) {
      best = v;
      arg = j;
    }
  }
  *score = best;
  if (best == kNegInf) return;  // no feasible labeling: the path stays -1
  path[len - 1] = arg;
  for (int64_t t = len - 1; t > 0; --t) {
    arg = bp[(t - 1) * n + arg];
    path[t - 1] = arg;
  }
}

std::tuple<at::Tensor, at::Tensor> viterbi_forward(const at::Tensor& unary, const at::Tensor& trans,
                                                   const at::Tensor& start, const at::Tensor& end,
                                                   const at::Tensor& lengths) {
  const int64_t B = unary.size(0), T = unary.size(1), N = unary.size(2);
  TORCH_CHECK(N <= 32767, "viterbi_forward: at most 32767 labels");
  auto score = at::empty({B}, unary.options().dtype(at::kDouble));
  auto path = at::full({B, T}, -1, unary.options().dtype(at::kLong));
  const int64_t* len = lengths.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(unary.scalar_type(), "viterbi_forward", [&] {
    const auto blk = make_blocks<scalar_t>(trans, N);
    const scalar_t* u = unary.data_ptr<scalar_t>();
    const scalar_t* st = start.data_ptr<scalar_t>();
    const scalar_t* en = end.data_ptr<scalar_t>();
    double* sc = score.data_ptr<double>();
    int64_t* pa = path.data_ptr<int64_t>();
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      std::vector<int16_t> bp;
      for (int64_t b = lo; b < hi; ++b)
        viterbi_one(u + b * T * N, blk, st + b * N, en + b * N, b, len[b], N, sc + b, pa + b * T, bp);
    });
  });
  return {score, path};
}

// ----------------------------------------------------------------------------------------------
// Log-partition: forward recursion alpha_t[j] = u_t[j] + log sum_i exp(alpha_{t-1}[i] + a[i, j]),
// computed as r-scaled sums of f = exp(a - r) (O(N) exponentials per step for shared transitions).

template <typename T>
double logz_one(const T* u, const Blocks<T>& blk, const double* shared_r, const double* shared_f,
                const T* st, const T* en, int64_t b, int64_t len, int64_t n, double* alpha_out) {
  if (len == 0) return 0.0;
  std::vector<double> r(n), f, p(n), s(n);
  if (!blk.shared) f.resize(n * n);
  double* alpha = alpha_out;
  for (int64_t j = 0; j < n; ++j) alpha[j] = static_cast<double>(st[j]) + static_cast<double>(u[j]);
  for (int64_t t = 1; t < len; ++t) {
    const T* a = blk.at(b, t - 1);
    const double* rr = shared_r;
    const double* ff = shared_f;
    if (!blk.shared) {
      row_normalize(a, n, r.data(), f.data());
      rr = r.data();
      ff = f.data();
    }
    double* next = alpha + n;
    double m = kNegInf;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, alpha[i] + rr[i]);
    const T* ut = u + t * n;
    if (m == kNegInf) {
      for (int64_t j = 0; j < n; ++j) next[j] = kNegInf;
      alpha = next;
      continue;
    }
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const double pi = std::exp(alpha[i] + rr[i] - m);
      if (pi == 0.0) continue;
      const double* fi = ff + i * n;
      for (int64_t j = 0; j < n; ++j) s[j] += pi * fi[j];
    }
    for (int64_t j = 0; j < n; ++j) {
      const double lse = s[j] > kTiny ? m + std::log(s[j]) : exact_lse_column(alpha, a, n, j);
      next[j] = lse + static_cast<double>(ut[j]);
    }
    alpha = next;
  }
  std::vector<double> w(n);
  for (int64_t j = 0; j < n; ++j) w[j] = alpha[j] + static_cast<double>(en[j]);
  const double m = max_of(w.data(), n);
  if (m == kNegInf) return m;
  double tot = 0.0;
  for (int64_t j = 0; j < n; ++j) tot += std::exp(w[j] - m);
  return finish_lse(m, tot);
}

template <typename T>
void shared_normalization(const at::Tensor& trans, int64_t n, std::vector<double>& r,
                          std::vector<double>& f) {
  if (trans.dim() != 2) return;
  r.resize(n);
  f.resize(n * n);
  row_normalize(trans.data_ptr<T>(), n, r.data(), f.data());
}

std::tuple<at::Tensor, at::Tensor> logz_forward(const at::Tensor& unary, const at::Tensor& trans,
                                                const at::Tensor& start, const at::Tensor& end,
                                                const at::Tensor& lengths) {
  const int64_t B = unary.size(0), T = unary.size(1), N = unary.size(2);
  auto logz = at::empty({B}, unary.options().dtype(at::kDouble));
  auto alpha = at::full({B, T, N}, kNegInf, unary.options().dtype(at::kDouble));
  const int64_t* len = lengths.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(unary.scalar_type(), "logz_forward", [&] {
    const auto blk = make_blocks<scalar_t>(trans, N);
    std::vector<double> r, f;
    shared_normalization<scalar_t>(trans, N, r, f);
    const scalar_t* u = unary.data_ptr<scalar_t>();
    const scalar_t* st = start.data_ptr<scalar_t>();
    const scalar_t* en = end.data_ptr<scalar_t>();
    double* lz = logz.data_ptr<double>();
    double* al = alpha.data_ptr<double>();
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b)
        lz[b] = logz_one(u + b * T * N, blk, r.data(), f.data(), st + b * N, en + b * N, b, len[b], N,
                         al + b * T * N);
    });
  });
  return {logz, alpha};
}

// ----------------------------------------------------------------------------------------------
// Backward of the log-partition: the beta recursion, node marginals exp(alpha + beta - logZ) and
// edge marginals exp(alpha_t[i] + a[i, j] + u_{t+1}[j] + beta_{t+1}[j] - logZ), scaled by grad.

struct Grads {
  double* unary;  // (T, N)
  double* trans;  // (N, N) accumulated (shared) or (T - 1, N, N)
  double* start;  // (N)
  double* end;    // (N)
};

template <typename T>
void logz_backward_one(double g, const double* alpha, double logz, const T* u, const Blocks<T>& blk,
                       const double* shared_r, const double* shared_f, const T* en, int64_t b,
                       int64_t len, int64_t n, Grads out) {
  if (len == 0 || logz == kNegInf || g == 0.0) return;
  std::vector<double> beta(n), w(n), q(n), r(n), f;
  if (!blk.shared) f.resize(n * n);
  const int64_t last = len - 1;
  for (int64_t j = 0; j < n; ++j) {
    beta[j] = static_cast<double>(en[j]);
    const double m = std::exp(alpha[last * n + j] + beta[j] - logz);
    out.unary[last * n + j] = g * m;
    out.end[j] = g * m;
  }
  for (int64_t t = last - 1; t >= 0; --t) {
    const T* a = blk.at(b, t);
    const double* rr = shared_r;
    const double* ff = shared_f;
    if (!blk.shared) {
      row_normalize(a, n, r.data(), f.data());
      rr = r.data();
      ff = f.data();
    }
    const T* un = u + (t + 1) * n;
    for (int64_t j = 0; j < n; ++j) w[j] = static_cast<double>(un[j]) + beta[j];
    const double mw = max_of(w.data(), n);
    for (int64_t j = 0; j < n; ++j) q[j] = mw == kNegInf ? 0.0 : std::exp(w[j] - mw);
    const double* at = alpha + t * n;
    double* gt = out.trans + (blk.shared ? 0 : t * n * n);
    for (int64_t i = 0; i < n; ++i) {
      const double* fi = ff + i * n;
      double s = 0.0;
      for (int64_t j = 0; j < n; ++j) s += fi[j] * q[j];
      beta[i] = (s > kTiny) ? rr[i] + mw + std::log(s) : exact_lse_row(a, w.data(), n, i);
      if (at[i] == kNegInf || rr[i] == kNegInf || mw == kNegInf) continue;
      const double lf = at[i] + rr[i] + mw - logz;  // edge marginal (i, j) = exp(lf) f[i, j] q[j]
      double* gi = gt + i * n;
      if (lf <= kBigLog) {
        const double scale = g * std::exp(lf);
        for (int64_t j = 0; j < n; ++j) gi[j] += scale * fi[j] * q[j];
      } else {
        for (int64_t j = 0; j < n; ++j)
          gi[j] += g * std::exp(at[i] + static_cast<double>(a[i * n + j]) + w[j] - logz);
      }
    }
    for (int64_t i = 0; i < n; ++i) out.unary[t * n + i] = g * std::exp(at[i] + beta[i] - logz);
  }
  for (int64_t j = 0; j < n; ++j) out.start[j] = out.unary[j];
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> logz_backward(
    const at::Tensor& grad, const at::Tensor& alpha, const at::Tensor& logz, const at::Tensor& unary,
    const at::Tensor& trans, const at::Tensor& end, const at::Tensor& lengths) {
  const int64_t B = unary.size(0), T = unary.size(1), N = unary.size(2);
  const bool shared = trans.dim() == 2;
  auto dopt = unary.options().dtype(at::kDouble);
  auto g_unary = at::zeros({B, T, N}, dopt);
  auto g_trans = shared ? at::zeros({B, N, N}, dopt) : at::zeros(trans.sizes(), dopt);
  auto g_start = at::zeros({B, N}, dopt);
  auto g_end = at::zeros({B, N}, dopt);
  const int64_t* len = lengths.data_ptr<int64_t>();
  const int64_t steps = shared ? 0 : trans.size(1);
  AT_DISPATCH_FLOATING_TYPES(unary.scalar_type(), "logz_backward", [&] {
    const auto blk = make_blocks<scalar_t>(trans, N);
    std::vector<double> r, f;
    shared_normalization<scalar_t>(trans, N, r, f);
    const scalar_t* u = unary.data_ptr<scalar_t>();
    const scalar_t* en = end.data_ptr<scalar_t>();
    const double* gr = grad.data_ptr<double>();
    const double* al = alpha.data_ptr<double>();
    const double* lz = logz.data_ptr<double>();
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        Grads out{g_unary.data_ptr<double>() + b * T * N,
                  g_trans.data_ptr<double>() + b * (shared ? N * N : steps * N * N),
                  g_start.data_ptr<double>() + b * N, g_end.data_ptr<double>() + b * N};
        logz_backward_one(gr[b], al + b * T * N, lz[b], u + b * T * N, blk, r.data(), f.data(),
                          en + b * N, b, len[b], N, out);
      }
    });
  });
  return {g_unary, g_trans, g_start, g_end};
}

}  // namespace

TORCH_LIBRARY(structtorch_chain, m) {
  m.def("viterbi_forward(Tensor unary, Tensor trans, Tensor start, Tensor end, Tensor lengths) -> (Tensor, Tensor)");
  m.def("logz_forward(Tensor unary, Tensor trans, Tensor start, Tensor end, Tensor lengths) -> (Tensor, Tensor)");
  m.def("logz_backward(Tensor grad, Tensor alpha, Tensor logz, Tensor unary, Tensor trans, Tensor end, Tensor lengths) -> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(structtorch_chain, CPU, m) {
  m.impl("viterbi_forward", &viterbi_forward);
  m.impl("logz_forward", &logz_forward);
  m.impl("logz_backward", &logz_backward);
}
