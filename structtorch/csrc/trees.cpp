// Trees on the CPU, in double: Eisner's projective DP (log-partition forward, its backward by the
// outside pass, and the Viterbi with backpointers), Chu-Liu-Edmonds for the best non-projective
// tree, the matrix-tree theorem (log-partition and marginals), and CKY over bracketings (the same three), one sentence per task of at::parallel_for.
//
// Conventions (as trees/_torch.py): arcs (B, T + 1, T + 1) float64, arcs[b][h][m] the arc h -> m,
// position 0 the root; lengths (B,) int64 words per sentence (positions 0..L). Charts are (T + 1,
// T + 1) row-major [s][t] per span [s, t]: complete spans headed at t (c0) and at s (c1),
// incomplete ones (i0: t -> s, i1: s -> t) and their shared inner sum j. Spans [0, t] headed at t
// would make the root a modifier: they stay -inf. Rows of L = 0 have value 0.
#include "common.h"

namespace {

using structtorch::Check;
using structtorch::kNegInf;

enum class Mode { kLog, kMax };

constexpr int64_t kChunk = 64;

// The log-sum-exp (kLog) or max (kMax, its first argmax to *arg) over i < n of a[i] + b[i].
template <Mode M>
inline double reduce_pairs(const double* a, const double* b, int64_t n, int32_t* arg) {
  if constexpr (M == Mode::kMax) {
    double best = kNegInf;
    int32_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = a[i] + b[i];
      if (v > best) best = v, at = static_cast<int32_t>(i);
    }
    *arg = at;
    return best;
  } else {
    double v[kChunk];  // the terms, in chunks the compiler keeps in registers or L1
    double best = kNegInf;
    for (int64_t lo = 0; lo < n; lo += kChunk) {
      const int64_t m = std::min(kChunk, n - lo);
      for (int64_t i = 0; i < m; ++i) best = std::max(best, a[lo + i] + b[lo + i]);
    }
    if (best == kNegInf) return kNegInf;
    double sum = 0.0;
    for (int64_t lo = 0; lo < n; lo += kChunk) {
      const int64_t m = std::min(kChunk, n - lo);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) v[i] = a[lo + i] + b[lo + i] - best;
      double part = 0.0;
#pragma omp simd reduction(+ : part)
      for (int64_t i = 0; i < m; ++i) part += structtorch::exp_nonpositive(v[i]);
      sum += part;
    }
    return best + std::log(sum);
  }
}

// One sentence's charts: the five of the file's header at [s][t], transposed copies of c0, c1, i0
// at [t][s] (the inner loops read rows), and the backpointers of the Viterbi (the split's offset).
struct Charts {
  int64_t n;  // T + 1, the stride
  double *c0, *c1, *i0, *i1, *j;
  std::vector<double> c0t, c1t, i0t;
  std::vector<int32_t> bj, b0, b1;

  // Over the five charts at ``out`` (B-major (5, n, n)): cleared to -inf for the inside pass
  // (``fresh``), else read as saved (the outside pass needs no transposes or backpointers).
  Charts(int64_t n, double* out, bool fresh, bool max)
      : n(n), c0(out), c1(out + n * n), i0(out + 2 * n * n), i1(out + 3 * n * n), j(out + 4 * n * n),
        c0t(fresh ? n * n : 0, kNegInf), c1t(fresh ? n * n : 0, kNegInf), i0t(fresh ? n * n : 0, kNegInf),
        bj(max ? n * n : 0), b0(max ? n * n : 0), b1(max ? n * n : 0) {
    if (fresh) std::fill(out, out + 5 * n * n, kNegInf);
  }
};

// The inside pass over positions 0..L; returns the value of the trees (0 for L = 0).
template <Mode M>
double inside(const double* A, int64_t L, bool single_root, Charts& c, int32_t* root_child) {
  const int64_t n = c.n;
  for (int64_t s = 0; s <= L; ++s) {
    c.c1[s * n + s] = c.c1t[s * n + s] = 0.0;
    if (s > 0) c.c0[s * n + s] = c.c0t[s * n + s] = 0.0;
  }
  int32_t dummy = 0;
  for (int64_t w = 1; w <= L; ++w) {
    for (int64_t s = 0; s + w <= L; ++s) {
      const int64_t t = s + w, st = s * n + t, ts = t * n + s;
      int32_t* bj = M == Mode::kMax ? &c.bj[st] : &dummy;
      const double joined = reduce_pairs<M>(c.c1 + st - w, c.c0t.data() + ts + 1, w, bj);
      c.j[st] = joined;
      c.i1[st] = joined + A[s * n + t];
      if (s > 0) c.i0[st] = c.i0t[ts] = joined + A[t * n + s];
      if (s > 0)
        c.c0[st] = c.c0t[ts] = reduce_pairs<M>(c.c0 + st - w, c.i0t.data() + ts, w,
                                               M == Mode::kMax ? &c.b0[st] : &dummy);
      c.c1[st] = c.c1t[ts] = reduce_pairs<M>(c.i1 + st - w + 1, c.c1t.data() + ts + 1, w,
                                             M == Mode::kMax ? &c.b1[st] : &dummy);
    }
  }
  if (L == 0) return 0.0;
  if (!single_root) return c.c1[L];  // [0, L] headed by the root
  // the root's one child r: arcs[0][r] + complete [1, r] headed at r + complete [r, L] headed at r
  std::vector<double> left(L), right(L);
  for (int64_t r = 1; r <= L; ++r) left[r - 1] = A[r] + c.c0[n + r], right[r - 1] = c.c1[r * n + L];
  int32_t arg = 0;
  const double value = reduce_pairs<M>(left.data(), right.data(), L, &arg);
  *root_child = arg + 1;
  return value;
}

// The heads of the Viterbi tree from the backpointers (heads (T + 1), -1 at the root).
void backtrack(const Charts& c, int64_t L, bool single_root, int32_t root_child, int64_t* heads) {
  const int64_t n = c.n;
  enum Kind { kC0, kC1, kI0, kI1 };
  std::vector<std::tuple<Kind, int64_t, int64_t>> stack;
  if (!single_root) {
    stack.emplace_back(kC1, 0, L);
  } else {
    heads[root_child] = 0;
    stack.emplace_back(kC0, 1, root_child);
    stack.emplace_back(kC1, root_child, L);
  }
  while (!stack.empty()) {
    const auto [kind, s, t] = stack.back();
    stack.pop_back();
    if (s == t) continue;
    const int64_t st = s * n + t;
    if (kind == kC0) {
      const int64_t r = s + c.b0[st];
      stack.emplace_back(kC0, s, r);
      stack.emplace_back(kI0, r, t);
    } else if (kind == kC1) {
      const int64_t r = s + 1 + c.b1[st];
      stack.emplace_back(kI1, s, r);
      stack.emplace_back(kC1, r, t);
    } else {
      heads[kind == kI0 ? s : t] = kind == kI0 ? t : s;
      const int64_t r = s + c.bj[st];
      stack.emplace_back(kC1, s, r);
      stack.emplace_back(kC0, r + 1, t);
    }
  }
}

