// Loss-augmented Viterbi with a Hamming-loss dimension (Bauer et al. 2014, Algorithm 1) for
// linear chains: L_t[j][k] is the best score of a prefix ending in label j at step t whose
// (weighted) Hamming distance to the target is exactly k. Each step costs O(k_max N^2), vectorized
// over k; the answer for every k is returned, so Python can apply any h and either rescaling.
//
// Conventions as in chain.cpp, plus target (B, T) int64 in [0, N) inside each length and
// weights (B, T) int64 >= 0 (1 for the plain Hamming loss); K = the largest weighted count.
#include "common.h"

namespace {

using structtorch::Blocks;
using structtorch::Check;
using structtorch::kNegInf;
using structtorch::make_blocks;

struct Row {
  int64_t len;
  const int64_t* target;  // (T)
  const int64_t* weight;  // (T)
};

constexpr int64_t kBlock = 32;

// m[k] = max_i cur[i][k] + a[i][j] and its first maximizing i, for W consecutive counts k; the W
// running maxima stay in registers while i runs.
template <int64_t W, typename T>
inline void maxplus_block(const double* cur, const T* a, int64_t n, int64_t K1, int64_t j, double* m,
                          double* g) {
  double mm[W], gg[W];
  for (int64_t k = 0; k < W; ++k) mm[k] = kNegInf, gg[k] = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double aij = static_cast<double>(a[i * n + j]);
    if (aij == kNegInf) continue;
    const double* ci = cur + i * K1;
    const double di = static_cast<double>(i);
#pragma omp simd
    for (int64_t k = 0; k < W; ++k) {
      const double v = ci[k] + aij;
      const bool better = v > mm[k];  // strict: the first maximal i wins ties
      mm[k] = better ? v : mm[k];
      gg[k] = better ? di : gg[k];
    }
  }
  for (int64_t k = 0; k < W; ++k) m[k] = mm[k], g[k] = gg[k];
}

// Fills best (K+1) and last (K+1) for one sequence; bp is (T, N, K+1).
template <typename T, typename BP>
void hamming_one(const T* u, const Blocks<T>& blk, const T* st, const T* en, int64_t b, Row row,
                 int64_t n, int64_t K, double* best, int64_t* last, BP* bp) {
  const int64_t K1 = K + 1;
  std::fill(best, best + K1, kNegInf);
  std::fill(last, last + K1, int64_t(0));
  if (row.len == 0) {
    best[0] = 0.0;
    return;
  }
  std::vector<double> cur(n * K1, kNegInf), nxt(n * K1, kNegInf), m(n * K1), arg(n * K1);
  int64_t kmax = std::min(row.weight[0], K);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t k = j != row.target[0] ? row.weight[0] : 0;
    if (k <= K) cur[j * K1 + k] = static_cast<double>(st[j]) + static_cast<double>(u[j]);
  }
  for (int64_t t = 1; t < row.len; ++t) {
    const T* a = blk.at(b, t - 1);
    for (int64_t j = 0; j < n; ++j) {
      double* mj = m.data() + j * K1;
      double* gj = arg.data() + j * K1;
      int64_t k0 = 0;
      for (; k0 + kBlock <= kmax + 1; k0 += kBlock) maxplus_block<kBlock>(cur.data() + k0, a, n, K1, j, mj + k0, gj + k0);
      for (; k0 <= kmax; ++k0) maxplus_block<1>(cur.data() + k0, a, n, K1, j, mj + k0, gj + k0);
    }
    const int64_t w = row.weight[t];
    const int64_t knew = std::min(kmax + w, K);
    const T* ut = u + t * n;
    BP* bpt = bp + t * n * K1;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t shift = j != row.target[t] ? w : 0;
      const double uj = static_cast<double>(ut[j]);
      double* out = nxt.data() + j * K1;
      BP* bj = bpt + j * K1;
      const double* mj = m.data() + j * K1 - shift;  // mj[k] = m[j][k - shift]
      const double* gj = arg.data() + j * K1 - shift;
      const int64_t lo = std::min(shift, knew + 1), hi = std::min(kmax + shift, knew);
      for (int64_t k = 0; k < lo; ++k) out[k] = kNegInf, bj[k] = BP(0);
#pragma omp simd
      for (int64_t k = lo; k <= hi; ++k) {
        out[k] = mj[k] + uj;
        bj[k] = static_cast<BP>(gj[k]);
      }
      for (int64_t k = std::max(hi + 1, lo); k <= knew; ++k) out[k] = kNegInf, bj[k] = BP(0);
    }
    kmax = knew;
    std::swap(cur, nxt);
  }
  for (int64_t k = 0; k <= kmax; ++k) {
    for (int64_t j = 0; j < n; ++j) {
      const double v = cur[j * K1 + k] + static_cast<double>(en[j]);
      if (v > best[k]) {
        best[k] = v;
        last[k] = j;
      }
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> hamming_forward(
    const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const at::Tensor& target, const at::Tensor& weights, int64_t K) {
  const Check c{"hamming_forward"};
  int64_t B, T, N;
  std::tie(B, T, N) = c.chain(unary, trans, start, end, lengths);
  TORCH_CHECK(N <= 32767, "hamming_forward: at most 32767 labels");
  TORCH_CHECK(K >= 0, "hamming_forward: K must be >= 0, got ", K);
  c.labels(target, "target", lengths, B, T, N);
  c.weights(weights, lengths, B, T, K);
  c.numel({B, T, N, K + 1});
  auto best = at::empty({B, K + 1}, unary.options().dtype(at::kDouble));
  auto last = at::empty({B, K + 1}, unary.options().dtype(at::kLong));
  auto bp = at::empty({B, T, N, K + 1}, unary.options().dtype(N <= 256 ? at::kByte : at::kShort));
  const int64_t* len = lengths.data_ptr<int64_t>();
  const int64_t* tgt = target.data_ptr<int64_t>();
  const int64_t* wts = weights.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(unary.scalar_type(), "hamming_forward", [&] {
    const auto blk = make_blocks<scalar_t>(trans, N);
    const scalar_t* u = unary.data_ptr<scalar_t>();
    const scalar_t* st = start.data_ptr<scalar_t>();
    const scalar_t* en = end.data_ptr<scalar_t>();
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const Row row{len[b], tgt + b * T, wts + b * T};
        double* bs = best.data_ptr<double>() + b * (K + 1);
        int64_t* la = last.data_ptr<int64_t>() + b * (K + 1);
        const int64_t off = b * T * N * (K + 1);
        if (N <= 256)
          hamming_one(u + b * T * N, blk, st + b * N, en + b * N, b, row, N, K, bs, la,
                      bp.data_ptr<uint8_t>() + off);
        else
          hamming_one(u + b * T * N, blk, st + b * N, en + b * N, b, row, N, K, bs, la,
                      bp.data_ptr<int16_t>() + off);
      }
    });
  });
  return {best, last, bp};
}

