// The kernels that the Python bindings (python.cpp) and the small-call lanes (quick.cpp) call
// directly, defined in checks.cpp and chain.cpp, and the separation oracle of the LP relaxations
// (separation.cpp).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>
#include <vector>

namespace structtorch {

// -1 when every value check passes, else which failed first (see checks.cpp).
int64_t first_bad(at::TensorList xs, at::IntArrayRef modes, const std::optional<at::Tensor>& lengths, int64_t T,
                  const std::optional<at::Tensor>& labels, int64_t N);

namespace chain {

// Canonical inputs (see chain.cpp): unary (B, T, N), trans (N, N) or (B, T-1, N, N), start and
// end (B, N), lengths (B,) int64, all contiguous.
std::tuple<at::Tensor, at::Tensor> viterbi(const at::Tensor& unary, const at::Tensor& trans,
                                           const at::Tensor& start, const at::Tensor& end,
                                           const at::Tensor& lengths);
std::tuple<at::Tensor, at::Tensor> kbest(const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& start,
                                         const at::Tensor& end, const at::Tensor& lengths, int64_t k);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fold(
    const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const at::Tensor& target, const std::optional<at::Tensor>& costs,
    const std::optional<at::Tensor>& pair);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> logz(
    const at::Tensor& unary, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const std::optional<at::Tensor>& labels);
std::vector<at::Tensor> logz_grad(const at::Tensor& grad, const at::Tensor& unary, const at::Tensor& trans,
                                  const at::Tensor& end, const at::Tensor& lengths, const at::Tensor& logz,
                                  const at::Tensor& alpha, const at::Tensor& p, const at::Tensor& m,
                                  const std::optional<at::Tensor>& labels, bool edges);

}  // namespace chain

namespace lp {

// The violated connectivity cuts of one label plane y (V,) float64 on the graph in CSR (int32
// indptr, indices), most violated first (see separation.cpp): pairs (K, 2), violations (K,), the
// separators' vertices concatenated and their offsets (K + 1,). limit < 0: no limit.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> connectivity_cuts(
    const at::Tensor& y, const at::Tensor& indptr, const at::Tensor& indices, double tol, double offset,
    int64_t limit, int64_t nested);

}  // namespace lp
}  // namespace structtorch