// exp(x) for x <= 0 up to rounding (a child's share of its parent's sum).
inline double share(double x) { return structtorch::exp_nonpositive(std::min(x, 0.0)); }

// A parent's gradient x spread over its terms a[i] + b[i], i < n (its value ``parent`` their
// log-sum-exp): p = x * exp(a[i] + b[i] - parent) added to both parts' gradients ga[i] and gb[i].
inline void spread(const double* a, const double* b, int64_t n, double parent, double x, double* __restrict ga,
                   double* __restrict gb) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const double p = x * share(a[i] + b[i] - parent);
    ga[i] += p;
    gb[i] += p;
  }
}

// The transpose of a (n, n) chart.
std::vector<double> transposed(const double* x, int64_t n) {
  std::vector<double> out(n * n);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t t = 0; t < n; ++t) out[t * n + s] = x[s * n + t];
  return out;
}

// The outside pass: adds to grad (T + 1, T + 1) g times the arc marginals of the inside charts.
// Each chart's gradient is kept in two parts, by row [s][t] and transposed [t][s], so that every
// rule reads and writes contiguous rows (vectorized); an item's gradient is their sum.
void outside(const double* A, int64_t L, bool single_root, const Charts& c, double Z, double g, double* grad) {
  const int64_t n = c.n;
  const std::vector<double> c0t = transposed(c.c0, n), c1t = transposed(c.c1, n), i0t = transposed(c.i0, n);
  std::vector<double> g0(n * n, 0.0), g0t(n * n, 0.0), g1(n * n, 0.0), g1t(n * n, 0.0), h1(n * n, 0.0),
      h0t(n * n, 0.0);
  if (!single_root) {
    g1[L] = g;
  } else {
    for (int64_t r = 1; r <= L; ++r) {
      const double p = g * share(A[r] + c.c0[n + r] + c.c1[r * n + L] - Z);
      grad[r] += p, g0[n + r] += p, g1[r * n + L] += p;
    }
  }
  for (int64_t w = L; w >= 1; --w) {
    for (int64_t s = 0; s + w <= L; ++s) {
      const int64_t t = s + w, st = s * n + t, ts = t * n + s;
      double x = g1[st] + g1t[ts];  // c1[s][t]: i1[s][r] + c1[r][t], r = s+1..t
      if (x != 0.0) spread(c.i1 + st - w + 1, c1t.data() + ts + 1, w, c.c1[st], x, h1.data() + st - w + 1,
                           g1t.data() + ts + 1);
      x = g0[st] + g0t[ts];  // c0[s][t]: c0[s][r] + i0[r][t], r = s..t-1
      if (x != 0.0) spread(c.c0 + st - w, i0t.data() + ts, w, c.c0[st], x, g0.data() + st - w, h0t.data() + ts);
      grad[ts] += h0t[ts];  // i0[s][t] = j[s][t] + arcs[t][s], i1[s][t] = j[s][t] + arcs[s][t]
      grad[st] += h1[st];
      x = h0t[ts] + h1[st];  // j[s][t]: c1[s][r] + c0[r + 1][t], r = s..t-1
      if (x != 0.0) spread(c.c1 + st - w, c0t.data() + ts + 1, w, c.j[st], x, g1.data() + st - w,
                           g0t.data() + ts + 1);
    }
  }
}

// The saved state of a backward: grad and logz (B,) and the charts of the given shape.
void check_saved(const Check& check, const at::Tensor& grad, const at::Tensor& logz, const at::Tensor& charts,
                 at::IntArrayRef shape) {
  check.tensor(grad, "grad", at::kDouble, {shape[0]});
  check.tensor(logz, "logz", at::kDouble, {shape[0]});
  check.tensor(charts, "charts", at::kDouble, shape);
}

// (B, n) of a float64 (B, n, n) tensor ``name`` whose rows have lengths in [0, n - offset].
std::tuple<int64_t, int64_t> check_square(const Check& check, const at::Tensor& x, const char* name,
                                          const at::Tensor& lengths, int64_t offset) {
  TORCH_CHECK(x.dim() == 3, check.op, ": ", name, " must have shape (B, n, n), got ", x.sizes());
  const int64_t B = x.size(0), n = x.size(1);
  check.tensor(x, name, at::kDouble, {B, n, n});
  check.lengths(lengths, B, n - offset);
  return {B, n};
}

// Arc scores (B, T + 1, T + 1) with lengths in [0, T]: (B, T + 1).
std::tuple<int64_t, int64_t> check_arcs(const Check& check, const at::Tensor& arcs, const at::Tensor& lengths) {
  return check_square(check, arcs, "arcs", lengths, 1);
}

// logZ (B,) and the charts (B, 5, T + 1, T + 1) the backward reads.
std::tuple<at::Tensor, at::Tensor> eisner_logz_forward(const at::Tensor& arcs, const at::Tensor& lengths,
                                                       bool single_root) {
  const auto [B, n] = check_arcs(Check{"eisner_logz_forward"}, arcs, lengths);
  auto logz = at::zeros({B}, arcs.options());
  auto charts = at::empty({B, 5, n, n}, arcs.options());
  const double* A = arcs.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  double *out = charts.data_ptr<double>(), *z = logz.data_ptr<double>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      Charts c(n, out + b * 5 * n * n, true, false);
      int32_t child = 0;
      z[b] = inside<Mode::kLog>(A + b * n * n, len[b], single_root, c, &child);
    }
  });
  return {logz, charts};
}

