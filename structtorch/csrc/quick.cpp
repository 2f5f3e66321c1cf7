// Small-call lanes: the common case of a public call (structtorch.viterbi, LinearChainCRF's loss)
// in one C++ call from Python, so that one sentence costs microseconds rather than the Python of
// the general path. A lane takes what Python already checked for metadata (CPU, float32/float64,
// shapes); here it makes start, end and lengths canonical, runs the value checks (when asked)
// and the kernel, and casts the result. Its status tells Python what to do: kOk, the result;
// kBadInput, a value check failed; kNotFinite, a result is not finite (an infeasible row, an
// overflow). For both Python takes the general path, which raises the usual error or returns the
// exact result for those rows; kNotPrefix, a mask that is not a prefix in every row (the general
// path moves its positions). A mask that is gives the lengths. kNotCanonical: the arguments' shapes,
// dtypes or devices are not the lanes' (Python checked only that they are plain tensors).
#include "quick.h"

#include <limits>

#include "api.h"

namespace structtorch::quick {
namespace {

constexpr int64_t kOk = 0, kBadInput = 1, kNotFinite = 2, kNotPrefix = 3, kNotCanonical = 4;
constexpr int64_t kValues = 0, kFinite = 2;  // modes of first_bad (checks.cpp)

struct Canonical {
  at::Tensor unary, trans, start, end, lengths;
};

// start or end: None -> zeros (B, N); (N,) -> one row per sequence; (B, N) as it is.
at::Tensor boundary(const Opt& x, const at::Tensor& unary) {
  const int64_t B = unary.size(0), N = unary.size(2);
  if (!x.has_value()) return at::zeros({B, N}, unary.options());
  return x->dim() == 1 ? x->expand({B, N}).contiguous() : x->contiguous();
}

Canonical canonical(const at::Tensor& unary, const at::Tensor& trans, const Opt& start, const Opt& end,
                    const Opt& lengths) {
  const int64_t B = unary.size(0), T = unary.size(1);
  at::Tensor len = lengths.has_value() ? lengths->to(at::kLong).contiguous()
                                       : at::full({B}, T, unary.options().dtype(at::kLong));
  return {unary.contiguous(), trans.contiguous(), boundary(start, unary), boundary(end, unary), len};
}

// The lengths (B,) of a (B, T) bool or uint8 mask whose every row is a prefix (true then false),
// or nullopt for any other pattern (the general path moves such rows).
std::optional<at::Tensor> prefix_lengths(const at::Tensor& mask) {
  TORCH_CHECK(mask.dim() == 2, "quick: mask must be (B, T)");
  const at::Tensor m = mask.to(at::kByte).contiguous();
  const int64_t B = m.size(0), T = m.size(1);
  at::Tensor len = at::empty({B}, m.options().dtype(at::kLong));
  const uint8_t* mp = m.data_ptr<uint8_t>();
  int64_t* lp = len.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    while (n < T && mp[b * T + n]) ++n;
    for (int64_t t = n; t < T; ++t)
      if (mp[b * T + t]) return std::nullopt;
    lp[b] = n;
  }
  return len;
}

// lengths, or the lengths of mask when given (nullopt and a false ok when it is not a prefix).
Opt lengths_of(const Opt& lengths, const Opt& mask, bool& ok) {
  ok = true;
  if (!mask.has_value()) return lengths;
  Opt len = prefix_lengths(*mask);
  ok = len.has_value();
  return len;
}

bool floating(const at::Tensor& x) { return x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble; }

bool integral(const at::Tensor& x) { return !x.is_floating_point() && !x.is_complex() && x.scalar_type() != at::kBool; }

// Whether the arguments are the lanes' (metadata only): CPU tensors, unary (B, T, N) float32 or
// float64 with T >= 1 and 1 <= N <= 32767, transitions (N, N) or (B, T-1, N, N), start and end
// (N,) or (B, N), all of unary's dtype; lengths (B,) integers, or instead a (B, T) bool or uint8
// mask; labels (B, T) integers.
bool lane_shapes(const at::Tensor& unary, const at::Tensor& trans, const Opt& start, const Opt& end,
                 const Opt& lengths, const Opt& mask, const Opt& labels) {
  if (unary.dim() != 3 || !floating(unary) || !unary.device().is_cpu()) return false;
  const int64_t B = unary.size(0), T = unary.size(1), N = unary.size(2);
  const auto dtype = unary.scalar_type();
  if (T < 1 || N < 1 || N > 32767 || trans.scalar_type() != dtype || !trans.device().is_cpu()) return false;
  if (!(trans.sizes() == at::IntArrayRef{N, N} || trans.sizes() == at::IntArrayRef{B, T - 1, N, N})) return false;
  for (const Opt* x : {&start, &end}) {
    if (!x->has_value()) continue;
    const at::Tensor& v = **x;
    if (v.scalar_type() != dtype || !v.device().is_cpu()) return false;
    if (!(v.sizes() == at::IntArrayRef{N} || v.sizes() == at::IntArrayRef{B, N})) return false;
  }
  if (lengths && (lengths->sizes() != at::IntArrayRef{B} || !integral(*lengths) || !lengths->device().is_cpu()))
    return false;
  if (mask && (lengths || mask->sizes() != at::IntArrayRef{B, T} || !mask->device().is_cpu() ||
               !(mask->scalar_type() == at::kBool || mask->scalar_type() == at::kByte)))
    return false;
  return !labels || (labels->sizes() == at::IntArrayRef{B, T} && integral(*labels) && labels->device().is_cpu());
}

// Whether a value check fails: NaN or +inf potentials, lengths outside [0, T], labels outside
// [0, N) within the lengths.
bool bad_input(const at::Tensor& unary, const at::Tensor& trans, const Opt& start, const Opt& end,
               const Opt& lengths, const Opt& labels) {
  std::vector<at::Tensor> xs{unary, trans};
  if (start.has_value()) xs.push_back(*start);
  if (end.has_value()) xs.push_back(*end);
  const std::vector<int64_t> modes(xs.size(), kValues);
  return first_bad(xs, modes, lengths, unary.size(1), labels, unary.size(2)) >= 0;
}

bool not_finite(const at::Tensor& x) { return first_bad({x}, {kFinite}, std::nullopt, 0, std::nullopt, 0) >= 0; }

}  // namespace

