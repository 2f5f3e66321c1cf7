// Compiled CPU kernels for linear-chain dynamic programs (structtorch._extension builds this on
// first use). One sequence per task of at::parallel_for; the loop over time runs in C++, with
// double accumulators whatever the input dtype, so long float32 chains keep an exact argmax.
//
// Conventions (validated in Python before any call):
//   unary  (B, T, N) contiguous;  trans (N, N) shared or (B, T-1, N, N) per position;
//   start, end (B, N);  lengths (B,) int64 in [0, T].
//   trans[..., i, j] scores label i at step t followed by label j at step t + 1.
#include "api.h"
#include "common.h"

namespace {

using structtorch::Blocks;
using structtorch::Check;
using structtorch::kNegInf;
using structtorch::make_blocks;

// A factored sum below kTiny, or a factored product whose log-scale exceeds kBigLog, is
// recomputed exactly in log space: the factorization then cannot lose a dominant term.
constexpr double kTiny = 1e-280;
constexpr double kBigLog = 300.0;

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
  std::vector<double> alpha(n), next(n), argd(n);
  for (int64_t j = 0; j < n; ++j) alpha[j] = static_cast<double>(st[j]) + static_cast<double>(u[j]);
  bp.assign(static_cast<size_t>(std::max<int64_t>(len - 1, 0) * n), 0);
  for (int64_t t = 1; t < len; ++t) {
    const T* a = blk.at(b, t - 1);
    double* nx = next.data();
    double* ag = argd.data();  // argmax as double: same width as the scores, so the blend vectorizes
    for (int64_t j = 0; j < n; ++j) {
      nx[j] = kNegInf;
      ag[j] = 0.0;
    }
    for (int64_t i = 0; i < n; ++i) {
      const double ai = alpha[i];
      if (ai == kNegInf) continue;
      const T* row = a + i * n;
      const double di = static_cast<double>(i);
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        const double v = ai + static_cast<double>(row[j]);
        const bool better = v > nx[j];  // strict: the first maximal i wins ties
        nx[j] = better ? v : nx[j];
        ag[j] = better ? di : ag[j];
      }
    }
    int16_t* bpt = bp.data() + (t - 1) * n;
    const T* ut = u + t * n;
    for (int64_t j = 0; j < n; ++j) {
      bpt[j] = static_cast<int16_t>(ag[j]);
      alpha[j] = nx[j] + static_cast<double>(ut[j]);
    }
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
  int64_t B, T, N;
  std::tie(B, T, N) = Check{"viterbi_forward"}.chain(unary, trans, start, end, lengths);
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
// k best labelings: a k-list Viterbi, as the PyTorch reference (chain/_torch.py kbest) computes
// it, bit for bit. top[j][r] is the r-th best score of the prefixes ending in j; its candidates
// top[i][r'] + a[i, j] rank by score (descending), then by code i * k + r' (ascending), and the
// final list ranks top[j][r] + end[j] by code j * k + r the same way (the reference's stable sort).

// The k first codes of cand (n entries) in that order, written to out (k entries).
void best_codes(const std::vector<double>& cand, int64_t k, std::vector<int32_t>& order, int32_t* out) {
  const int64_t n = static_cast<int64_t>(cand.size());
  order.resize(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) order[c] = static_cast<int32_t>(c);
  const auto before = [&cand](int32_t x, int32_t y) { return cand[x] > cand[y] || (cand[x] == cand[y] && x < y); };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
  std::copy(order.begin(), order.begin() + k, out);
}

template <typename T>
void kbest_one(const T* u, const Blocks<T>& blk, const T* st, const T* en, int64_t b, int64_t len, int64_t n,
               int64_t k, int64_t steps, double* scores, int64_t* paths) {
  for (int64_t r = 0; r < k; ++r) scores[r] = r == 0 && len == 0 ? 0.0 : kNegInf;
  if (len == 0) return;
  std::vector<double> top(n * k, kNegInf), next(n * k), cand(n * k);
  std::vector<int32_t> order, bp(static_cast<size_t>(std::max<int64_t>(len - 1, 0) * n * k)), last(k);
  for (int64_t j = 0; j < n; ++j) top[j * k] = static_cast<double>(st[j]) + static_cast<double>(u[j]);
  for (int64_t t = 1; t < len; ++t) {
    const T* a = blk.at(b, t - 1);
    int32_t* bpt = bp.data() + (t - 1) * n * k;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < k; ++r) cand[i * k + r] = top[i * k + r] + static_cast<double>(a[i * n + j]);
      best_codes(cand, k, order, bpt + j * k);
      const double ut = static_cast<double>(u[t * n + j]);
      for (int64_t r = 0; r < k; ++r) next[j * k + r] = cand[bpt[j * k + r]] + ut;
    }
    top.swap(next);
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < k; ++r) cand[j * k + r] = top[j * k + r] + static_cast<double>(en[j]);
  best_codes(cand, k, order, last.data());
  for (int64_t r = 0; r < k; ++r) {
    const double v = cand[last[r]];
    if (v == kNegInf) continue;  // a missing entry: -inf, path -1
    scores[r] = v;
    int64_t code = last[r];
    int64_t* path = paths + r * steps;
    for (int64_t t = len - 1; t >= 0; --t) {
      path[t] = code / k;
      if (t > 0) code = bp[(t - 1) * n * k + code];
    }
  }
}