// grad (B,) times the arc marginals: (B, T + 1, T + 1); zero on rows of logZ = -inf.
at::Tensor eisner_logz_backward(const at::Tensor& grad, const at::Tensor& arcs, const at::Tensor& lengths,
                                bool single_root, const at::Tensor& logz, const at::Tensor& charts) {
  const Check check{"eisner_logz_backward"};
  const auto [B, n] = check_arcs(check, arcs, lengths);
  check_saved(check, grad, logz, charts, {B, 5, n, n});
  auto out = at::zeros_like(arcs);
  const double *A = arcs.data_ptr<double>(), *g = grad.data_ptr<double>(), *z = logz.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  double* ch = charts.data_ptr<double>();
  double* o = out.data_ptr<double>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      if (len[b] == 0 || g[b] == 0.0 || !(z[b] > kNegInf)) continue;
      const Charts c(n, ch + b * 5 * n * n, false, false);  // the saved charts
      outside(A + b * n * n, len[b], single_root, c, z[b], g[b], o + b * n * n);
    }
  });
  return out;
}

// The best projective tree: score (B,) and heads (B, T + 1) (-1 at the root, beyond each length
// and on rows without a tree).
std::tuple<at::Tensor, at::Tensor> eisner_viterbi_forward(const at::Tensor& arcs, const at::Tensor& lengths,
                                                          bool single_root) {
  const auto [B, n] = check_arcs(Check{"eisner_viterbi_forward"}, arcs, lengths);
  auto best = at::zeros({B}, arcs.options());
  auto heads = at::full({B, n}, -1, lengths.options());
  const double* A = arcs.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  double* v = best.data_ptr<double>();
  int64_t* h = heads.data_ptr<int64_t>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> scratch(5 * n * n);
    for (int64_t b = lo; b < hi; ++b) {
      Charts c(n, scratch.data(), true, true);
      int32_t child = 0;
      v[b] = inside<Mode::kMax>(A + b * n * n, len[b], single_root, c, &child);
      if (len[b] > 0 && v[b] > kNegInf) backtrack(c, len[b], single_root, child, h + b * n);
    }
  });
  return {best, heads};
}

// Chu-Liu-Edmonds on a dense graph of m nodes (node 0 the root) whose arc weights (p, s), [h * m + v],
// compare lexicographically; returns the heads (m) of the best arborescence, empty if none spans.
struct Graph {
  int64_t m;
  std::vector<double> p, s;
  std::vector<char> present;
};

inline bool better(double p1, double s1, double p2, double s2) { return p1 > p2 || (p1 == p2 && s1 > s2); }

std::vector<int64_t> chu_liu_edmonds(const Graph& g) {
  const int64_t m = g.m;
  std::vector<int64_t> heads(m, -1);
  for (int64_t v = 1; v < m; ++v) {
    for (int64_t u = 0; u < m; ++u) {
      const int64_t e = u * m + v;
      if (u != v && g.present[e] &&
          (heads[v] < 0 || better(g.p[e], g.s[e], g.p[heads[v] * m + v], g.s[heads[v] * m + v])))
        heads[v] = u;
    }
    if (heads[v] < 0) return {};
  }
  // a cycle of the greedy heads, if any
  std::vector<int8_t> state(m, 0);
  std::vector<int64_t> cycle;
  for (int64_t start = 1; start < m && cycle.empty(); ++start) {
    std::vector<int64_t> walk;
    int64_t x = start;
    while (x > 0 && state[x] == 0) state[x] = 1, walk.push_back(x), x = heads[x];
    if (x > 0 && state[x] == 1) cycle.assign(std::find(walk.begin(), walk.end(), x), walk.end());
    for (int64_t y : walk) state[y] = 2;
  }
  if (cycle.empty()) return heads;
  std::vector<char> in_cycle(m, 0);
  for (int64_t v : cycle) in_cycle[v] = 1;
  std::vector<int64_t> rest;  // the nodes outside the cycle, the root first; the cycle becomes node k
  for (int64_t v = 0; v < m; ++v)
    if (!in_cycle[v]) rest.push_back(v);
  const int64_t k = static_cast<int64_t>(rest.size()), m2 = k + 1;
  Graph h{m2, std::vector<double>(m2 * m2, 0.0), std::vector<double>(m2 * m2, 0.0), std::vector<char>(m2 * m2, 0)};
  std::vector<int64_t> enter(k, -1), leave(k, -1);  // the cycle node an arc u -> cycle enters, v <- cycle leaves
  for (int64_t a = 0; a < k; ++a) {
    const int64_t u = rest[a];
    for (int64_t b = 0; b < k; ++b) {
      const int64_t e = u * m + rest[b], f = a * m2 + b;
      h.p[f] = g.p[e], h.s[f] = g.s[e], h.present[f] = g.present[e] && a != b;
    }
    for (int64_t v : cycle) {  // entering at v replaces v's cycle arc
      const int64_t e = u * m + v, c = heads[v] * m + v;
      if (!g.present[e]) continue;
      const double p = g.p[e] - g.p[c], s = g.s[e] - g.s[c];
      const int64_t f = a * m2 + k;
      if (!h.present[f] || better(p, s, h.p[f], h.s[f])) h.p[f] = p, h.s[f] = s, h.present[f] = 1, enter[a] = v;
    }
    for (int64_t v : cycle) {  // leaving from v to u
      const int64_t e = v * m + u, f = k * m2 + a;
      if (!g.present[e] || a == 0) continue;
      if (!h.present[f] || better(g.p[e], g.s[e], h.p[f], h.s[f]))
        h.p[f] = g.p[e], h.s[f] = g.s[e], h.present[f] = 1, leave[a] = v;
    }
  }
  const std::vector<int64_t> sub = chu_liu_edmonds(h);
  if (sub.empty()) return {};
  std::vector<int64_t> out = heads;
  for (int64_t a = 1; a < k; ++a) out[rest[a]] = sub[a] == k ? leave[a] : rest[sub[a]];
  const int64_t from = sub[k];  // the arc into the cycle breaks the cycle arc into its node
  out[enter[from]] = rest[from];
  return out;
}

// The best non-projective trees: heads (B, T + 1), -1 at the root, beyond each length and on rows
// without a tree; with single_root, the fewest root children first (exact for one child).
at::Tensor tree_mst_forward(const at::Tensor& arcs, const at::Tensor& lengths, bool single_root) {
  const auto [B, n] = check_arcs(Check{"tree_mst_forward"}, arcs, lengths);
  auto heads = at::full({B, n}, -1, lengths.options());
  const double* A = arcs.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  int64_t* out = heads.data_ptr<int64_t>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t m = len[b] + 1;
      if (m == 1) continue;
      Graph g{m, std::vector<double>(m * m, 0.0), std::vector<double>(m * m), std::vector<char>(m * m, 0)};
      for (int64_t u = 0; u < m; ++u)
        for (int64_t v = 1; v < m; ++v) {
          const double a = A[b * n * n + u * n + v];
          g.present[u * m + v] = u != v && a > kNegInf;
          g.s[u * m + v] = a;
          g.p[u * m + v] = single_root && u == 0 ? -1.0 : 0.0;
        }
      const std::vector<int64_t> heads_b = chu_liu_edmonds(g);
      if (heads_b.empty()) continue;
      if (single_root && std::count(heads_b.begin() + 1, heads_b.end(), 0) != 1) continue;
      for (int64_t v = 1; v < m; ++v) out[b * n + v] = heads_b[v];
    }
  });
  return heads;
}

