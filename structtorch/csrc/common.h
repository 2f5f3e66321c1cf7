// Shared pieces of the compiled kernels (see chain.cpp for the conventions).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <tuple>
#include <vector>

namespace structtorch {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// exp(x) for x <= 0 (-inf included), written in arithmetic the compiler vectorizes (a loop of
// std::exp is one libm call per term): x = k ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor
// polynomial to degree 13 (truncation below 1e-17 relative), times 2^k built in the exponent bits.
// Below -708 it returns 0 (exp(-708) = 3e-308): the log-sum-exps that call it add terms relative
// to their largest, exp(0) = 1, so what is dropped is below 1e-300 of the sum. Within 2 ulp of
// std::exp elsewhere.
inline double exp_nonpositive(double x) {
  constexpr double kLog2e = 1.4426950408889634, kLn2Hi = 0.6931471803691238, kLn2Lo = 1.9082149292705877e-10;
  constexpr double kShift = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  const bool tiny = !(x >= -708.0);              // also -inf (and NaN)
  const double y = tiny ? 0.0 : x;
  const double shifted = y * kLog2e + kShift;  // its low mantissa bits: 2^51 + round(y / ln2)
  const double kd = shifted - kShift;
  const double r = (y - kd * kLn2Hi) - kd * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^k for k in [-1022, 0]: k + 1023 in the exponent field, from shifted's bits in integer
  // arithmetic (a double -> int64 conversion has no vector instruction before AVX-512)
  uint64_t low;
  std::memcpy(&low, &shifted, sizeof low);
  const uint64_t bits = (low + 1023 - (uint64_t{1} << 51)) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return tiny ? 0.0 : p * scale;
}

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
