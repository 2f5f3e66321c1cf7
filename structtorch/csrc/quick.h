// Small-call lanes (quick.cpp): a whole public call of the common case in one C++ call.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>
#include <vector>

namespace structtorch::quick {

using Opt = std::optional<at::Tensor>;

std::tuple<at::Tensor, at::Tensor, int64_t> viterbi(const at::Tensor& unary, const at::Tensor& trans,
                                                    const Opt& start, const Opt& end, const Opt& lengths,
                                                    const Opt& mask, bool validate);
std::tuple<at::Tensor, std::vector<at::Tensor>, int64_t> nll(const at::Tensor& unary, const at::Tensor& trans,
                                                             const Opt& start, const Opt& end,
                                                             const Opt& lengths, const Opt& mask,
                                                             const at::Tensor& labels, bool validate);
std::vector<at::Tensor> nll_grad(const at::Tensor& grad, const at::Tensor& unary, const at::Tensor& trans,
                                 int64_t start_dims, int64_t end_dims, const std::vector<at::Tensor>& state);

// The lanes with their autograd nodes (quick_grad.cpp): viterbi's score and nll's loss carry a C++
// autograd node when grad mode is on and unary, trans, start or end requires grad.
std::tuple<at::Tensor, at::Tensor, int64_t> viterbi_autograd(const at::Tensor& unary, const at::Tensor& trans,
                                                             const Opt& start, const Opt& end,
                                                             const Opt& lengths, const Opt& mask, bool validate);
std::tuple<at::Tensor, int64_t> nll_autograd(const at::Tensor& unary, const at::Tensor& trans, const Opt& start,
                                             const Opt& end, const Opt& lengths, const Opt& mask,
                                             const at::Tensor& labels, bool validate);

}  // namespace structtorch::quick