// CKY over bracketings of words 0..L-1 with span values x (T, T) [i][j] (the labels already
// summed or maximized in Python): inside[i][j] = x[i][j] + inner[i][j], inner[i][j] = the
// reduction over k = i..j-1 of inside[i][k] + inside[k + 1][j] (0 for single words). The charts
// (2, T, T) are inside and inner; a transposed inside serves the column reads. Returns the value
// of the trees (0 for L = 0); with kMax the split offsets go to bp (T, T).
template <Mode M>
double cky_inside(const double* x, int64_t L, int64_t n, double* in, double* inner, int32_t* bp) {
  std::fill(in, in + n * n, kNegInf);
  std::fill(inner, inner + n * n, kNegInf);
  if (L == 0) return 0.0;
  std::vector<double> tr(n * n, kNegInf);  // tr[j][i] = in[i][j]
  for (int64_t i = 0; i < L; ++i) inner[i * n + i] = 0.0, in[i * n + i] = tr[i * n + i] = x[i * n + i];
  int32_t dummy = 0;
  for (int64_t w = 1; w < L; ++w) {
    for (int64_t i = 0; i + w < L; ++i) {
      const int64_t j = i + w, ij = i * n + j;
      inner[ij] = reduce_pairs<M>(in + ij - w, tr.data() + j * n + i + 1, w, M == Mode::kMax ? bp + ij : &dummy);
      in[ij] = tr[j * n + i] = inner[ij] + x[ij];
    }
  }
  return in[L - 1];
}

std::tuple<int64_t, int64_t> check_spans(const Check& check, const at::Tensor& spans, const at::Tensor& lengths) {
  return check_square(check, spans, "spans", lengths, 0);
}

// logZ (B,) and the charts (B, 2, T, T) the backward reads.
std::tuple<at::Tensor, at::Tensor> cky_logz_forward(const at::Tensor& spans, const at::Tensor& lengths) {
  const auto [B, n] = check_spans(Check{"cky_logz_forward"}, spans, lengths);
  auto logz = at::zeros({B}, spans.options());
  auto charts = at::empty({B, 2, n, n}, spans.options());
  const double* x = spans.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  double *ch = charts.data_ptr<double>(), *z = logz.data_ptr<double>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b)
      z[b] = cky_inside<Mode::kLog>(x + b * n * n, len[b], n, ch + b * 2 * n * n, ch + (2 * b + 1) * n * n, nullptr);
  });
  return {logz, charts};
}

// grad (B,) times the span marginals of the bracketing (B, T, T); zero on rows of logZ = -inf.
at::Tensor cky_logz_backward(const at::Tensor& grad, const at::Tensor& spans, const at::Tensor& lengths,
                             const at::Tensor& logz, const at::Tensor& charts) {
  const Check check{"cky_logz_backward"};
  const auto [B, n] = check_spans(check, spans, lengths);
  check_saved(check, grad, logz, charts, {B, 2, n, n});
  auto out = at::zeros_like(spans);
  const double *g = grad.data_ptr<double>(), *z = logz.data_ptr<double>(), *ch = charts.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  double* o = out.data_ptr<double>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t L = len[b];
      if (L == 0 || g[b] == 0.0 || !(z[b] > kNegInf)) continue;
      const double *in = ch + b * 2 * n * n, *inner = in + n * n;
      double* go = o + b * n * n;  // d value / d inside = d value / d x
      const std::vector<double> tr = transposed(in, n);
      std::vector<double> gt(n * n, 0.0);  // the gradient's transposed part (see outside)
      go[L - 1] = g[b];
      for (int64_t w = L - 1; w >= 1; --w) {
        for (int64_t i = 0; i + w < L; ++i) {
          const int64_t j = i + w, ij = i * n + j, ji = j * n + i;
          const double v = go[ij] += gt[ji];  // final: wider spans are done
          gt[ji] = 0.0;
          if (v != 0.0) spread(in + ij - w, tr.data() + ji + 1, w, inner[ij], v, go + ij - w, gt.data() + ji + 1);
        }
      }
      for (int64_t i = 0; i < L; ++i) go[i * n + i] += gt[i * n + i];
    }
  });
  return out;
}

// The best bracketing: score (B,) and its spans (B, T, T) 0/1 (all 0 without words or a tree).
std::tuple<at::Tensor, at::Tensor> cky_viterbi_forward(const at::Tensor& spans, const at::Tensor& lengths) {
  const auto [B, n] = check_spans(Check{"cky_viterbi_forward"}, spans, lengths);
  auto best = at::zeros({B}, spans.options());
  auto chosen = at::zeros_like(spans);
  const double* x = spans.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  double *v = best.data_ptr<double>(), *c = chosen.data_ptr<double>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> in(n * n), inner(n * n);
    std::vector<int32_t> bp(n * n, 0);
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t L = len[b];
      v[b] = cky_inside<Mode::kMax>(x + b * n * n, L, n, in.data(), inner.data(), bp.data());
      if (L == 0 || !(v[b] > kNegInf)) continue;
      std::vector<std::pair<int64_t, int64_t>> stack{{0, L - 1}};
      while (!stack.empty()) {
        const auto [i, j] = stack.back();
        stack.pop_back();
        c[b * n * n + i * n + j] = 1.0;
        if (i == j) continue;
        const int64_t k = i + bp[i * n + j];
        stack.emplace_back(i, k);
        stack.emplace_back(k + 1, j);
      }
    }
  });
  return {best, chosen};
}

// The matrix-tree theorem (Koo et al. 2007): logZ of the non-projective trees of words 1..L is
// the log-determinant of the Laplacian M (L, L) of the weights W[h][m] = exp(arcs[h][m] - c[m])
// (c[m] the best head score of word m, added back): M[m][m] = the sum of W into m (over the words
// only with single_root, whose first row is then W[0][.]), M[h][m] = -W[h][m]. Its inverse, by
// Gauss-Jordan elimination with partial pivoting, gives the marginals in the backward. A sentence
// where some word cannot be reached from the root (from one child of it, with single_root) over
// finite arcs has logZ = -inf; L = 0 has 0.

