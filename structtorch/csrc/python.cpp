// Python bindings of the kernels that small calls use (structtorch._extension.fast_ops): a
// pybind11 call costs about a microsecond, against 5-10 through the dispatcher (torch.ops), which
// matters where the kernel itself takes a few microseconds (one sentence). The same functions stay
// registered as torch operators (torch.ops.structtorch_chain.*) for everything else.
#include <torch/extension.h>

#include <optional>
#include <tuple>
#include <vector>

namespace structtorch {
int64_t first_bad(at::TensorList xs, at::IntArrayRef modes, const std::optional<at::Tensor>& lengths, int64_t T,
                  const std::optional<at::Tensor>& labels, int64_t N);
namespace chain {
std::tuple<at::Tensor, at::Tensor> viterbi(const at::Tensor& unary, const at::Tensor& trans,
                                           const at::Tensor& start, const at::Tensor& end,
                                           const at::Tensor& lengths);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> logz(
    const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const std::optional<at::Tensor>& labels);
std::vector<at::Tensor> logz_grad(const at::Tensor& grad, const at::Tensor& unary, const at::Tensor& trans,
                                  const at::Tensor& end, const at::Tensor& lengths, const at::Tensor& logz,
                                  const at::Tensor& alpha, const at::Tensor& p, const at::Tensor& m,
                                  const std::optional<at::Tensor>& labels, bool edges);
}  // namespace chain
}  // namespace structtorch

namespace {

int64_t first_bad(const std::vector<at::Tensor>& xs, const std::vector<int64_t>& modes,
                  const std::optional<at::Tensor>& lengths, int64_t T, const std::optional<at::Tensor>& labels,
                  int64_t N) {
  return structtorch::first_bad(xs, modes, lengths, T, labels, N);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("first_bad", &first_bad, "The first failing value check (see checks.cpp); -1: none.");
  m.def("viterbi_forward", &structtorch::chain::viterbi, "The chain Viterbi (see chain.cpp).");
  m.def("logz_forward", &structtorch::chain::logz,
        "The chain log-partition forward, with labels also the CRF loss (see chain.cpp).");
  m.def("logz_backward", &structtorch::chain::logz_grad,
        "The gradients of the chain log-partition or CRF loss (see chain.cpp).");
}