std::tuple<at::Tensor, at::Tensor> kbest_forward(const at::Tensor& unary, const at::Tensor& trans,
                                                 const at::Tensor& start, const at::Tensor& end,
                                                 const at::Tensor& lengths, int64_t k) {
  int64_t B, T, N;
  std::tie(B, T, N) = Check{"kbest_forward"}.chain(unary, trans, start, end, lengths);
  TORCH_CHECK(k >= 1 && k <= std::numeric_limits<int32_t>::max() / std::max<int64_t>(N, 1),
              "kbest_forward: k must lie in [1, 2^31 / N)");
  auto scores = at::empty({B, k}, unary.options().dtype(at::kDouble));
  auto paths = at::full({B, k, T}, -1, unary.options().dtype(at::kLong));
  const int64_t* len = lengths.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(unary.scalar_type(), "kbest_forward", [&] {
    const auto blk = make_blocks<scalar_t>(trans, N);
    const scalar_t* u = unary.data_ptr<scalar_t>();
    const scalar_t* st = start.data_ptr<scalar_t>();
    const scalar_t* en = end.data_ptr<scalar_t>();
    double* sc = scores.data_ptr<double>();
    int64_t* pa = paths.data_ptr<int64_t>();
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b)
        kbest_one(u + b * T * N, blk, st + b * N, en + b * N, b, len[b], N, k, T, sc + b * k, pa + b * k * T);
    });
  });
  return {scores, paths};
}

// ----------------------------------------------------------------------------------------------
// Log-partition. The transitions arrive row-normalized from Python (r[i] = max_j a[i, j],
// f[i, j] = exp(a[i, j] - r[i]) in double, computed there with vectorized exponentials), so a
// step costs one mat-vec and O(N) exponentials:
//   alpha_t[j] = u_t[j] + m + log sum_i exp(alpha_{t-1}[i] + r[i] - m) f[i, j]
//   beta_t[i]  = r[i] + mw + log sum_j f[i, j] exp(u_{t+1}[j] + beta_{t+1}[j] - mw)
// A sum below kTiny is recomputed exactly in log space from the raw scores.

struct Normalized {
  const double* r;  // (N) shared or (B, T-1, N)
  const double* f;  // (N, N) shared or (B, T-1, N, N)
  int64_t n, steps;
  bool shared;
  const double* r_at(int64_t b, int64_t t) const { return shared ? r : r + (b * steps + t) * n; }
  const double* f_at(int64_t b, int64_t t) const { return shared ? f : f + (b * steps + t) * n * n; }
};

// r (N) or (B, T-1, N) and f shaped as the transitions, both float64.
void check_normalized(const char* op, const at::Tensor& r, const at::Tensor& f, int64_t B, int64_t T, int64_t N) {
  const Check c{op};
  c.transitions(f, "f", at::kDouble, B, T, N);
  if (f.dim() == 2)
    c.tensor(r, "r", at::kDouble, {N});
  else
    c.tensor(r, "r", at::kDouble, {B, std::max<int64_t>(T - 1, 0), N});
}

Normalized make_normalized(const at::Tensor& r, const at::Tensor& f, int64_t n) {
  const bool shared = f.dim() == 2;
  return {r.data_ptr<double>(), f.data_ptr<double>(), n, shared ? 0 : f.size(1), shared};
}

// Forward: also records, for each transition t -> t + 1, the scale m_t = max_i alpha_t[i] + r[i]
// and p_t[i] = exp(alpha_t[i] + r[i] - m_t), which the backward reuses instead of exponentiating.
struct ForwardOut {
  double* alpha;  // (T, N)
  double* p;      // (T, N), rows 0 .. len - 2 used (0 beyond)
  double* m;      // (T)
};