// Whether every word 1..L is reachable from ``from`` over the arcs ``ok`` (n1 x n1, [h][m]).
bool reaches_all(const std::vector<char>& ok, int64_t n1, int64_t L, int64_t from, bool skip_root) {
  std::vector<char> seen(L + 1, 0);
  std::vector<int64_t> stack{from};
  seen[from] = 1;
  int64_t count = from > 0;
  while (!stack.empty()) {
    const int64_t h = stack.back();
    stack.pop_back();
    for (int64_t m = 1; m <= L; ++m)
      if (!seen[m] && ok[h * n1 + m] && !(skip_root && h == 0)) seen[m] = 1, ++count, stack.push_back(m);
  }
  return count == L;
}

// log|det M| and M^-1 (into inv, rows of ``stride``) by in-place Gauss-Jordan elimination with
// partial pivoting (n^3 multiply-adds); -inf if a pivot is 0.
double invert(std::vector<double>& M, int64_t L, double* inv, int64_t stride) {
  std::vector<int64_t> swapped(L);
  double logdet = 0.0;
  for (int64_t k = 0; k < L; ++k) {
    int64_t p = k;
    for (int64_t i = k + 1; i < L; ++i)
      if (std::abs(M[i * L + k]) > std::abs(M[p * L + k])) p = i;
    swapped[k] = p;
    if (p != k) std::swap_ranges(M.begin() + p * L, M.begin() + (p + 1) * L, M.begin() + k * L);
    double* mk = M.data() + k * L;
    const double pivot = mk[k];
    if (pivot == 0.0) return kNegInf;
    logdet += std::log(std::abs(pivot));
    const double scale = 1.0 / pivot;
    mk[k] = 1.0;
#pragma omp simd
    for (int64_t j = 0; j < L; ++j) mk[j] *= scale;
    for (int64_t i = 0; i < L; ++i) {
      double* mi = M.data() + i * L;
      const double f = mi[k];
      if (i == k || f == 0.0) continue;
      mi[k] = 0.0;
#pragma omp simd
      for (int64_t j = 0; j < L; ++j) mi[j] -= f * mk[j];
    }
  }
  for (int64_t k = L - 1; k >= 0; --k)  // the row swaps undone as column swaps
    if (swapped[k] != k)
      for (int64_t i = 0; i < L; ++i) std::swap(M[i * L + k], M[i * L + swapped[k]]);
  for (int64_t i = 0; i < L; ++i) std::copy(M.begin() + i * L, M.begin() + (i + 1) * L, inv + i * stride);
  return logdet;
}

// logZ (B,), the scaled weights W (B, T + 1, T + 1) and the inverse Laplacians (B, T, T) (identity
// beyond each length and on rows of logZ = -inf).
std::tuple<at::Tensor, at::Tensor, at::Tensor> matrix_tree_forward(const at::Tensor& arcs, const at::Tensor& lengths,
                                                                   bool single_root) {
  const auto [B, n1] = check_arcs(Check{"matrix_tree_forward"}, arcs, lengths);
  const int64_t n = n1 - 1;
  auto logz = at::zeros({B}, arcs.options());
  auto weights = at::zeros_like(arcs);
  auto inverse = at::eye(n, arcs.options()).repeat({B, 1, 1});
  const double* A = arcs.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  double *z = logz.data_ptr<double>(), *W = weights.data_ptr<double>(), *inv = inverse.data_ptr<double>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t L = len[b];
      if (L == 0) continue;
      const double* a = A + b * n1 * n1;
      double* w = W + b * n1 * n1;
      std::vector<char> ok(n1 * n1, 0);
      std::vector<double> c(L + 1, kNegInf);
      for (int64_t h = 0; h <= L; ++h)
        for (int64_t m = 1; m <= L; ++m)
          if (h != m && a[h * n1 + m] > kNegInf) ok[h * n1 + m] = 1, c[m] = std::max(c[m], a[h * n1 + m]);
      bool feasible = true;
      if (!single_root) {
        feasible = reaches_all(ok, n1, L, 0, false);
      } else {
        feasible = false;
        for (int64_t r = 1; r <= L && !feasible; ++r) feasible = ok[r] && reaches_all(ok, n1, L, r, true);
      }
      if (!feasible) {
        z[b] = kNegInf;
        continue;
      }
      double shift = 0.0;
      for (int64_t m = 1; m <= L; ++m) shift += c[m];
      for (int64_t h = 0; h <= L; ++h)
        for (int64_t m = 1; m <= L; ++m)
          if (ok[h * n1 + m]) w[h * n1 + m] = std::exp(a[h * n1 + m] - c[m]);
      std::vector<double> M(L * L, 0.0);  // words 1..L as 0..L-1
      for (int64_t m = 1; m <= L; ++m) {
        double into = 0.0;
        for (int64_t h = single_root ? 1 : 0; h <= L; ++h) into += w[h * n1 + m];
        M[(m - 1) * L + m - 1] = into;
        for (int64_t h = 1; h <= L; ++h)
          if (h != m) M[(h - 1) * L + m - 1] = -w[h * n1 + m];
      }
      if (single_root)
        for (int64_t m = 1; m <= L; ++m) M[m - 1] = w[m];
      const double logdet = invert(M, L, inv + b * n * n, n);
      z[b] = logdet == kNegInf ? kNegInf : logdet + shift;
      if (logdet == kNegInf)  // a pivot underflowed: no marginals
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < L; ++j) inv[b * n * n + i * n + j] = i == j;
    }
  });
  return {logz, weights, inverse};
}