// A count k with no labeling (an infeasible cell) leaves the row -1 rather than walking out of the table.
template <typename BP>
void backtrack_one(const BP* bp, Row row, int64_t n, int64_t K1, int64_t k, int64_t j, int64_t* path) {
  for (int64_t t = row.len - 1; t > 0; --t) {
    path[t] = j;
    const int64_t i = static_cast<int64_t>(bp[(t * n + j) * K1 + k]);
    k -= j != row.target[t] ? row.weight[t] : 0;
    if (k < 0 || i < 0 || i >= n) {
      std::fill(path, path + row.len, int64_t(-1));
      return;
    }
    j = i;
  }
  path[0] = j;
}

// Labels of the best labeling with count k[b] ending in last[b] (rows with k[b] < 0 stay -1).
at::Tensor hamming_backtrack(const at::Tensor& bp, const at::Tensor& lengths, const at::Tensor& target,
                             const at::Tensor& weights, const at::Tensor& k, const at::Tensor& last) {
  const Check c{"hamming_backtrack"};
  TORCH_CHECK(bp.dim() == 4 && (bp.scalar_type() == at::kByte || bp.scalar_type() == at::kShort),
              "hamming_backtrack: bp must be a (B, T, N, K+1) uint8 or int16 tensor");
  const int64_t B = bp.size(0), T = bp.size(1), N = bp.size(2), K1 = bp.size(3);
  c.tensor(bp, "bp", bp.scalar_type(), {B, T, N, K1});
  c.lengths(lengths, B, T);
  c.labels(target, "target", lengths, B, T, N);
  c.weights(weights, lengths, B, T, K1 - 1);
  c.tensor(k, "k", at::kLong, {B});
  c.tensor(last, "last", at::kLong, {B});
  for (int64_t b = 0; b < B; ++b) {
    const int64_t kb = k.data_ptr<int64_t>()[b], lb = last.data_ptr<int64_t>()[b];
    TORCH_CHECK(kb >= -1 && kb < K1, "hamming_backtrack: k[", b, "] = ", kb, " is outside [-1, ", K1, ")");
    TORCH_CHECK(kb < 0 || (lb >= 0 && lb < N), "hamming_backtrack: last[", b, "] = ", lb, " is outside [0, ", N, ")");
  }
  auto path = at::full({B, T}, -1, target.options());
  const int64_t* len = lengths.data_ptr<int64_t>();
  const int64_t* tgt = target.data_ptr<int64_t>();
  const int64_t* wts = weights.data_ptr<int64_t>();
  const int64_t* kk = k.data_ptr<int64_t>();
  const int64_t* la = last.data_ptr<int64_t>();
  int64_t* pa = path.data_ptr<int64_t>();
  at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const Row row{len[b], tgt + b * T, wts + b * T};
      if (row.len == 0 || kk[b] < 0) continue;
      const int64_t off = b * T * N * K1;
      if (bp.scalar_type() == at::kByte)
        backtrack_one(bp.data_ptr<uint8_t>() + off, row, N, K1, kk[b], la[b], pa + b * T);
      else
        backtrack_one(bp.data_ptr<int16_t>() + off, row, N, K1, kk[b], la[b], pa + b * T);
    }
  });
  return path;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(structtorch_chain, m) {
  m.def("hamming_forward(Tensor unary, Tensor trans, Tensor start, Tensor end, Tensor lengths, Tensor target, Tensor weights, int K) -> (Tensor, Tensor, Tensor)");
  m.def("hamming_backtrack(Tensor bp, Tensor lengths, Tensor target, Tensor weights, Tensor k, Tensor last) -> Tensor");
}

TORCH_LIBRARY_IMPL(structtorch_chain, CPU, m) {
  m.impl("hamming_forward", &hamming_forward);
  m.impl("hamming_backtrack", &hamming_backtrack);
}