template <typename T>
double logz_one(const T* u, const Blocks<T>& blk, const Normalized& nrm, const T* st, const T* en,
                int64_t b, int64_t len, int64_t n, ForwardOut out) {
  if (len == 0) return 0.0;
  std::vector<double> s(n), w(n);
  double* alpha = out.alpha;
  for (int64_t j = 0; j < n; ++j) alpha[j] = static_cast<double>(st[j]) + static_cast<double>(u[j]);
  for (int64_t t = 1; t < len; ++t, alpha += n) {
    const double* rr = nrm.r_at(b, t - 1);
    const double* ff = nrm.f_at(b, t - 1);
    double* next = alpha + n;
    double* p = out.p + (t - 1) * n;
    double m = kNegInf;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, alpha[i] + rr[i]);
    out.m[t - 1] = m;
    if (m == kNegInf) {
      for (int64_t j = 0; j < n; ++j) next[j] = kNegInf, p[j] = 0.0;
      continue;
    }
    double* sp = s.data();
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const double pi = std::exp(alpha[i] + rr[i] - m);
      p[i] = pi;
      if (pi == 0.0) continue;
      const double* fi = ff + i * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) sp[j] += pi * fi[j];
    }
    const T* ut = u + t * n;
    const T* a = blk.at(b, t - 1);
    for (int64_t j = 0; j < n; ++j) {
      const double lse = sp[j] > kTiny ? m + std::log(sp[j]) : exact_lse_column(alpha, a, n, j);
      next[j] = lse + static_cast<double>(ut[j]);
    }
  }
  for (int64_t j = 0; j < n; ++j) w[j] = alpha[j] + static_cast<double>(en[j]);
  const double m = max_of(w.data(), n);
  if (m == kNegInf) return m;
  double tot = 0.0;
  for (int64_t j = 0; j < n; ++j) tot += std::exp(w[j] - m);
  return finish_lse(m, tot);
}

// The score of the labeling y[0 .. len) (0 when len = 0), in double.
template <typename T>
double gold_score(const T* u, const Blocks<T>& blk, const T* st, const T* en, int64_t b, int64_t len, int64_t n,
                  const int64_t* y) {
  if (len == 0) return 0.0;
  double score = static_cast<double>(st[y[0]]) + static_cast<double>(en[y[len - 1]]);
  for (int64_t t = 0; t < len; ++t) {
    score += static_cast<double>(u[t * n + y[t]]);
    if (t > 0) score += static_cast<double>(blk.at(b, t - 1)[y[t - 1] * n + y[t]]);
  }
  return score;
}

// logZ (B,), the factors alpha, p (B, T, N) and m (B, T) the backward reuses, and with labels
// (B, T) (an empty 1-D tensor: none; (B, 0) labels are labels) the CRF loss logZ - score(labels)
// (B,), +inf where logZ = -inf.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> logz_forward(
    const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& r, const at::Tensor& f,
    const at::Tensor& start, const at::Tensor& end, const at::Tensor& lengths, const at::Tensor& labels) {
  int64_t B, T, N;
  const Check c{"logz_forward"};
  std::tie(B, T, N) = c.chain(unary, trans, start, end, lengths);
  check_normalized("logz_forward", r, f, B, T, N);
  const bool gold = !(labels.dim() == 1 && labels.numel() == 0);  // none: an empty 1-D tensor
  if (gold) c.labels(labels, "labels", lengths, B, T, N);
  const auto dopt = unary.options().dtype(at::kDouble);
  auto logz = at::empty({B}, dopt);
  auto nll = at::empty({gold ? B : 0}, dopt);
  auto alpha = at::empty({B, T, N}, dopt);  // every entry is written below: no fill pass
  auto p = at::empty({B, T, N}, dopt);
  auto m = at::empty({B, T}, dopt);
  const int64_t* len = lengths.data_ptr<int64_t>();
  const auto nrm = make_normalized(r, f, N);
  AT_DISPATCH_FLOATING_TYPES(unary.scalar_type(), "logz_forward", [&] {
    const auto blk = make_blocks<scalar_t>(trans, N);
    const scalar_t* u = unary.data_ptr<scalar_t>();
    const scalar_t* st = start.data_ptr<scalar_t>();
    const scalar_t* en = end.data_ptr<scalar_t>();
    double* lz = logz.data_ptr<double>();
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        ForwardOut out{alpha.data_ptr<double>() + b * T * N, p.data_ptr<double>() + b * T * N,
                       m.data_ptr<double>() + b * T};
        lz[b] = logz_one(u + b * T * N, blk, nrm, st + b * N, en + b * N, b, len[b], N, out);
        if (gold) {
          const double score = gold_score(u + b * T * N, blk, st + b * N, en + b * N, b, len[b], N,
                                          labels.data_ptr<int64_t>() + b * T);
          nll.data_ptr<double>()[b] = lz[b] == kNegInf ? std::numeric_limits<double>::infinity() : lz[b] - score;
        }
        const int64_t used = std::max<int64_t>(len[b] - 1, 0);  // transitions inside the length
        std::fill(out.alpha + len[b] * N, out.alpha + T * N, kNegInf);
        std::fill(out.p + used * N, out.p + T * N, 0.0);
        std::fill(out.m + used, out.m + T, kNegInf);
      }
    });
  });
  return {logz, alpha, p, m, nll};
}

