// The autograd nodes of the small-call lanes (quick.cpp): the Viterbi score's gradient (the
// indicators of the best labeling) and the CRF loss's (marginals minus the gold indicators) as C++
// autograd Functions, so that a sentence's forward and backward never enter Python: a Python
// autograd Function costs tens of microseconds per call (its apply, and the engine taking the
// interpreter's lock to run its backward), more than the kernels of one sentence. A backward that
// builds a graph (``create_graph``, double backward) calls the PyTorch recursion of
// structtorch.chain._quick instead, in Python, as the general path does.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/extension.h>

#include "quick.h"

namespace structtorch::quick {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
namespace py = pybind11;

constexpr int64_t kOk = 0;

bool requires_grad(const at::Tensor& unary, const at::Tensor& trans, const Opt& start, const Opt& end) {
  if (!at::GradMode::is_enabled()) return false;
  return unary.requires_grad() || trans.requires_grad() || (start && start->requires_grad()) ||
         (end && end->requires_grad());
}

// 0 for None, else the number of dimensions (1: (N,), summed over the batch in the gradient).
int64_t dims(const Opt& x) { return x.has_value() ? x->dim() : 0; }

// Which of unary, trans, start, end need their gradient: the context numbers its inputs by the
// tensors given (a None start or end has no edge), the gradient list by the forward's arguments.
std::vector<bool> needs(AutogradContext* ctx, const std::vector<int64_t>& d) {
  std::vector<bool> out{ctx->needs_input_grad(0), ctx->needs_input_grad(1), false, false};
  size_t edge = 2;
  for (size_t i = 0; i < 2; ++i)
    if (d[i] != 0) out[2 + i] = ctx->needs_input_grad(edge++);
  return out;
}

// The backward's list: one entry per forward argument (n), the first four the needed gradients.
variable_list by_argument(const variable_list& grads, const std::vector<bool>& need, size_t n) {
  variable_list out(n);
  for (size_t i = 0; i < 4; ++i)
    if (need[i]) out[i] = grads[i];
  return out;
}

at::Tensor defined_or_none(const Opt& x) { return x.value_or(at::Tensor()); }

py::object none_or(const at::Tensor& x) { return x.defined() ? py::cast(x) : py::none(); }

// A Python function of structtorch.chain._quick called with the interpreter's lock (arguments that
// are Python objects already need it held by the caller), its result
// (a tuple of tensors or None) as tensors (undefined for None).
template <typename... Args>
variable_list call_python(const char* name, Args&&... args) {
  py::gil_scoped_acquire gil;
  py::tuple out = py::module_::import("structtorch.chain._quick").attr(name)(std::forward<Args>(args)...);
  variable_list grads;
  for (const py::handle x : out) grads.push_back(x.is_none() ? at::Tensor() : x.cast<at::Tensor>());
  return grads;
}

// The gradients (unary (B, T, N), transitions (N, N) or (B, T-1, N, N), start, end (B, N) or (N,)
// with start_dims/end_dims 1, undefined with 0) of the scores of labelings path (B, T) (-1 outside
// each row's prefix), scaled by grad (B,): each labeling's indicators.
template <typename scalar_t>
void indicators(const int64_t* path, const scalar_t* grad, int64_t B, int64_t T, int64_t N, bool shared,
                scalar_t* gu, scalar_t* gt, scalar_t* gs, scalar_t* ge, bool start_rows, bool end_rows) {
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* y = path + b * T;
    const scalar_t g = grad[b];
    int64_t len = 0;
    while (len < T && y[len] >= 0) ++len;
    for (int64_t t = 0; t < len; ++t) {
      gu[(b * T + t) * N + y[t]] += g;
      if (t > 0) gt[(shared ? 0 : (b * (T - 1) + t - 1) * N * N) + y[t - 1] * N + y[t]] += g;
    }
    if (len == 0) continue;
    if (gs != nullptr) gs[(start_rows ? b * N : 0) + y[0]] += g;
    if (ge != nullptr) ge[(end_rows ? b * N : 0) + y[len - 1]] += g;
  }
}

