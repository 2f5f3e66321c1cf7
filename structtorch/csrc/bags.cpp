// Sums of weight rows over bags of feature ids (the unary scores of SparseFeaturePotentials) and
// the weights' dense gradient, without sorting the ids (nn.EmbeddingBag's backward sorts all of
// them on every call). ids (R, K) int64 hold feature ids in [0, F) or the padding id -1;
// values (R, K), optional, scale each id.
//   forward:  out[r, :] = sum_k values[r, k] * weight[ids[r, k], :]          rows split over threads
//   backward: grad[f, :] = sum_{(r, k): ids[r, k] = f} values[r, k] * g[r, :]
// The backward splits the features into one contiguous range per thread; each thread scans all
// ids and adds only those in its range, so no two threads write one row and nothing is sorted.
#include "common.h"

namespace {

using structtorch::Check;

// x (rows, N) float32 or float64 (``name``), ids (R, K) int64 and values empty or (R, K) of x's
// dtype; returns x's dtype. The ids' values are checked where they are read (one comparison each).
at::ScalarType check_inputs(const char* op, const at::Tensor& ids, const at::Tensor& values, const at::Tensor& x,
                            const char* name) {
  const Check c{op};
  TORCH_CHECK(x.dim() == 2, op, ": ", name, " must be 2-D");
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble, op, ": ", name, " must be float32 or float64");
  c.tensor(x, name, dtype, {x.size(0), x.size(1)});
  TORCH_CHECK(ids.dim() == 2, op, ": ids must be (R, K)");
  c.tensor(ids, "ids", at::kLong, {ids.size(0), ids.size(1)});
  if (values.numel()) c.tensor(values, "values", dtype, {ids.size(0), ids.size(1)});
  return dtype;
}

[[noreturn]] void bad_id(const char* op, int64_t f, int64_t F) {
  TORCH_CHECK(false, op, ": ids must lie in [-1, ", F, "), found ", f);
}

// y[j] += s * x[j], j < n (outside the dispatch macros: a pragma cannot sit in a macro argument)
template <typename T>
inline void axpy(T s, const T* x, T* y, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] += s * x[j];
}

template <typename T>
const T* values_or_null(const at::Tensor& values) {  // checked by the caller
  return values.numel() ? values.data_ptr<T>() : nullptr;
}

at::Tensor bag_sum_forward(const at::Tensor& ids, const at::Tensor& values, const at::Tensor& weight) {
  const char* op = "bag_sum_forward";
  const auto dtype = check_inputs(op, ids, values, weight, "weight");
  const int64_t F = weight.size(0), N = weight.size(1);
  const int64_t R = ids.size(0), K = ids.size(1);
  auto out = at::empty({R, N}, weight.options());
  AT_DISPATCH_FLOATING_TYPES(dtype, "bag_sum_forward", [&] {
    const scalar_t* w = weight.data_ptr<scalar_t>();
    const scalar_t* v = values_or_null<scalar_t>(values);
    const int64_t* id = ids.data_ptr<int64_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, R, 1024, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        scalar_t* row = o + r * N;
        std::fill(row, row + N, scalar_t(0));
        const int64_t* ids_r = id + r * K;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t f = ids_r[k];
          if (static_cast<uint64_t>(f) >= static_cast<uint64_t>(F)) {  // negative or >= F
            if (f == -1) continue;
            bad_id(op, f, F);
          }
          axpy(v ? v[r * K + k] : scalar_t(1), w + f * N, row, N);
        }
      }
    });
  });
  return out;
}

at::Tensor bag_sum_backward(const at::Tensor& ids, const at::Tensor& values, const at::Tensor& grad, int64_t F) {
  const char* op = "bag_sum_backward";
  const auto dtype = check_inputs(op, ids, values, grad, "grad");
  const int64_t R = grad.size(0), N = grad.size(1);
  TORCH_CHECK(F >= 0, op, ": F must be >= 0");
  TORCH_CHECK(ids.size(0) == R, op, ": ids must have one row per row of grad");
  const int64_t K = ids.size(1);
  auto out = at::zeros({F, N}, grad.options());
  AT_DISPATCH_FLOATING_TYPES(dtype, "bag_sum_backward", [&] {
    const scalar_t* g = grad.data_ptr<scalar_t>();
    const scalar_t* v = values_or_null<scalar_t>(values);
    const int64_t* id = ids.data_ptr<int64_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), F));
    at::parallel_for(0, parts, 1, [&](int64_t p_lo, int64_t p_hi) {
      const int64_t f_lo = F * p_lo / parts, f_hi = F * p_hi / parts;  // this task's features
      for (int64_t r = 0; r < R; ++r) {
        const scalar_t* gr = g + r * N;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t f = id[r * K + k];
          if (f < f_lo || f >= f_hi) {  // another task's feature, or padding
            if (f < -1 || f >= F) bad_id(op, f, F);
            continue;
          }
          axpy(v ? v[r * K + k] : scalar_t(1), gr, o + f * N, N);
        }
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(structtorch_chain, m) {
  m.def("bag_sum_forward(Tensor ids, Tensor values, Tensor weight) -> Tensor");
  m.def("bag_sum_backward(Tensor ids, Tensor values, Tensor grad, int F) -> Tensor");
}

TORCH_LIBRARY_IMPL(structtorch_chain, CPU, m) {
  m.impl("bag_sum_forward", &bag_sum_forward);
  m.impl("bag_sum_backward", &bag_sum_backward);
}
