// The value checks of one public call in one pass over its CPU tensors (structtorch._checks): NaN
// and +inf potentials, lengths outside [0, T], labels outside [0, N) within each length, results
// that are not finite. It only answers which check failed first; Python then names the argument and
// the index with the same errors as its own checks. A few microseconds for a small call, where the
// same checks as PyTorch operators cost one operator (and one host read) each.
#include "api.h"
#include "common.h"

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Modes of a float check: kValues refuses NaN and +inf (-inf is allowed), kNaN refuses NaN only,
// kFinite refuses every non-finite entry.
enum Mode : int64_t { kValues = 0, kNaN = 1, kFinite = 2 };

template <typename T>
bool has_bad(const T* x, int64_t n, int64_t mode) {
  bool bad = false;
  if (mode == kValues) {
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < n; ++i) bad |= !(static_cast<double>(x[i]) < kInf);  // NaN fails <
  } else if (mode == kNaN) {
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < n; ++i) bad |= x[i] != x[i];
  } else {
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < n; ++i) bad |= !(std::abs(static_cast<double>(x[i])) < kInf);
  }
  return bad;
}

bool float_bad(const at::Tensor& x, int64_t mode) {
  TORCH_CHECK(x.device().is_cpu(), "first_bad: tensors must be on the CPU");
  TORCH_CHECK(mode >= kValues && mode <= kFinite, "first_bad: unknown mode ", mode);
  if (x.numel() == 0) return false;
  const at::Tensor c = x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble
                           ? x.contiguous()
                           : x.to(at::kDouble).contiguous();
  bool bad = false;
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "first_bad", [&] {
    bad = has_bad(c.data_ptr<scalar_t>(), c.numel(), mode);
  });
  return bad;
}

// Whether a length lies outside [0, T], or a label inside its row's length outside [0, N).
bool lengths_bad(const at::Tensor& lengths, int64_t T) {
  const at::Tensor len = lengths.to(at::kLong).contiguous();
  const int64_t* l = len.data_ptr<int64_t>();
  for (int64_t b = 0; b < len.numel(); ++b)
    if (l[b] < 0 || l[b] > T) return true;
  return false;
}

bool labels_bad(const at::Tensor& labels, const std::optional<at::Tensor>& lengths, int64_t N) {
  TORCH_CHECK(labels.dim() == 2, "first_bad: labels must be (B, T)");
  const at::Tensor y = labels.to(at::kLong).contiguous();
  const int64_t B = y.size(0), T = y.size(1);
  at::Tensor len;
  if (lengths.has_value()) {
    len = lengths->to(at::kLong).contiguous();
    TORCH_CHECK(len.numel() == B, "first_bad: lengths must have one entry per row of labels");
  }
  const int64_t* yp = y.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = len.defined() ? std::clamp<int64_t>(len.data_ptr<int64_t>()[b], 0, T) : T;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t v = yp[b * T + t];
      if (v < 0 || v >= N) return true;
    }
  }
  return false;
}

}  // namespace

namespace structtorch {

// -1 when every check passes; else i for the first bad xs[i] (checked by modes[i]), len(xs) for
// lengths outside [0, T], len(xs) + 1 for labels outside [0, N) within the lengths.
int64_t first_bad(at::TensorList xs, at::IntArrayRef modes, const std::optional<at::Tensor>& lengths, int64_t T,
                  const std::optional<at::Tensor>& labels, int64_t N) {
  TORCH_CHECK(xs.size() == modes.size(), "first_bad: one mode per tensor");
  const int64_t n = static_cast<int64_t>(xs.size());
  for (int64_t i = 0; i < n; ++i)
    if (float_bad(xs[i], modes[i])) return i;
  if (lengths.has_value() && lengths_bad(*lengths, T)) return n;
  if (labels.has_value() && labels_bad(*labels, lengths, N)) return n + 1;
  return -1;
}

}  // namespace structtorch