// Backward: the beta recursion, with every marginal read off the same factors (``ft`` is f with
// its last two axes transposed, so that s = f q runs as contiguous axpys),
//   node_t[i]      = p_t[i] * s_t[i] * c_t,       s_t[i] = sum_j f[i, j] q_t[j],
//   edge_t[i, j]   = p_t[i] * f[i, j] * q_t[j] * c_t,   q_t[j] = exp(w_t[j] - mw_t),
//   c_t = exp(m_t + mw_t - logZ),  w_t = u_{t+1} + beta_{t+1},
// so a step costs one mat-vec, N exponentials, N logarithms, one exp and N^2 products for the
// edges. Steps where c_t would overflow (log c_t > kBigLog) are done exactly, as
// exp(alpha_t[i] + a[i, j] + w_t[j] - logZ). The edges go into one (N, N) block per sequence for
// shared transitions, or one per step; with labels, the labeling's indicators are subtracted (the
// gradient of the CRF loss logZ - score). Everything is times the upstream gradient g.
struct BackwardOut {
  double* edges;     // (N, N) summed over the steps, or (T - 1, N, N) per step; nullptr: no edges
  bool per_step;
  const int64_t* y;  // (T) the labeling whose indicators are subtracted, or nullptr
};

// Node marginals of one position, renormalized to sum to one (they do exactly; this removes the
// cancellation error of exp(alpha + beta - logZ) at large magnitudes), times the gradient g.
template <typename T>
void write_nodes(const double* node, int64_t n, double g, T* out) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += node[i];
  const double scale = total > 0.0 ? g / total : 0.0;
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(node[i] * scale);
}

// One step's edge marginals times g, added into e (N, N): factored (row factors se = g p c, f, q)
// or, on an exact step, from the raw scores a.
template <typename T>
void add_edges(const double* se, const double* f, const double* q, bool exact, const double* at, const T* a,
               const double* w, double g, double logz, int64_t n, double* e) {
  for (int64_t i = 0; i < n; ++i) {
    double* ei = e + i * n;
    if (!exact) {
      const double si = se[i];
      if (si == 0.0) continue;
      const double* fi = f + i * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) ei[j] += si * fi[j] * q[j];
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const double aij = static_cast<double>(a[i * n + j]);
        if (aij != kNegInf && w[j] != kNegInf) ei[j] += g * std::exp(at[i] + aij + w[j] - logz);
      }
    }
  }
}