// grad (B,) times the arc marginals (B, T + 1, T + 1): W[h][m] times the derivative of log det M
// by M's entries that W[h][m] enters (Koo et al. 2007, for both root rules); zero on rows of
// logZ = -inf.
at::Tensor matrix_tree_backward(const at::Tensor& grad, const at::Tensor& lengths, bool single_root,
                                const at::Tensor& logz, const at::Tensor& weights, const at::Tensor& inverse) {
  const Check check{"matrix_tree_backward"};
  const auto [B, n1] = check_arcs(check, weights, lengths);
  const int64_t n = n1 - 1;
  check.tensor(grad, "grad", at::kDouble, {B});
  check.tensor(logz, "logz", at::kDouble, {B});
  check.tensor(inverse, "inverse", at::kDouble, {B, n, n});
  auto out = at::zeros_like(weights);
  const double *g = grad.data_ptr<double>(), *z = logz.data_ptr<double>(), *W = weights.data_ptr<double>(),
               *inv = inverse.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  double* o = out.data_ptr<double>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t L = len[b];
      if (L == 0 || g[b] == 0.0 || !(z[b] > kNegInf)) continue;
      const double *w = W + b * n1 * n1, *x = inv + b * n * n;  // x[i][j] = (M^-1)[i][j]
      for (int64_t m = 1; m <= L; ++m) {
        const double* xm = x + (m - 1) * n;  // row m - 1 of M^-1 = column m - 1 of M^-T
        for (int64_t h = 0; h <= L; ++h) {
          const double wt = w[h * n1 + m];
          if (wt == 0.0) continue;
          double d;
          if (h == 0)
            d = single_root ? xm[0] : xm[m - 1];
          else
            d = (single_root && m == 1 ? 0.0 : xm[m - 1]) - (single_root && h == 1 ? 0.0 : xm[h - 1]);
          o[b * n1 * n1 + h * n1 + m] = g[b] * wt * d;
        }
      }
    }
  });
  return out;
}

// Eisner's DP over a count dimension (Bauer et al. 2014's Hamming table, for slack rescaling): the
// best score of the trees whose integer costs (cost[b][h][m] per arc) add up to exactly k. A span
// [s, t] holds t - s arcs, so with costs of 0 or 1 its counts run over 0..t-s: each item keeps
// t - s + 1 values (costs above 1 are clamped into that range by the caller's check). With
// backpointers (the split r and the left part's count) the heads of the best tree of a given
// count are read back.
struct CountCharts {
  int64_t n;
  std::vector<int64_t> off;  // off[s * n + t]: the item [s, t]'s first value
  std::vector<double> c0, c1, i0, i1, j;
  std::vector<int32_t> r0, r1, rj, k0, k1, kj;  // backpointers: split and left count

  CountCharts(int64_t n, bool back) : n(n), off(n * n + 1, 0) {
    int64_t total = 0;
    for (int64_t s = 0; s < n; ++s)
      for (int64_t t = 0; t < n; ++t) off[s * n + t] = total, total += t >= s ? t - s + 1 : 0;
    for (auto* v : {&c0, &c1, &i0, &i1, &j}) v->assign(total, kNegInf);
    if (back)
      for (auto* v : {&r0, &r1, &rj, &k0, &k1, &kj}) v->assign(total, 0);
  }
  int64_t at(int64_t s, int64_t t) const { return off[s * n + t]; }
};

// out[k] = max over k1 + k2 = k (k1 <= wa, k2 <= wb) of a[k1] + b[k2], keeping the split's r
// and k1 where it improves on out.
inline void convolve_into(const double* a, int64_t wa, const double* b, int64_t wb, double* out, int32_t r,
                          int32_t* rs, int32_t* ks, bool back) {
  for (int64_t k1 = 0; k1 <= wa; ++k1) {
    const double x = a[k1];
    if (x == kNegInf) continue;
    for (int64_t k2 = 0; k2 <= wb; ++k2) {
      const double v = x + b[k2];
      if (v > out[k1 + k2]) {
        out[k1 + k2] = v;
        if (back) rs[k1 + k2] = r, ks[k1 + k2] = static_cast<int32_t>(k1);
      }
    }
  }
}

// The count tables of one sentence; table[k] for k = 0..L (the caller's row, pre-filled -inf).
void count_inside(const double* A, const int64_t* cost, int64_t L, bool single_root, CountCharts& c,
                  double* table, int32_t* root_r, int32_t* root_k, bool back) {
  const int64_t n = c.n;
  for (int64_t s = 0; s <= L; ++s) {
    c.c1[c.at(s, s)] = 0.0;
    if (s > 0) c.c0[c.at(s, s)] = 0.0;
  }
  for (int64_t w = 1; w <= L; ++w) {
    for (int64_t s = 0; s + w <= L; ++s) {
      const int64_t t = s + w, st = c.at(s, t);
      int32_t *rs = back ? c.rj.data() + st : nullptr, *ks = back ? c.kj.data() + st : nullptr;
      for (int64_t r = s; r < t; ++r)
        convolve_into(c.c1.data() + c.at(s, r), r - s, c.c0.data() + c.at(r + 1, t), t - r - 1, c.j.data() + st,
                      static_cast<int32_t>(r), rs, ks, back);
      for (int d = 0; d < 2; ++d) {  // i0: t -> s (not from the root's side), i1: s -> t
        if (d == 0 && s == 0) continue;
        const int64_t h = d == 0 ? t : s, m = d == 0 ? s : t, arc = h * n + m, shift = cost[arc];
        double* inc = (d == 0 ? c.i0 : c.i1).data() + st;
        for (int64_t k = 0; k + shift <= w && k <= w - 1; ++k)
          if (c.j[st + k] > kNegInf) inc[k + shift] = c.j[st + k] + A[arc];
      }
      if (s > 0) {
        rs = back ? c.r0.data() + st : nullptr, ks = back ? c.k0.data() + st : nullptr;
        for (int64_t r = s; r < t; ++r)
          convolve_into(c.c0.data() + c.at(s, r), r - s, c.i0.data() + c.at(r, t), t - r, c.c0.data() + st,
                        static_cast<int32_t>(r), rs, ks, back);
      }
      rs = back ? c.r1.data() + st : nullptr, ks = back ? c.k1.data() + st : nullptr;
      for (int64_t r = s + 1; r <= t; ++r)
        convolve_into(c.i1.data() + c.at(s, r), r - s, c.c1.data() + c.at(r, t), t - r, c.c1.data() + st,
                      static_cast<int32_t>(r), rs, ks, back);
    }
  }
  if (L == 0) {
    table[0] = 0.0;
    return;
  }
  if (!single_root) {
    std::copy(c.c1.begin() + c.at(0, L), c.c1.begin() + c.at(0, L) + L + 1, table);
    return;
  }
  std::vector<double> left(L + 1);
  for (int64_t r = 1; r <= L; ++r) {  // arcs[0][r] + complete [1, r] at r + complete [r, L] at r
    const int64_t shift = cost[r];
    std::fill(left.begin(), left.end(), kNegInf);
    for (int64_t k = 0; k <= r - 1; ++k)
      if (c.c0[c.at(1, r) + k] > kNegInf) left[k + shift] = c.c0[c.at(1, r) + k] + A[r];
    convolve_into(left.data(), r - 1 + shift, c.c1.data() + c.at(r, L), L - r, table, static_cast<int32_t>(r),
                  root_r, root_k, back);
  }
}

