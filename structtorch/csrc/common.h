// Shared pieces of the compiled kernels (see chain.cpp for the conventions).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

namespace structtorch {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The transition block used between steps t and t + 1 of sequence b: one (N, N) block shared by
// all steps, or one per (b, t) for transitions of shape (B, T-1, N, N).
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

}  // namespace structtorch