template <typename T>
void backward_one(double g, double logz, const T* u, const Blocks<T>& blk, const Normalized& nrm,
                  const Normalized& nrm_t, const T* en, int64_t b, int64_t len, int64_t n, const ForwardOut fw,
                  T* g_unary, BackwardOut out) {
  std::vector<double> w(n), s(n), q(n), se(n), node(n), next_beta(n), this_beta(n);
  const int64_t last = len - 1;
  double* nb = next_beta.data();  // beta_{t+1}
  double* cur = this_beta.data();  // beta_t
  for (int64_t j = 0; j < n; ++j) {
    nb[j] = static_cast<double>(en[j]);
    node[j] = std::exp(fw.alpha[last * n + j] + nb[j] - logz);
  }
  write_nodes(node.data(), n, g, g_unary + last * n);
  for (int64_t t = last - 1; t >= 0; --t) {
    const double* rr = nrm_t.r_at(b, t);
    const double* ft = nrm_t.f_at(b, t);  // f transposed
    const T* un = u + (t + 1) * n;
    for (int64_t j = 0; j < n; ++j) w[j] = static_cast<double>(un[j]) + nb[j];
    const double mw = max_of(w.data(), n);
    if (mw == kNegInf) {  // nothing feasible follows: zero marginals
      for (int64_t i = 0; i < n; ++i) cur[i] = kNegInf, g_unary[t * n + i] = T(0);
      std::swap(nb, cur);
      continue;
    }
    for (int64_t j = 0; j < n; ++j) q[j] = std::exp(w[j] - mw);
    const T* a = blk.at(b, t);
    double* sp = s.data();
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t j = 0; j < n; ++j) {  // s = f q as axpys over the columns of f (ft's rows)
      const double qj = q[j];
      if (qj == 0.0) continue;
      const double* fj = ft + j * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) sp[i] += qj * fj[i];
    }
    for (int64_t i = 0; i < n; ++i)
      cur[i] = sp[i] > kTiny ? rr[i] + mw + std::log(sp[i]) : exact_lse_row(a, w.data(), n, i);
    const double lc = fw.m[t] + mw - logz;
    const double* at = fw.alpha + t * n;
    const double* p = fw.p + t * n;
    const bool exact = !(lc <= kBigLog);
    const double c = exact ? 0.0 : std::exp(lc);
    for (int64_t i = 0; i < n; ++i) {
      se[i] = g * p[i] * c;
      node[i] = (!exact && s[i] > kTiny) ? p[i] * s[i] * c : std::exp(at[i] + cur[i] - logz);
    }
    write_nodes(node.data(), n, g, g_unary + t * n);
    if (out.edges)
      add_edges(se.data(), nrm.f_at(b, t), q.data(), exact, at, a, w.data(), g, logz, n,
                out.per_step ? out.edges + t * n * n : out.edges);
    std::swap(nb, cur);
  }
  if (!out.y) return;
  for (int64_t t = 0; t < len; ++t) {
    g_unary[t * n + out.y[t]] -= static_cast<T>(g);
    if (out.edges && t > 0) (out.per_step ? out.edges + (t - 1) * n * n : out.edges)[out.y[t - 1] * n + out.y[t]] -= g;
  }
}

// Gradients of logZ (with labels: of logZ - score(labels)) times grad: unary (B, T, N) in the input
// dtype, and with ``edges`` the transitions' in double, (B, N, N) for shared transitions (summed
// over the batch by the caller) or (B, T-1, N, N).
std::tuple<at::Tensor, at::Tensor> logz_backward(
    const at::Tensor& grad, const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& r,
    const at::Tensor& f, const at::Tensor& ft, const at::Tensor& end, const at::Tensor& lengths,
    const at::Tensor& logz, const at::Tensor& alpha, const at::Tensor& p, const at::Tensor& m,
    const at::Tensor& labels, bool edges) {
  int64_t B, T, N;
  const Check c{"logz_backward"};
  std::tie(B, T, N) = c.chain(unary, trans, at::Tensor(), end, lengths);
  check_normalized("logz_backward", r, f, B, T, N);
  check_normalized("logz_backward", r, ft, B, T, N);
  c.tensor(grad, "grad", at::kDouble, {B});
  c.tensor(logz, "logz", at::kDouble, {B});
  c.tensor(alpha, "alpha", at::kDouble, {B, T, N});
  c.tensor(p, "p", at::kDouble, {B, T, N});
  c.tensor(m, "m", at::kDouble, {B, T});
  const bool gold = !(labels.dim() == 1 && labels.numel() == 0);  // none: an empty 1-D tensor
  if (gold) c.labels(labels, "labels", lengths, B, T, N);
  const bool per_step = trans.dim() == 4;
  const auto dopt = unary.options().dtype(at::kDouble);
  auto g_unary = at::empty({B, T, N}, unary.options());  // every entry is written below
  auto g_trans = !edges ? at::empty({0}, dopt)
                        : per_step ? at::zeros({B, std::max<int64_t>(T - 1, 0), N, N}, dopt) : at::zeros({B, N, N}, dopt);
  const int64_t* len = lengths.data_ptr<int64_t>();
  const auto nrm = make_normalized(r, f, N), nrm_t = make_normalized(r, ft, N);
  AT_DISPATCH_FLOATING_TYPES(unary.scalar_type(), "logz_backward", [&] {
    const auto blk = make_blocks<scalar_t>(trans, N);
    const scalar_t* u = unary.data_ptr<scalar_t>();
    const scalar_t* en = end.data_ptr<scalar_t>();
    const double* gr = grad.data_ptr<double>();
    const double* lz = logz.data_ptr<double>();
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const ForwardOut fw{alpha.data_ptr<double>() + b * T * N, p.data_ptr<double>() + b * T * N,
                            m.data_ptr<double>() + b * T};
        const int64_t block = per_step ? std::max<int64_t>(T - 1, 0) * N * N : N * N;
        const BackwardOut out{edges ? g_trans.data_ptr<double>() + b * block : nullptr, per_step,
                              gold ? labels.data_ptr<int64_t>() + b * T : nullptr};
        scalar_t* gu = g_unary.data_ptr<scalar_t>() + b * T * N;
        const bool active = len[b] > 0 && lz[b] != kNegInf && gr[b] != 0.0;
        if (active) backward_one(gr[b], lz[b], u + b * T * N, blk, nrm, nrm_t, en + b * N, b, len[b], N, fw, gu, out);
        std::fill(gu + (active ? len[b] : 0) * N, gu + T * N, scalar_t(0));
      }
    });
  });
  return {g_unary, g_trans};
}