// The heads of the best tree of count k from the count charts' backpointers.
void count_backtrack(const CountCharts& c, const int64_t* cost, int64_t L, bool single_root, int32_t root_r,
                     int32_t root_k, int64_t k, int64_t* heads) {
  const int64_t n = c.n;
  enum Kind { kC0, kC1, kI0, kI1 };
  std::vector<std::tuple<Kind, int64_t, int64_t, int64_t>> stack;
  if (!single_root) {
    stack.emplace_back(kC1, 0, L, k);
  } else {
    heads[root_r] = 0;
    stack.emplace_back(kC0, 1, root_r, root_k - cost[root_r]);
    stack.emplace_back(kC1, root_r, L, k - root_k);
  }
  while (!stack.empty()) {
    const auto [kind, s, t, kk] = stack.back();
    stack.pop_back();
    if (s == t) continue;
    const int64_t at = c.at(s, t) + kk;
    if (kind == kC0) {
      stack.emplace_back(kC0, s, c.r0[at], c.k0[at]);
      stack.emplace_back(kI0, c.r0[at], t, kk - c.k0[at]);
    } else if (kind == kC1) {
      stack.emplace_back(kI1, s, c.r1[at], c.k1[at]);
      stack.emplace_back(kC1, c.r1[at], t, kk - c.k1[at]);
    } else {
      const int64_t h = kind == kI0 ? t : s, m = kind == kI0 ? s : t;
      heads[m] = h;
      const int64_t kj = kk - cost[h * n + m], js = c.at(s, t) + kj;
      stack.emplace_back(kC1, s, c.rj[js], c.kj[js]);
      stack.emplace_back(kC0, c.rj[js] + 1, t, kj - c.kj[js]);
    }
  }
}

void check_costs(const Check& check, const at::Tensor& cost, const at::Tensor& lengths, int64_t B, int64_t n) {
  check.tensor(cost, "cost", at::kLong, {B, n, n});
  const int64_t *x = cost.data_ptr<int64_t>(), *len = lengths.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h <= len[b]; ++h)
      for (int64_t m = 1; m <= len[b]; ++m)
        TORCH_CHECK(x[(b * n + h) * n + m] == 0 || x[(b * n + h) * n + m] == 1, check.op, ": cost[", b, ", ", h,
                    ", ", m, "] must be 0 or 1");
}

// The count tables (B, T + 1): the best score of the projective trees of count exactly k.
at::Tensor eisner_count_forward(const at::Tensor& arcs, const at::Tensor& cost, const at::Tensor& lengths,
                                bool single_root) {
  const Check check{"eisner_count_forward"};
  const auto [B, n] = check_arcs(check, arcs, lengths);
  check_costs(check, cost, lengths, B, n);
  auto table = at::full({B, n}, kNegInf, arcs.options());
  const double* A = arcs.data_ptr<double>();
  const int64_t *C = cost.data_ptr<int64_t>(), *len = lengths.data_ptr<int64_t>();
  double* out = table.data_ptr<double>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      CountCharts c(n, false);
      count_inside(A + b * n * n, C + b * n * n, len[b], single_root, c, out + b * n, nullptr, nullptr, false);
    }
  });
  return table;
}

// The heads (B, T + 1) of the best projective tree of count k[b] (-1 where none has that count).
at::Tensor eisner_count_heads(const at::Tensor& arcs, const at::Tensor& cost, const at::Tensor& lengths,
                              bool single_root, const at::Tensor& k) {
  const Check check{"eisner_count_heads"};
  const auto [B, n] = check_arcs(check, arcs, lengths);
  check_costs(check, cost, lengths, B, n);
  check.tensor(k, "k", at::kLong, {B});
  auto heads = at::full({B, n}, -1, lengths.options());
  const double* A = arcs.data_ptr<double>();
  const int64_t *C = cost.data_ptr<int64_t>(), *len = lengths.data_ptr<int64_t>(), *kk = k.data_ptr<int64_t>();
  int64_t* h = heads.data_ptr<int64_t>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> table(n);
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t L = len[b];
      if (L == 0 || kk[b] < 0 || kk[b] > L) continue;
      CountCharts c(n, true);
      std::vector<int32_t> root_r(n, 0), root_k(n, 0);
      std::fill(table.begin(), table.end(), kNegInf);
      count_inside(A + b * n * n, C + b * n * n, L, single_root, c, table.data(), root_r.data(), root_k.data(),
                   true);
      if (table[kk[b]] == kNegInf) continue;
      count_backtrack(c, C + b * n * n, L, single_root, root_r[kk[b]], root_k[kk[b]], kk[b], h + b * n);
    }
  });
  return heads;
}

// CKY over a count dimension: x (T, T, 2) [i][j][c] is the best score of span [i, j] under a label
// of cost c (0 or 1; -inf where none); inside[i][j][k] the best bracketing of [i, j] whose spans'
// costs add up to k (0..2(j - i) + 1: a tree of w + 1 words has 2w + 1 spans). With backpointers
// (split, left count, the span's own cost) the spans of the best tree of a given count are read back.
struct CkyCounts {
  int64_t n;
  std::vector<int64_t> off;  // off[i * n + j]: the span [i, j]'s first value (2(j - i) + 2 of them)
  std::vector<double> in, inner;
  std::vector<int32_t> split, left, own;

  CkyCounts(int64_t n, bool back) : n(n), off(n * n, 0) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i; j < n; ++j) off[i * n + j] = total, total += 2 * (j - i) + 2;
    in.assign(total, kNegInf);
    inner.assign(total, kNegInf);
    if (back) split.assign(total, 0), left.assign(total, 0), own.assign(total, 0);
  }
  int64_t at(int64_t i, int64_t j) const { return off[i * n + j]; }
};