// The best score (B,) in the input dtype and labeling (B, T), and the status; the lengths are
// given, or those of a mask, or T.
std::tuple<at::Tensor, at::Tensor, int64_t> viterbi(const at::Tensor& unary, const at::Tensor& trans,
                                                    const Opt& start, const Opt& end, const Opt& given,
                                                    const Opt& mask, bool validate) {
  if (!lane_shapes(unary, trans, start, end, given, mask, std::nullopt)) return {{}, {}, kNotCanonical};
  bool prefix;
  const Opt lengths = lengths_of(given, mask, prefix);
  if (!prefix) return {{}, {}, kNotPrefix};
  if (validate && bad_input(unary, trans, start, end, lengths, std::nullopt)) return {{}, {}, kBadInput};
  const Canonical c = canonical(unary, trans, start, end, lengths);
  at::Tensor score, path;
  std::tie(score, path) = chain::viterbi(c.unary, c.trans, c.start, c.end, c.lengths);
  at::Tensor out = score.to(unary.scalar_type());
  return {out, path, validate && not_finite(out) ? kNotFinite : kOk};
}

// The CRF loss logZ - score(labels) (B,) in the input dtype, the state nll_grad takes (logZ, the
// factors alpha, p, m, and the canonical end, lengths and labels), and the status.
std::tuple<at::Tensor, std::vector<at::Tensor>, int64_t> nll(const at::Tensor& unary, const at::Tensor& trans,
                                                             const Opt& start, const Opt& end,
                                                             const Opt& given, const Opt& mask,
                                                             const at::Tensor& labels, bool validate) {
  if (!lane_shapes(unary, trans, start, end, given, mask, labels)) return {{}, {}, kNotCanonical};
  bool prefix;
  const Opt lengths = lengths_of(given, mask, prefix);
  if (!prefix) return {{}, {}, kNotPrefix};
  if (validate && bad_input(unary, trans, start, end, lengths, labels)) return {{}, {}, kBadInput};
  const Canonical c = canonical(unary, trans, start, end, lengths);
  const at::Tensor gold = labels.to(at::kLong).contiguous();
  auto [logz, alpha, p, m, loss] = chain::logz(c.unary, c.trans, c.start, c.end, c.lengths, gold);
  at::Tensor out = loss.to(unary.scalar_type());
  const int64_t status = validate && not_finite(out) ? kNotFinite : kOk;
  return {out, {logz, alpha, p, m, c.end, c.lengths, gold}, status};
}

// Gradients of the loss (upstream grad (B,)) w.r.t. unary, transitions, start and end, each of
// its input's shape: summed over the batch for a start or end of shape (N,) (start_dims,
// end_dims: 1), undefined for one that was None (0).
std::vector<at::Tensor> nll_grad(const at::Tensor& grad, const at::Tensor& unary, const at::Tensor& trans,
                                 int64_t start_dims, int64_t end_dims, const std::vector<at::Tensor>& state) {
  TORCH_CHECK(state.size() == 7, "nll_grad: the state of nll");
  std::vector<at::Tensor> g = chain::logz_grad(grad.to(at::kDouble), unary.contiguous(), trans.contiguous(),
                                               state[4], state[5], state[0], state[1], state[2], state[3],
                                               state[6], true);
  const int64_t dims[2] = {start_dims, end_dims};
  for (int i = 0; i < 2; ++i) {
    at::Tensor& x = g[2 + i];
    x = dims[i] == 0 ? at::Tensor() : dims[i] == 1 ? x.sum(0) : x;
  }
  return g;
}

}  // namespace structtorch::quick