// ----------------------------------------------------------------------------------------------
// Loss-augmented Viterbi, margin rescaling with a loss that folds into the scores (lossaug's
// fold_search on CPU): unit(t, j) is costs[t, j] or, without costs, the Hamming indicator
// [j != y_t]; pair costs add to the transitions. The found labeling's value s(z) + Delta - s(y)
// is recomputed along it (as lossaug's generic search does), and the target is kept where it
// attains the maximum (value Delta(y, y), count Delta(y, y), scale 0).

struct FoldLoss {
  const double* costs;  // (T, N) of this sequence, or null: the Hamming indicators
  const double* pair;   // (T-1, N, N) of this sequence, or null
  const int64_t* y;
  int64_t n;
  double unit(int64_t t, int64_t j) const { return costs ? costs[t * n + j] : (j != y[t] ? 1.0 : 0.0); }
  double count(const int64_t* z, int64_t len) const {
    double c = 0.0;
    for (int64_t t = 0; t < len; ++t) {
      c += unit(t, z[t]);
      if (pair && t > 0) c += pair[((t - 1) * n + z[t - 1]) * n + z[t]];
    }
    return c;
  }
};

void fold_one(const double* u, const Blocks<double>& blk, const double* st, const double* en, int64_t b,
              int64_t len, int64_t n, const FoldLoss& loss, std::vector<double>& buf, std::vector<double>& steps,
              std::vector<int16_t>& bp, double* value, int64_t* path, double* count, double* scale, double* gold) {
  *gold = gold_score(u, blk, st, en, b, len, n, loss.y);
  const double h0 = loss.count(loss.y, len);
  double best = kNegInf;
  if (len > 0) {
    buf.resize(static_cast<size_t>(len * n));
    for (int64_t t = 0; t < len; ++t)
      for (int64_t j = 0; j < n; ++j) buf[t * n + j] = u[t * n + j] + loss.unit(t, j);
    Blocks<double> folded = blk;
    if (loss.pair) {  // per-step transitions plus the pair costs, as one sequence's blocks
      steps.resize(static_cast<size_t>(std::max<int64_t>(len - 1, 0) * n * n));
      for (int64_t t = 0; t + 1 < len; ++t)
        for (int64_t e = 0; e < n * n; ++e) steps[t * n * n + e] = blk.at(b, t)[e] + loss.pair[t * n * n + e];
      folded = Blocks<double>{steps.data(), n, std::max<int64_t>(len - 1, 0), false};
    }
    viterbi_one(buf.data(), folded, st, en, loss.pair ? 0 : b, len, n, &best, path, bp);
  }
  double found = kNegInf, h = 0.0;
  if (best != kNegInf) {
    h = loss.count(path, len);
    found = gold_score(u, blk, st, en, b, len, n, path) + h - *gold;
  }
  const bool keep = !(found > h0);  // ties (and no feasible labeling): the target
  *value = keep ? h0 : found;
  *count = keep ? h0 : h;
  *scale = keep ? 0.0 : 1.0;
  if (keep)
    for (int64_t t = 0; t < len; ++t) path[t] = loss.y[t];
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fold_forward(
    const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const at::Tensor& target, const std::optional<at::Tensor>& costs,
    const std::optional<at::Tensor>& pair) {
  const Check check{"fold_forward"};
  int64_t B, T, N;
  std::tie(B, T, N) = check.chain(unary, trans, start, end, lengths);
  TORCH_CHECK(unary.scalar_type() == at::kDouble, "fold_forward: the potentials must be float64");
  TORCH_CHECK(N <= 32767, "fold_forward: at most 32767 labels");
  check.labels(target, "target", lengths, B, T, N);
  if (costs) check.tensor(*costs, "costs", at::kDouble, {B, T, N});
  if (pair) check.tensor(*pair, "pair", at::kDouble, {B, std::max<int64_t>(T - 1, 0), N, N});
  const auto f64 = unary.options().dtype(at::kDouble);
  auto value = at::empty({B}, f64), count = at::empty({B}, f64), scale = at::empty({B}, f64);
  auto gold = at::empty({B}, f64);
  auto path = at::full({B, T}, -1, unary.options().dtype(at::kLong));
  const auto blk = make_blocks<double>(trans, N);
  const double *u = unary.data_ptr<double>(), *st = start.data_ptr<double>(), *en = end.data_ptr<double>();
  const double* cp = costs ? costs->data_ptr<double>() : nullptr;
  const double* pp = pair ? pair->data_ptr<double>() : nullptr;
  const int64_t *len = lengths.data_ptr<int64_t>(), *y = target.data_ptr<int64_t>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> buf, steps;
    std::vector<int16_t> bp;
    for (int64_t b = lo; b < hi; ++b) {
      const FoldLoss loss{cp ? cp + b * T * N : nullptr, pp ? pp + b * std::max<int64_t>(T - 1, 0) * N * N : nullptr,
                          y + b * T, N};
      fold_one(u + b * T * N, blk, st + b * N, en + b * N, b, len[b], N, loss, buf, steps, bp,
               value.data_ptr<double>() + b, path.data_ptr<int64_t>() + b * T, count.data_ptr<double>() + b,
               scale.data_ptr<double>() + b, gold.data_ptr<double>() + b);
    }
  });
  return {value, path, count, scale, gold};
}

}  // namespace