variable_list viterbi_grads(const at::Tensor& grad, const at::Tensor& path, const at::Tensor& trans,
                            int64_t start_dims, int64_t end_dims) {
  const int64_t B = path.size(0), T = path.size(1), N = trans.size(-1);
  const at::Tensor p = path.contiguous();
  const at::Tensor g = grad.to(trans.scalar_type()).contiguous();
  const auto opts = g.options();
  at::Tensor gu = at::zeros({B, T, N}, opts), gt = at::zeros(trans.sizes(), opts);
  at::Tensor gs = start_dims ? at::zeros(start_dims == 1 ? at::IntArrayRef{N} : at::IntArrayRef{B, N}, opts)
                             : at::Tensor();
  at::Tensor ge = end_dims ? at::zeros(end_dims == 1 ? at::IntArrayRef{N} : at::IntArrayRef{B, N}, opts)
                           : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "quick viterbi backward", [&] {
    indicators<scalar_t>(p.data_ptr<int64_t>(), g.data_ptr<scalar_t>(), B, T, N, trans.dim() == 2,
                         gu.data_ptr<scalar_t>(), gt.data_ptr<scalar_t>(),
                         gs.defined() ? gs.data_ptr<scalar_t>() : nullptr,
                         ge.defined() ? ge.data_ptr<scalar_t>() : nullptr, start_dims == 2, end_dims == 2);
  });
  return {gu, gt, gs, ge};
}

// The lanes' arguments after unary, transitions, start and end: lengths, mask, (labels,) validate,
// and the out-parameters; the gradient list covers them all (undefined).
struct ViterbiScore : public torch::autograd::Function<ViterbiScore> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& unary, const at::Tensor& trans,
                               const Opt& start, const Opt& end, const Opt& lengths, const Opt& mask,
                               bool validate, at::Tensor* path, int64_t* status) {
    at::Tensor score;
    std::tie(score, *path, *status) = viterbi(unary, trans, start, end, lengths, mask, validate);
    if (*status != kOk) return {at::empty({0}, unary.options())};
    ctx->save_for_backward({*path, trans});
    ctx->saved_data["dims"] = std::vector<int64_t>{dims(start), dims(end)};
    return {score};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const std::vector<int64_t> d = ctx->saved_data["dims"].toIntVector();
    const variable_list grads = at::GradMode::is_enabled()
                                    ? call_python("_viterbi_grads", grad_outputs[0], saved[0], saved[1], d[0], d[1])
                                    : viterbi_grads(grad_outputs[0], saved[0], saved[1], d[0], d[1]);
    return by_argument(grads, needs(ctx, d), 9);
  }
};

struct NegativeLogLikelihood : public torch::autograd::Function<NegativeLogLikelihood> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& unary, const at::Tensor& trans,
                               const Opt& start, const Opt& end, const Opt& lengths, const Opt& mask,
                               const at::Tensor& labels, bool validate, int64_t* status) {
    auto [loss, state, st] = nll(unary, trans, start, end, lengths, mask, labels, validate);
    *status = st;
    if (st != kOk) return {at::empty({0}, unary.options())};
    variable_list saved{unary, trans, defined_or_none(start), defined_or_none(end)};
    saved.insert(saved.end(), state.begin(), state.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["dims"] = std::vector<int64_t>{dims(start), dims(end)};
    return {loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const std::vector<int64_t> d = ctx->saved_data["dims"].toIntVector();
    const std::vector<at::Tensor> state(saved.begin() + 4, saved.end());
    const std::vector<bool> need = needs(ctx, d);
    variable_list grads;
    if (at::GradMode::is_enabled()) {  // double backward: differentiate the recursion
      py::gil_scoped_acquire gil;      // before any Python object is made
      const py::tuple flags = py::make_tuple(bool(need[0]), bool(need[1]), bool(need[2]), bool(need[3]));
      grads = call_python("_nll_double_backward", saved[0], saved[1], none_or(saved[2]), none_or(saved[3]),
                          state, flags, grad_outputs[0]);
    } else {
      grads = nll_grad(grad_outputs[0], saved[0], saved[1], d[0], d[1], state);
    }
    return by_argument(grads, need, 9);
  }
};

}  // namespace

std::tuple<at::Tensor, at::Tensor, int64_t> viterbi_autograd(const at::Tensor& unary, const at::Tensor& trans,
                                                             const Opt& start, const Opt& end,
                                                             const Opt& lengths, const Opt& mask, bool validate) {
  if (!requires_grad(unary, trans, start, end)) return viterbi(unary, trans, start, end, lengths, mask, validate);
  at::Tensor path;
  int64_t status = kOk;
  const variable_list score = ViterbiScore::apply(unary, trans, start, end, lengths, mask, validate, &path, &status);
  return {score[0], path, status};
}

std::tuple<at::Tensor, int64_t> nll_autograd(const at::Tensor& unary, const at::Tensor& trans, const Opt& start,
                                             const Opt& end, const Opt& lengths, const Opt& mask,
                                             const at::Tensor& labels, bool validate) {
  if (!requires_grad(unary, trans, start, end)) {
    auto [loss, state, status] = nll(unary, trans, start, end, lengths, mask, labels, validate);
    return {loss, status};
  }
  int64_t status = kOk;
  const variable_list loss =
      NegativeLogLikelihood::apply(unary, trans, start, end, lengths, mask, labels, validate, &status);
  return {loss[0], status};
}

}  // namespace structtorch::quick
