// Python bindings of the kernels that small calls use (structtorch._extension.fast_ops): a
// pybind11 call costs about a microsecond, against 5-10 through the dispatcher (torch.ops), which
// matters where the kernel itself takes a few microseconds (one sentence). The kernels stay
// registered as torch operators too (torch.ops.structtorch_chain.*): the raw entry points that
// tests/fuzz_kernels.py calls with bad counts and shapes.
#include <torch/extension.h>

#include "api.h"
#include "quick.h"

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
  m.def("kbest_forward", &structtorch::chain::kbest, "The chain k-best lists (see chain.cpp).");
  m.def("fold_forward", &structtorch::chain::fold,
        "The loss-augmented Viterbi of a loss folded into the scores (see chain.cpp).");
  m.def("logz_forward", &structtorch::chain::logz,
        "The chain log-partition forward, with labels also the CRF loss (see chain.cpp).");
  m.def("logz_backward", &structtorch::chain::logz_grad,
        "The gradients of the chain log-partition or CRF loss (see chain.cpp).");
  m.def("quick_viterbi", &structtorch::quick::viterbi, "The Viterbi lane of small calls (see quick.cpp).");
  m.def("quick_nll", &structtorch::quick::nll, "The CRF-loss lane of small calls (see quick.cpp).");
  m.def("quick_nll_backward", &structtorch::quick::nll_grad, "Its gradients (see quick.cpp).");
  m.def("quick_viterbi_autograd", &structtorch::quick::viterbi_autograd,
        "quick_viterbi with the score's autograd node (see quick_grad.cpp).");
  m.def("quick_nll_autograd", &structtorch::quick::nll_autograd,
        "quick_nll with the loss's autograd node (see quick_grad.cpp).");
  // without the GIL: map_lp's worker threads separate their instances' planes concurrently
  m.def("connectivity_cuts", &structtorch::lp::connectivity_cuts,
        "The violated connectivity cuts of one label plane (see separation.cpp).",
        pybind11::call_guard<pybind11::gil_scoped_release>());
}