// The kernels as the Python bindings of python.cpp call them (no dispatcher in between), with the
// glue of a call in C++ too: the row-normalized transitions, the gradients of start and end and
// the sum of shared transitions' gradients.
namespace structtorch::chain {

std::tuple<at::Tensor, at::Tensor> viterbi(const at::Tensor& unary, const at::Tensor& trans,
                                           const at::Tensor& start, const at::Tensor& end,
                                           const at::Tensor& lengths) {
  return viterbi_forward(unary, trans, start, end, lengths);
}

std::tuple<at::Tensor, at::Tensor> kbest(const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& start,
                                         const at::Tensor& end, const at::Tensor& lengths, int64_t k) {
  return kbest_forward(unary, trans, start, end, lengths, k);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fold(
    const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const at::Tensor& target, const std::optional<at::Tensor>& costs,
    const std::optional<at::Tensor>& pair) {
  return fold_forward(unary, trans, start, end, lengths, target, costs, pair);
}

// r = max_j a[.., i, j] (may be -inf) and f = exp(a - r) <= 1 (0 on all -inf rows), in double,
// and with transposed f's transpose in its last two dimensions (contiguous): plain loops, no
// operator calls (a small call's transitions are a few entries).
std::tuple<at::Tensor, at::Tensor, at::Tensor> normalized(const at::Tensor& trans, bool transposed) {
  const at::Tensor a = trans.contiguous();
  const int64_t N = a.size(-1);
  const int64_t rows = N ? a.numel() / N : 0;
  const auto options = a.options().dtype(at::kDouble);
  at::Tensor r = at::empty(a.sizes().slice(0, a.dim() - 1), options);
  at::Tensor f = at::empty(a.sizes(), options);
  at::Tensor ft = transposed ? at::empty(a.sizes(), options) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "normalized", [&] {
    const scalar_t* x = a.data_ptr<scalar_t>();
    double* rp = r.data_ptr<double>();
    double* fp = f.data_ptr<double>();
    for (int64_t i = 0; i < rows; ++i) {
      double m = kNegInf;
      for (int64_t j = 0; j < N; ++j) m = std::max(m, static_cast<double>(x[i * N + j]));
      rp[i] = m;
      const double shift = std::isfinite(m) ? m : 0.0;
      for (int64_t j = 0; j < N; ++j) fp[i * N + j] = std::exp(static_cast<double>(x[i * N + j]) - shift);
    }
    if (transposed) {
      double* tp = ft.data_ptr<double>();
      for (int64_t blk = 0; blk < (N ? rows / N : 0); ++blk)
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < N; ++j) tp[(blk * N + j) * N + i] = fp[(blk * N + i) * N + j];
    }
  });
  return {r, f, ft};
}