void cky_count_inside(const double* x, int64_t L, CkyCounts& c, double* table, bool back) {
  const int64_t n = c.n;
  for (int64_t w = 0; w < L; ++w) {
    for (int64_t i = 0; i + w < L; ++i) {
      const int64_t j = i + w, ij = c.at(i, j);
      if (w == 0) {
        c.inner[ij] = 0.0;
      } else {
        for (int64_t k = i; k < j; ++k)
          convolve_into(c.in.data() + c.at(i, k), 2 * (k - i) + 1, c.in.data() + c.at(k + 1, j), 2 * (j - k - 1) + 1,
                        c.inner.data() + ij, static_cast<int32_t>(k), back ? c.split.data() + ij : nullptr,
                        back ? c.left.data() + ij : nullptr, back);
      }
      const int64_t top = w == 0 ? 0 : 2 * w;  // the inner counts run over 0..top
      for (int64_t k = 0; k <= top; ++k) {
        if (c.inner[ij + k] == kNegInf) continue;
        for (int64_t cost = 0; cost < 2; ++cost) {
          const double v = c.inner[ij + k] + x[(i * n + j) * 2 + cost];
          if (v > c.in[ij + k + cost]) {
            c.in[ij + k + cost] = v;
            if (back) c.own[ij + k + cost] = static_cast<int32_t>(cost);
          }
        }
      }
    }
  }
  if (L == 0) {
    table[0] = 0.0;
    return;
  }
  std::copy(c.in.begin() + c.at(0, L - 1), c.in.begin() + c.at(0, L - 1) + 2 * L, table);
}

std::tuple<int64_t, int64_t> check_span_costs(const Check& check, const at::Tensor& x, const at::Tensor& lengths) {
  TORCH_CHECK(x.dim() == 4 && x.size(3) == 2, check.op, ": x must have shape (B, T, T, 2), got ", x.sizes());
  const int64_t B = x.size(0), n = x.size(1);
  check.tensor(x, "x", at::kDouble, {B, n, n, 2});
  check.lengths(lengths, B, n);
  return {B, n};
}

// The count tables (B, 2T): the best score of the labeled trees whose cost adds up to exactly k.
at::Tensor cky_count_forward(const at::Tensor& x, const at::Tensor& lengths) {
  const auto [B, n] = check_span_costs(Check{"cky_count_forward"}, x, lengths);
  auto table = at::full({B, std::max<int64_t>(2 * n, 1)}, kNegInf, x.options());
  const double* X = x.data_ptr<double>();
  const int64_t* len = lengths.data_ptr<int64_t>();
  double* out = table.data_ptr<double>();
  const int64_t K1 = table.size(1);
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      CkyCounts c(n, false);
      cky_count_inside(X + b * n * n * 2, len[b], c, out + b * K1, false);
    }
  });
  return table;
}

// The best labeled tree of cost exactly k[b]: (B, T, T) int64, each chosen span's cost (0 or 1),
// -1 elsewhere (all -1 where no tree has that count).
at::Tensor cky_count_spans(const at::Tensor& x, const at::Tensor& lengths, const at::Tensor& k) {
  const Check check{"cky_count_spans"};
  const auto [B, n] = check_span_costs(check, x, lengths);
  check.tensor(k, "k", at::kLong, {B});
  auto out = at::full({B, n, n}, -1, lengths.options());
  const double* X = x.data_ptr<double>();
  const int64_t *len = lengths.data_ptr<int64_t>(), *kk = k.data_ptr<int64_t>();
  int64_t* o = out.data_ptr<int64_t>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> table(std::max<int64_t>(2 * n, 1));
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t L = len[b];
      if (L == 0 || kk[b] < 0 || kk[b] >= 2 * L) continue;
      CkyCounts c(n, true);
      std::fill(table.begin(), table.end(), kNegInf);
      cky_count_inside(X + b * n * n * 2, L, c, table.data(), true);
      if (table[kk[b]] == kNegInf) continue;
      std::vector<std::tuple<int64_t, int64_t, int64_t>> stack{{0, L - 1, kk[b]}};
      while (!stack.empty()) {
        const auto [i, j, count] = stack.back();
        stack.pop_back();
        const int64_t at = c.at(i, j) + count, cost = c.own[at];
        o[(b * n + i) * n + j] = cost;
        if (i == j) continue;
        const int64_t inner = c.at(i, j) + count - cost, s = c.split[inner], k1 = c.left[inner];
        stack.emplace_back(i, s, k1);
        stack.emplace_back(s + 1, j, count - cost - k1);
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(structtorch_chain, m) {
  m.def("eisner_logz_forward(Tensor arcs, Tensor lengths, bool single_root) -> (Tensor, Tensor)");
  m.def("eisner_logz_backward(Tensor grad, Tensor arcs, Tensor lengths, bool single_root, Tensor logz, Tensor charts) -> Tensor");
  m.def("eisner_viterbi_forward(Tensor arcs, Tensor lengths, bool single_root) -> (Tensor, Tensor)");
  m.def("tree_mst_forward(Tensor arcs, Tensor lengths, bool single_root) -> Tensor");
  m.def("cky_logz_forward(Tensor spans, Tensor lengths) -> (Tensor, Tensor)");
  m.def("cky_count_forward(Tensor x, Tensor lengths) -> Tensor");
  m.def("cky_count_spans(Tensor x, Tensor lengths, Tensor k) -> Tensor");
  m.def("eisner_count_forward(Tensor arcs, Tensor cost, Tensor lengths, bool single_root) -> Tensor");
  m.def("eisner_count_heads(Tensor arcs, Tensor cost, Tensor lengths, bool single_root, Tensor k) -> Tensor");
  m.def("matrix_tree_forward(Tensor arcs, Tensor lengths, bool single_root) -> (Tensor, Tensor, Tensor)");
  m.def("matrix_tree_backward(Tensor grad, Tensor lengths, bool single_root, Tensor logz, Tensor weights, Tensor inverse) -> Tensor");
  m.def("cky_logz_backward(Tensor grad, Tensor spans, Tensor lengths, Tensor logz, Tensor charts) -> Tensor");
  m.def("cky_viterbi_forward(Tensor spans, Tensor lengths) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(structtorch_chain, CPU, m) {
  m.impl("eisner_logz_forward", &eisner_logz_forward);
  m.impl("eisner_logz_backward", &eisner_logz_backward);
  m.impl("eisner_viterbi_forward", &eisner_viterbi_forward);
  m.impl("tree_mst_forward", &tree_mst_forward);
  m.impl("cky_logz_forward", &cky_logz_forward);
  m.impl("cky_count_forward", &cky_count_forward);
  m.impl("cky_count_spans", &cky_count_spans);
  m.impl("eisner_count_forward", &eisner_count_forward);
  m.impl("eisner_count_heads", &eisner_count_heads);
  m.impl("matrix_tree_forward", &matrix_tree_forward);
  m.impl("matrix_tree_backward", &matrix_tree_backward);
  m.impl("cky_logz_backward", &cky_logz_backward);
  m.impl("cky_viterbi_forward", &cky_viterbi_forward);
}
