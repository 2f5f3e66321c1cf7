// Shared pieces of the compiled kernels (see chain.cpp for the conventions).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
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

// Every shape, count and index a kernel reads is checked before its parallel loop, whatever Python
// computed (O(B T N) work at most, against O(B T N^2) for the recursions), so a wrong value raises a
// RuntimeError naming the op and the argument instead of reading or writing out of bounds.
struct Check {
  const char* op;

  void tensor(const at::Tensor& x, const char* name, at::ScalarType dtype, at::IntArrayRef shape) const {
    TORCH_CHECK(x.device().is_cpu() && x.is_contiguous(), op, ": ", name, " must be a contiguous CPU tensor");
    TORCH_CHECK(x.scalar_type() == dtype, op, ": ", name, " must have dtype ", dtype, ", got ", x.scalar_type());
    TORCH_CHECK(x.sizes() == shape, op, ": ", name, " must have shape ", shape, ", got ", x.sizes());
  }

  // A (N, N) block shared by all steps, or (B, T-1, N, N) per step.
  void transitions(const at::Tensor& x, const char* name, at::ScalarType dtype, int64_t B, int64_t T,
                   int64_t N) const {
    if (x.dim() == 2) return tensor(x, name, dtype, {N, N});
    tensor(x, name, dtype, {B, std::max<int64_t>(T - 1, 0), N, N});
  }

  void lengths(const at::Tensor& lengths, int64_t B, int64_t T) const {
    tensor(lengths, "lengths", at::kLong, {B});
    const int64_t* len = lengths.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b)
      TORCH_CHECK(len[b] >= 0 && len[b] <= T, op, ": lengths[", b, "] = ", len[b], " is outside [0, ", T, "]");
  }

  // The chain inputs (start may be undefined): unary (B, T, N) float32/float64, transitions (N, N) or
  // (B, T-1, N, N), start and end (B, N) of the same dtype, lengths in [0, T]. Returns (B, T, N).
  std::tuple<int64_t, int64_t, int64_t> chain(const at::Tensor& unary, const at::Tensor& trans,
                                              const at::Tensor& start, const at::Tensor& end,
                                              const at::Tensor& lens) const {
    TORCH_CHECK(unary.dim() == 3, op, ": unary must have shape (B, T, N), got ", unary.sizes());
    const int64_t B = unary.size(0), T = unary.size(1), N = unary.size(2);
    const auto dtype = unary.scalar_type();
    TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble, op, ": unary must be float32 or float64");
    tensor(unary, "unary", dtype, {B, T, N});
    transitions(trans, "trans", dtype, B, T, N);
    if (start.defined()) tensor(start, "start", dtype, {B, N});
    tensor(end, "end", dtype, {B, N});
    lengths(lens, B, T);
    return {B, T, N};
  }

  // (B, T) int64 labels in [0, N) at every position inside each length.
  void labels(const at::Tensor& x, const char* name, const at::Tensor& lengths, int64_t B, int64_t T,
              int64_t N) const {
    tensor(x, name, at::kLong, {B, T});
    const int64_t *y = x.data_ptr<int64_t>(), *len = lengths.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < len[b]; ++t)
        TORCH_CHECK(y[b * T + t] >= 0 && y[b * T + t] < N, op, ": ", name, "[", b, ", ", t, "] = ", y[b * T + t],
                    " is outside [0, ", N, ")");
  }

  // (B, T) int64 weights >= 0 whose sum inside each length is at most K (tested without overflow).
  void weights(const at::Tensor& w, const at::Tensor& lengths, int64_t B, int64_t T, int64_t K) const {
    tensor(w, "weights", at::kLong, {B, T});
    const int64_t *x = w.data_ptr<int64_t>(), *len = lengths.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      int64_t sum = 0;
      for (int64_t t = 0; t < len[b]; ++t) {
        const int64_t v = x[b * T + t];
        TORCH_CHECK(v >= 0 && v <= K - sum, op, ": weights in row ", b, " must be >= 0 and sum to at most K = ", K);
        sum += v;
      }
    }
  }

  // The number of elements of a table with these dimensions, refused when it overflows int64.
  int64_t numel(std::initializer_list<int64_t> dims) const {
    int64_t n = 1;
    for (const int64_t d : dims) {
      TORCH_CHECK(d >= 0, op, ": negative table dimension ", d);
      TORCH_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d, op, ": table size overflows int64");
      n *= d;
    }
    return n;
  }
};

template <typename T>
Blocks<T> make_blocks(const at::Tensor& trans, int64_t n) {
  const bool shared = trans.dim() == 2;
  return {trans.data_ptr<T>(), n, shared ? 0 : trans.size(1), shared};
}

}  // namespace structtorch