at::Tensor gold_or_none(const std::optional<at::Tensor>& labels, const at::Tensor& lengths) {
  return labels.has_value() ? labels->contiguous() : at::empty({0}, lengths.options());
}

// logZ (B,), the factors alpha, p, m the backward reuses, and with labels the CRF loss (B,).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> logz(
    const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const std::optional<at::Tensor>& labels) {
  at::Tensor r, f, ft;
  std::tie(r, f, ft) = normalized(trans, false);
  return logz_forward(unary, trans, r, f, start, end, lengths, gold_or_none(labels, lengths));
}

// Gradients of logZ (with labels: of logZ - score(labels)) for upstream grad (B,) double w.r.t.
// unary, transitions, start and end, in the input dtype (with edges false: unary's alone).
std::vector<at::Tensor> logz_grad(const at::Tensor& grad, const at::Tensor& unary, const at::Tensor& trans,
                                  const at::Tensor& end, const at::Tensor& lengths, const at::Tensor& logz,
                                  const at::Tensor& alpha, const at::Tensor& p, const at::Tensor& m,
                                  const std::optional<at::Tensor>& labels, bool edges) {
  at::Tensor r, f, ft;
  std::tie(r, f, ft) = normalized(trans, true);
  at::Tensor g_unary, g_trans;
  std::tie(g_unary, g_trans) = logz_backward(grad.contiguous(), unary, trans, r, f, ft, end, lengths, logz, alpha,
                                             p, m, gold_or_none(labels, lengths), edges);
  if (!edges) return {g_unary};
  if (trans.dim() == 2) g_trans = g_trans.sum(0);  // per sequence for shared transitions
  const int64_t B = unary.size(0), T = unary.size(1), N = unary.size(2);
  at::Tensor g_start = at::zeros({B, N}, g_unary.options());
  at::Tensor g_end = at::zeros({B, N}, g_unary.options());
  const int64_t* len = lengths.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(g_unary.scalar_type(), "logz_grad", [&] {
    const scalar_t* gu = g_unary.data_ptr<scalar_t>();
    scalar_t* gs = g_start.data_ptr<scalar_t>();
    scalar_t* ge = g_end.data_ptr<scalar_t>();
    for (int64_t b = 0; b < (T ? B : 0); ++b) {
      const int64_t last = std::max<int64_t>(len[b] - 1, 0);
      for (int64_t j = 0; j < N; ++j) {
        gs[b * N + j] = gu[(b * T) * N + j];  // the first position's (zero on empty rows)
        ge[b * N + j] = gu[(b * T + last) * N + j];
      }
    }
  });
  return {g_unary, g_trans.to(unary.scalar_type()), g_start, g_end};
}

}  // namespace structtorch::chain

TORCH_LIBRARY_FRAGMENT(structtorch_chain, m) {
  m.def("viterbi_forward(Tensor unary, Tensor trans, Tensor start, Tensor end, Tensor lengths) -> (Tensor, Tensor)");
  m.def("kbest_forward(Tensor unary, Tensor trans, Tensor start, Tensor end, Tensor lengths, int k) -> (Tensor, Tensor)");
  m.def("fold_forward(Tensor unary, Tensor trans, Tensor start, Tensor end, Tensor lengths, Tensor target, Tensor? costs, Tensor? pair) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("logz_forward(Tensor unary, Tensor trans, Tensor r, Tensor f, Tensor start, Tensor end, Tensor lengths, Tensor labels) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("logz_backward(Tensor grad, Tensor unary, Tensor trans, Tensor r, Tensor f, Tensor ft, Tensor end, Tensor lengths, Tensor logz, Tensor alpha, Tensor p, Tensor m, Tensor labels, bool edges) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(structtorch_chain, CPU, m) {
  m.impl("viterbi_forward", &viterbi_forward);
  m.impl("kbest_forward", &kbest_forward);
  m.impl("fold_forward", &fold_forward);
  m.impl("logz_forward", &logz_forward);
  m.impl("logz_backward", &logz_backward);
}
