// Compiled semi-Markov Viterbi (see structtorch/semimarkov.py for the model). One sequence per
// task of at::parallel_for, double accumulators, O(T S N + T N^2) time and O(T N) memory per
// sequence: segment content sums come as prefix sums C (B, T+1, N) in double, and forbidden (-inf)
// content as last_forbidden (B, T+1, N), the last -inf position before each segment end (or -1),
// which caps the segment length instead of testing every candidate.
#include "common.h"

namespace {

using structtorch::kNegInf;

template <typename T>
struct SemiInputs {
  const double* C;          // (T+1, N)
  const int64_t* forb;      // (T+1, N)
  const T* length;          // (S, N)
  const T* boundary;        // (T, N)
  const T* segment;         // (T, S, N) or nullptr
  const T* trans;           // (N, N)
  const T* start;           // (N)
  const T* end;             // (N)
};

// Ties: the shortest last segment, then the smallest previous label (as the PyTorch reference).
template <typename T>
double semimarkov_one(const SemiInputs<T>& in, int64_t len, int64_t S, int64_t n, int64_t* labels,
                      bool* starts) {
  if (len == 0) return 0.0;
  const int64_t rows = len + 1;
  std::vector<double> alpha(rows * n, kNegInf), inc(rows * n, kNegInf);
  std::vector<int32_t> arg_d(rows * n, 0), arg_m(rows * n, 0);
  for (int64_t j = 0; j < n; ++j) inc[j] = static_cast<double>(in.start[j]);
  for (int64_t e = 1; e <= len; ++e) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t dmax = std::min(S, e - (in.forb[e * n + j] + 1));
      double best = kNegInf;
      int32_t arg = 0;
      for (int64_t d = 1; d <= dmax; ++d) {
        const int64_t s = e - d;
        double v = inc[s * n + j] - in.C[s * n + j] + static_cast<double>(in.length[(d - 1) * n + j]);
        if (in.segment) v += static_cast<double>(in.segment[((e - 1) * S + d - 1) * n + j]);
        if (v > best) {
          best = v;
          arg = static_cast<int32_t>(d);
        }
      }
      if (best > kNegInf)
        alpha[e * n + j] = best + in.C[e * n + j] + static_cast<double>(in.boundary[(e - 1) * n + j]);
      arg_d[e * n + j] = arg;
    }
    if (e == len) break;
    for (int64_t j = 0; j < n; ++j) {
      double best = kNegInf;
      int32_t arg = 0;
      for (int64_t m = 0; m < n; ++m) {
        const double v = alpha[e * n + m] + static_cast<double>(in.trans[m * n + j]);
        if (v > best) {
          best = v;
          arg = static_cast<int32_t>(m);
        }
      }
      inc[e * n + j] = best;
      arg_m[e * n + j] = arg;
    }
  }
  double best = kNegInf;
  int64_t label = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double v = alpha[len * n + j] + static_cast<double>(in.end[j]);
    if (v > best) {
      best = v;
      label = j;
    }
  }
  if (best == kNegInf) return best;
  for (int64_t e = len; e > 0;) {
    const int64_t s = e - arg_d[e * n + label];
    std::fill(labels + s, labels + e, label);
    starts[s] = true;
    if (s > 0) label = arg_m[s * n + label];
    e = s;
  }
  return best;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> semimarkov_viterbi_forward(
    const at::Tensor& C, const at::Tensor& forb, const at::Tensor& length, const at::Tensor& boundary,
    const at::Tensor& segment, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths) {
  const int64_t B = boundary.size(0), T = boundary.size(1), N = boundary.size(2), S = length.size(1);
  const bool has_segment = segment.numel() > 0;
  auto best = at::empty({B}, C.options());
  auto labels = at::full({B, T}, -1, lengths.options());
  auto starts = at::zeros({B, T}, lengths.options().dtype(at::kBool));
  const int64_t* len = lengths.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(boundary.scalar_type(), "semimarkov_viterbi_forward", [&] {
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const SemiInputs<scalar_t> in{
            C.data_ptr<double>() + b * (T + 1) * N,
            forb.data_ptr<int64_t>() + b * (T + 1) * N,
            length.data_ptr<scalar_t>() + b * S * N,
            boundary.data_ptr<scalar_t>() + b * T * N,
            has_segment ? segment.data_ptr<scalar_t>() + b * T * S * N : nullptr,
            trans.data_ptr<scalar_t>(),
            start.data_ptr<scalar_t>() + b * N,
            end.data_ptr<scalar_t>() + b * N};
        best.data_ptr<double>()[b] = semimarkov_one(in, len[b], S, N, labels.data_ptr<int64_t>() + b * T,
                                                    starts.data_ptr<bool>() + b * T);
      }
    });
  });
  return {best, labels, starts};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(structtorch_chain, m) {
  m.def("semimarkov_viterbi_forward(Tensor C, Tensor forb, Tensor length, Tensor boundary, Tensor segment, Tensor trans, Tensor start, Tensor end, Tensor lengths) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(structtorch_chain, CPU, m) {
  m.impl("semimarkov_viterbi_forward", &semimarkov_viterbi_forward);
}
