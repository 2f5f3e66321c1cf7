// Compiled semi-Markov Viterbi and log-partition (see structtorch/semimarkov.py for the model).
// One sequence per task of at::parallel_for, double accumulators, O(T S N + T N^2) time and O(T N)
// memory per sequence. Segment content sums are accumulated as the segment grows (never as a
// difference of prefix sums, which a single huge-magnitude entry would ruin), and forbidden (-inf)
// content comes as last_forbidden (B, T+1, N), the last -inf position before each segment end
// (or -1), which caps the segment length instead of testing every candidate. Viterbi also takes
// segment-mean PLiF features: PLiF_n(mean of tracks[., n] over the segment), the mean accumulated
// as the segment grows like the content sum; so does the log-partition, forward and backward.
#include "common.h"

namespace {

using structtorch::kNegInf;
using structtorch::exp_nonpositive;

template <typename T>
struct SemiInputs {
  const T* content;          // (T, N)
  const int64_t* forb;      // (T+1, N)
  const T* length;          // (S, N)
  const T* boundary;        // (T, N)
  const T* segment;         // (T, S, N) or nullptr
  const T* trans;           // (N, N)
  const T* start;           // (N)
  const T* end;             // (N)
  const T* tracks = nullptr;  // (T, N) segment-mean PLiF inputs, or nullptr
  const T* plif = nullptr;    // (N, P) PLiF ordinates on P evenly spaced points in [low, high]
  int64_t P = 0;
  double low = 0.0, high = 1.0;

  // The left support point of x clamped to [low, high], and the fraction toward the next one
  int64_t plif_left(double x, double* frac) const {
    const double pos = (std::min(std::max(x, low), high) - low) * (static_cast<double>(P - 1) / (high - low));
    // a NaN x (NaN tracks when the Python checks are off) gives a NaN fraction at index 0: the
    // value and gradients come out NaN, and nothing is read out of bounds
    const int64_t left = pos >= 0.0 ? std::min<int64_t>(static_cast<int64_t>(pos), P - 2) : 0;
    *frac = pos - static_cast<double>(left);
    return left;
  }
  // PLiF_j(x): linear interpolation between the support points, clamped outside [low, high]
  double plif_value(int64_t j, double x) const {
    double frac;
    const int64_t left = plif_left(x, &frac);
    const double y0 = static_cast<double>(plif[j * P + left]), y1 = static_cast<double>(plif[j * P + left + 1]);
    return y0 + frac * (y1 - y0);
  }
  // Adds mu * dPLiF_j(x)/d(ordinates) to grad (P) and returns mu * dPLiF_j(x)/dx (0 outside
  // [low, high], where the clamp holds x; the PyTorch reference's clamp passes both ends)
  double plif_backward(int64_t j, double x, double mu, double* grad) const {
    double frac;
    const int64_t left = plif_left(x, &frac);
    grad[left] += mu * (1.0 - frac);
    grad[left + 1] += mu * frac;
    if (!(x >= low && x <= high)) return 0.0;
    const double y0 = static_cast<double>(plif[j * P + left]), y1 = static_cast<double>(plif[j * P + left + 1]);
    return mu * (y1 - y0) * (static_cast<double>(P - 1) / (high - low));
  }
  // Points the PLiF fields at sequence b of tracks (B, T, N) and the shared ordinates (N, P).
  void attach_plif(const at::Tensor& all_tracks, const at::Tensor& ordinates, double lo, double hi, int64_t b) {
    if (all_tracks.numel() == 0) return;
    const int64_t stride = all_tracks.size(1) * all_tracks.size(2);
    tracks = all_tracks.data_ptr<T>() + b * stride;
    plif = ordinates.data_ptr<T>();
    P = ordinates.size(1);
    low = lo;
    high = hi;
  }
};

// The batched input tensors of every kernel below; row(b) slices out sequence b.
struct SemiBatch {
  const at::Tensor &content, &forb, &length, &boundary, &segment, &trans, &start, &end;
  int64_t B() const { return boundary.size(0); }
  int64_t T() const { return boundary.size(1); }
  int64_t N() const { return boundary.size(2); }
  int64_t S() const { return length.size(1); }
  bool has_segment() const { return segment.numel() > 0; }

  // Checks every shape and index the kernels read: forb[b][e][j] in [-1, e), lengths in [0, T].
  void check(const char* op, const at::Tensor& lengths) const {
    const structtorch::Check c{op};
    TORCH_CHECK(boundary.dim() == 3 && length.dim() == 3, op, ": boundary must be (B, T, N), length (B, S, N)");
    const int64_t B_ = B(), T_ = T(), N_ = N(), S_ = S();
    const auto dtype = boundary.scalar_type();
    TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble, op, ": potentials must be float32 or float64");
    c.tensor(content, "content", dtype, {B_, T_, N_});
    c.tensor(boundary, "boundary", dtype, {B_, T_, N_});
    c.tensor(length, "length", dtype, {B_, S_, N_});
    if (has_segment()) c.tensor(segment, "segment", dtype, {B_, T_, S_, N_});
    c.tensor(trans, "trans", dtype, {N_, N_});
    c.tensor(start, "start", dtype, {B_, N_});
    c.tensor(end, "end", dtype, {B_, N_});
    c.lengths(lengths, B_, T_);
    c.tensor(forb, "forb", at::kLong, {B_, T_ + 1, N_});
    const int64_t* f = forb.data_ptr<int64_t>();
    for (int64_t i = 0; i < B_ * (T_ + 1) * N_; ++i) {
      const int64_t e = (i / N_) % (T_ + 1);
      TORCH_CHECK(f[i] >= -1 && f[i] < e, op, ": forb[b, e, j] must lie in [-1, e)");
    }
  }
  template <typename U>
  SemiInputs<U> row(int64_t b) const {
    const int64_t T_ = T(), N_ = N(), S_ = S();
    return {content.data_ptr<U>() + b * T_ * N_,   forb.data_ptr<int64_t>() + b * (T_ + 1) * N_,
            length.data_ptr<U>() + b * S_ * N_,       boundary.data_ptr<U>() + b * T_ * N_,
            has_segment() ? segment.data_ptr<U>() + b * T_ * S_ * N_ : nullptr,
            trans.data_ptr<U>(),                      start.data_ptr<U>() + b * N_,
            end.data_ptr<U>() + b * N_};
  }
};

// Ties: the shortest last segment, then the smallest previous label, as the PyTorch reference (which
// sums the terms in another order, so fractional scores may round apart and break exact ties otherwise).
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
      // no segment of label j ends at e where its boundary score forbids it (e.g. no splice site)
      const int64_t dmax = in.boundary[(e - 1) * n + j] == kNegInf ? 0 : std::min(S, e - (in.forb[e * n + j] + 1));
      double best = kNegInf, sum = 0.0, track = 0.0;
      int32_t arg = 0;
      for (int64_t d = 1; d <= dmax; ++d) {
        const int64_t s = e - d;
        sum += static_cast<double>(in.content[s * n + j]);  // content of [s, e)
        double v = inc[s * n + j] + sum + static_cast<double>(in.length[(d - 1) * n + j]);
        if (in.segment) v += static_cast<double>(in.segment[((e - 1) * S + d - 1) * n + j]);
        if (in.tracks) {
          track += static_cast<double>(in.tracks[s * n + j]);
          v += in.plif_value(j, track / static_cast<double>(d));
        }
        if (v > best) {
          best = v;
          arg = static_cast<int32_t>(d);
        }
      }
      if (best > kNegInf) alpha[e * n + j] = best + static_cast<double>(in.boundary[(e - 1) * n + j]);
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

// Segment-mean PLiF inputs: tracks (B, T, N), ordinates (N, P >= 2) on a support whose spacing
// (high - low) / (P - 1) is a positive normal number, so interpolation indices are never NaN.
void check_plif(const char* op, const at::Tensor& tracks, const at::Tensor& plif, double low, double high, int64_t B,
                int64_t T, int64_t N, at::ScalarType dtype) {
  if (tracks.numel() == 0) return;  // no segment PLiF
  const structtorch::Check c{op};
  c.tensor(tracks, "tracks", dtype, {B, T, N});
  TORCH_CHECK(plif.dim() == 2 && plif.size(1) >= 2, op, ": plif must be (N, P >= 2)");
  c.tensor(plif, "plif", dtype, {N, plif.size(1)});
  const double step = (high - low) / static_cast<double>(plif.size(1) - 1);
  TORCH_CHECK(std::isfinite(low) && std::isfinite(high) && std::isnormal(step) && step > 0.0 &&
                  std::isfinite(static_cast<double>(plif.size(1) - 1) / (high - low)),
              op, ": the PLiF support [", low, ", ", high, "] must be finite with a normal, positive spacing");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> semimarkov_viterbi_forward(
    const at::Tensor& content, const at::Tensor& forb, const at::Tensor& length, const at::Tensor& boundary,
    const at::Tensor& segment, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const at::Tensor& tracks, const at::Tensor& plif, double low, double high) {
  const SemiBatch x{content, forb, length, boundary, segment, trans, start, end};
  x.check("semimarkov_viterbi_forward", lengths);
  const int64_t B = x.B(), T = x.T(), N = x.N(), S = x.S();
  check_plif("semimarkov_viterbi_forward", tracks, plif, low, high, B, T, N, content.scalar_type());
  auto best = at::empty({B}, content.options().dtype(at::kDouble));
  auto labels = at::full({B, T}, -1, lengths.options());
  auto starts = at::zeros({B, T}, lengths.options().dtype(at::kBool));
  const int64_t* len = lengths.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(boundary.scalar_type(), "semimarkov_viterbi_forward", [&] {
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        auto in = x.row<scalar_t>(b);
        in.attach_plif(tracks, plif, low, high, b);
        best.data_ptr<double>()[b] = semimarkov_one(in, len[b], S, N, labels.data_ptr<int64_t>() + b * T,
                                                    starts.data_ptr<bool>() + b * T);
      }
    });
  });
  return {best, labels, starts};
}

// ---------------------------------------------------------------------------------------------
// Log-partition. Forward: alpha[e][n] (segmentations of [0, e) whose last segment, label n, ends
// at e) and inc[s][n] (ways to begin a segment of label n at s). Backward: gamma[e][n] (ways to
// complete after a segment of label n ending at e) and delta[s][n] (ways to cover [s, L) starting
// with a segment of label n), then every segment's marginal
//   mu(s, e, n) = exp(inc[s][n] + score(s, e, n) + gamma[e][n] - logZ),
// spread onto the inputs (content through a difference array over positions).

struct OnlineLse {  // log-sum-exp in one pass: one exp per term
  double m = kNegInf, s = 0.0;
  void add(double v) {
    if (v == kNegInf) return;
    if (v <= m) {
      s += std::exp(v - m);
    } else {
      s = s * std::exp(m - v) + 1.0;
      m = v;
    }
  }
  double value() const { return m == kNegInf ? kNegInf : m + std::log(s); }
};

// Score of segment [s, e) with label j given the content sum of its positions.
template <typename T>
double segment_score(const SemiInputs<T>& in, int64_t S, int64_t n, double content_sum, int64_t s, int64_t e,
                     int64_t j) {
  const int64_t d = e - s;
  double v = content_sum + static_cast<double>(in.length[(d - 1) * n + j]) +
             static_cast<double>(in.boundary[(e - 1) * n + j]);
  if (in.segment) v += static_cast<double>(in.segment[((e - 1) * S + d - 1) * n + j]);
  return v;
}

template <typename T>
double semimarkov_logz_one(const SemiInputs<T>& in, int64_t len, int64_t S, int64_t n, double* alpha,
                           double* inc) {
  if (len == 0) return 0.0;
  std::vector<double> term(S);
  for (int64_t j = 0; j < n; ++j) inc[j] = static_cast<double>(in.start[j]);
  for (int64_t e = 1; e <= len; ++e) {
    for (int64_t j = 0; j < n; ++j) {  // two-pass log-sum-exp over the segment lengths
      const int64_t dmax = in.boundary[(e - 1) * n + j] == kNegInf ? 0 : std::min(S, e - (in.forb[e * n + j] + 1));
      double top = kNegInf, sum = 0.0, track = 0.0;
      for (int64_t d = 1; d <= dmax; ++d) {
        sum += static_cast<double>(in.content[(e - d) * n + j]);
        term[d - 1] = inc[(e - d) * n + j] + segment_score(in, S, n, sum, e - d, e, j);
        if (in.tracks) {
          track += static_cast<double>(in.tracks[(e - d) * n + j]);
          term[d - 1] += in.plif_value(j, track / static_cast<double>(d));
        }
        top = std::max(top, term[d - 1]);
      }
      double total = 0.0;
      if (top > kNegInf) {
        const double* t = term.data();
#pragma omp simd reduction(+ : total)
        for (int64_t d = 0; d < dmax; ++d) total += exp_nonpositive(t[d] - top);
      }
      alpha[e * n + j] = top == kNegInf ? kNegInf : top + std::log(total);
    }
    for (int64_t j = 0; j < n; ++j) {
      OnlineLse acc;
      for (int64_t m = 0; m < n; ++m) acc.add(alpha[e * n + m] + static_cast<double>(in.trans[m * n + j]));
      inc[e * n + j] = acc.value();
    }
  }
  OnlineLse acc;
  for (int64_t j = 0; j < n; ++j) acc.add(alpha[len * n + j] + static_cast<double>(in.end[j]));
  return acc.value();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> semimarkov_logz_forward(
    const at::Tensor& content, const at::Tensor& forb, const at::Tensor& length, const at::Tensor& boundary,
    const at::Tensor& segment, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const at::Tensor& tracks, const at::Tensor& plif, double low, double high) {
  const SemiBatch x{content, forb, length, boundary, segment, trans, start, end};
  x.check("semimarkov_logz_forward", lengths);
  const int64_t B = x.B(), T = x.T(), N = x.N(), S = x.S();
  check_plif("semimarkov_logz_forward", tracks, plif, low, high, B, T, N, content.scalar_type());
  auto logz = at::empty({B}, content.options().dtype(at::kDouble));
  auto alpha = at::full({B, T + 1, N}, kNegInf, content.options().dtype(at::kDouble));
  auto inc = at::full({B, T + 1, N}, kNegInf, content.options().dtype(at::kDouble));
  const int64_t* len = lengths.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(boundary.scalar_type(), "semimarkov_logz_forward", [&] {
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        auto in = x.row<scalar_t>(b);
        in.attach_plif(tracks, plif, low, high, b);
        logz.data_ptr<double>()[b] = semimarkov_logz_one(in, len[b], S, N, alpha.data_ptr<double>() + b * (T + 1) * N,
                                                         inc.data_ptr<double>() + b * (T + 1) * N);
      }
    });
  });
  return {logz, alpha, inc};
}

struct SemiGrads {
  double* content;   // (T, N)
  double* length;    // (S, N)
  double* boundary;  // (T, N)
  double* segment;   // (T, S, N) or nullptr
  double* trans;     // (N, N)
  double* start;     // (N)
  double* end;       // (N)
  double* tracks = nullptr;  // (T, N) with a segment PLiF
  double* plif = nullptr;    // (N, P)
};

template <typename T>
void semimarkov_backward_one(const SemiInputs<T>& in, double g, double logz, int64_t len, int64_t S,
                             int64_t n, const double* alpha, const double* inc, SemiGrads out) {
  if (len == 0 || logz == kNegInf || g == 0.0) return;
  std::vector<double> gamma((len + 1) * n, kNegInf), delta((len + 1) * n, kNegInf), diff((len + 1) * n, 0.0);
  std::vector<double> term(S), mean(in.tracks ? S : 0);
  std::vector<double> track_diff(in.tracks ? (len + 1) * n : 0, 0.0);
  for (int64_t j = 0; j < n; ++j) gamma[len * n + j] = static_cast<double>(in.end[j]);
  for (int64_t s = len - 1; s >= 0; --s) {
    for (int64_t j = 0; j < n; ++j) {
      // the segments [s, e) of label j: first their scores and the largest, then one exp each,
      // shared by delta (a two-pass log-sum-exp) and the marginals
      //   mu = exp(inc[s] + term - logZ) = exp(term - top) * exp(inc[s] + top - logZ),
      // whose second factor is the largest marginal, so it cannot overflow
      int64_t count = 0;
      double top = kNegInf, sum = 0.0, track = 0.0;
      for (int64_t e = s + 1; e <= std::min(len, s + S); ++e, ++count) {
        if (in.forb[e * n + j] >= s) break;  // a forbidden position inside [s, e): longer ones too
        sum += static_cast<double>(in.content[(e - 1) * n + j]);
        term[count] = segment_score(in, S, n, sum, s, e, j) + gamma[e * n + j];
        if (in.tracks) {
          track += static_cast<double>(in.tracks[(e - 1) * n + j]);
          mean[count] = track / static_cast<double>(count + 1);
          term[count] += in.plif_value(j, mean[count]);
        }
        top = std::max(top, term[count]);
      }
      if (top == kNegInf) continue;
      const double into = inc[s * n + j];
      const double scale = into == kNegInf ? 0.0 : g * std::exp(into + top - logz);
      double total = 0.0;
      double* t = term.data();
#pragma omp simd reduction(+ : total)
      for (int64_t d = 0; d < count; ++d) {  // the exps first, vectorized, in place
        t[d] = exp_nonpositive(t[d] - top);
        total += t[d];
      }
      for (int64_t d = 1; d <= count; ++d) {
        const double mu = scale * t[d - 1];
        if (mu == 0.0) continue;
        const int64_t e = s + d;
        diff[s * n + j] += mu;
        diff[e * n + j] -= mu;
        out.length[(d - 1) * n + j] += mu;
        out.boundary[(e - 1) * n + j] += mu;
        if (out.segment) out.segment[((e - 1) * S + d - 1) * n + j] = mu;
        if (in.tracks) {  // d mean / d tracks[t] = 1 / d for t in [s, e): a difference array too
          const double dx = in.plif_backward(j, mean[d - 1], mu, out.plif + j * in.P) / static_cast<double>(d);
          track_diff[s * n + j] += dx;
          track_diff[e * n + j] -= dx;
        }
      }
      delta[s * n + j] = top + std::log(total);
    }
    if (s == 0) break;
    for (int64_t j = 0; j < n; ++j) {
      OnlineLse acc;
      for (int64_t m = 0; m < n; ++m) acc.add(static_cast<double>(in.trans[j * n + m]) + delta[s * n + m]);
      gamma[s * n + j] = acc.value();
    }
  }
  std::vector<double> run(n, 0.0), track_run(n, 0.0);
  for (int64_t t = 0; t < len; ++t)
    for (int64_t j = 0; j < n; ++j) out.content[t * n + j] = (run[j] += diff[t * n + j]);
  if (in.tracks)
    for (int64_t t = 0; t < len; ++t)
      for (int64_t j = 0; j < n; ++j) out.tracks[t * n + j] = (track_run[j] += track_diff[t * n + j]);
  for (int64_t s = 1; s < len; ++s)
    for (int64_t m = 0; m < n; ++m)
      for (int64_t j = 0; j < n; ++j)
        out.trans[m * n + j] +=
            g * std::exp(alpha[s * n + m] + static_cast<double>(in.trans[m * n + j]) + delta[s * n + j] - logz);
  for (int64_t j = 0; j < n; ++j) {
    out.start[j] = g * std::exp(static_cast<double>(in.start[j]) + delta[j] - logz);
    out.end[j] = g * std::exp(alpha[len * n + j] + static_cast<double>(in.end[j]) - logz);
  }
}

std::vector<at::Tensor> semimarkov_logz_backward(
    const at::Tensor& grad, const at::Tensor& logz, const at::Tensor& alpha, const at::Tensor& inc,
    const at::Tensor& content, const at::Tensor& forb, const at::Tensor& length, const at::Tensor& boundary,
    const at::Tensor& segment, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const at::Tensor& tracks, const at::Tensor& plif, double low, double high) {
  const SemiBatch x{content, forb, length, boundary, segment, trans, start, end};
  x.check("semimarkov_logz_backward", lengths);
  const int64_t B = x.B(), T = x.T(), N = x.N(), S = x.S();
  check_plif("semimarkov_logz_backward", tracks, plif, low, high, B, T, N, content.scalar_type());
  const bool has_plif = tracks.numel() > 0;
  const structtorch::Check c{"semimarkov_logz_backward"};
  c.tensor(grad, "grad", at::kDouble, {B});
  c.tensor(logz, "logz", at::kDouble, {B});
  c.tensor(alpha, "alpha", at::kDouble, {B, T + 1, N});
  c.tensor(inc, "inc", at::kDouble, {B, T + 1, N});
  const auto dopt = content.options().dtype(at::kDouble);
  auto g_content = at::zeros({B, T, N}, dopt), g_length = at::zeros({B, S, N}, dopt);
  auto g_boundary = at::zeros({B, T, N}, dopt);
  const bool has_segment = x.has_segment();
  auto g_segment = has_segment ? at::zeros({B, T, S, N}, dopt) : at::zeros({0}, dopt);
  auto g_trans = at::zeros({B, N, N}, dopt), g_start = at::zeros({B, N}, dopt), g_end = at::zeros({B, N}, dopt);
  auto g_tracks = has_plif ? at::zeros({B, T, N}, dopt) : at::zeros({0}, dopt);
  auto g_plif = has_plif ? at::zeros({B, N, plif.size(1)}, dopt) : at::zeros({0}, dopt);  // summed by the caller
  const int64_t* len = lengths.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(boundary.scalar_type(), "semimarkov_logz_backward", [&] {
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        auto in = x.row<scalar_t>(b);
        in.attach_plif(tracks, plif, low, high, b);
        SemiGrads out{g_content.data_ptr<double>() + b * T * N, g_length.data_ptr<double>() + b * S * N,
                      g_boundary.data_ptr<double>() + b * T * N,
                      has_segment ? g_segment.data_ptr<double>() + b * T * S * N : nullptr,
                      g_trans.data_ptr<double>() + b * N * N, g_start.data_ptr<double>() + b * N,
                      g_end.data_ptr<double>() + b * N};
        if (has_plif) {
          out.tracks = g_tracks.data_ptr<double>() + b * T * N;
          out.plif = g_plif.data_ptr<double>() + b * N * plif.size(1);
        }
        semimarkov_backward_one(in, grad.data_ptr<double>()[b], logz.data_ptr<double>()[b], len[b], S, N,
                                alpha.data_ptr<double>() + b * (T + 1) * N, inc.data_ptr<double>() + b * (T + 1) * N,
                                out);
      }
    });
  });
  return {g_content, g_length, g_boundary, g_segment, g_trans, g_start, g_end, g_tracks, g_plif};
}

// ---------------------------------------------------------------------------------------------
// Loss-augmented tables over segment ends (the count dimension of Bauer et al. 2014, Alg. 1, for
// segmentations): alpha[e][n][k] is the best score of a segmentation of [0, e) whose last segment,
// label n, ends at e and whose loss count is exactly k; inc[s][n][k] the best way to begin a
// segment of label n at s with count k. A segment [s, e) of label n adds the integer
//   c(s, e, n) = prefix[e][n] - prefix[s][n] + first[s][n] + (match if it is the target segment at s)
// (a position loss: prefix sums of its units; a boundary or segment loss: see lossaug/_torch.py),
// so each (e, n, d) is one shifted max-plus over k, vectorized. Only the counts reachable at each
// position are visited. Ties as the PyTorch reference: the shortest last segment, then the
// smallest previous label, then the smallest final label.

constexpr int64_t kCountLimit = int64_t(1) << 40;  // |prefix|, |first|, |match|: no overflow in c

struct SegmentCount {
  const int64_t* prefix;  // (T+1, N)
  const int64_t* first;   // (T+1, N)
  const int64_t* tend;    // (T+1): the end of the target segment starting at s, or -1
  const int64_t* tlabel;  // (T+1): its label
  int64_t match;
  int64_t operator()(int64_t s, int64_t e, int64_t j, int64_t n) const {
    const int64_t c = prefix[e * n + j] - prefix[s * n + j] + first[s * n + j];
    return tend[s] == e && tlabel[s] == j ? c + match : c;
  }
};

struct Reach {  // the counts k with a finite entry lie in [lo, hi] (lo > hi: none)
  int64_t lo, hi;
};

template <typename T>
void table_segments(const SemiInputs<T>& in, const SegmentCount& cnt, const double* inc, const Reach* reach,
                    int64_t e, int64_t S, int64_t n, int64_t K, double* alpha, int32_t* bp_d, Reach* out) {
  const int64_t K1 = K + 1;
  for (int64_t j = 0; j < n; ++j) {
    double* a = alpha + j * K1;
    int32_t* bd = bp_d + j * K1;
    std::fill(a, a + K1, kNegInf);
    std::fill(bd, bd + K1, int32_t(0));
    const int64_t dmax = in.boundary[(e - 1) * n + j] == kNegInf ? 0 : std::min(S, e - (in.forb[e * n + j] + 1));
    double sum = 0.0, track = 0.0;
    for (int64_t d = 1; d <= dmax; ++d) {
      const int64_t s = e - d;
      sum += static_cast<double>(in.content[s * n + j]);
      double v = segment_score(in, S, n, sum, s, e, j);
      if (in.tracks) {
        track += static_cast<double>(in.tracks[s * n + j]);
        v += in.plif_value(j, track / static_cast<double>(d));
      }
      const int64_t c = cnt(s, e, j, n);
      const int64_t lo = std::max<int64_t>(reach[s].lo + c, 0), hi = std::min<int64_t>(reach[s].hi + c, K);
      if (lo > hi || v == kNegInf) continue;
      const double* src = inc + (s * n + j) * K1 - c;  // src[k] = inc[s][j][k - c]
      const int32_t dd = static_cast<int32_t>(d);
#pragma omp simd
      for (int64_t k = lo; k <= hi; ++k) {
        const double cand = src[k] + v;
        const bool better = cand > a[k];  // strict: the shortest segment wins ties
        a[k] = better ? cand : a[k];
        bd[k] = better ? dd : bd[k];
      }
      out->lo = std::min(out->lo, lo);
      out->hi = std::max(out->hi, hi);
    }
  }
}

template <typename T>
void semimarkov_table_one(const SemiInputs<T>& in, const SegmentCount& cnt, int64_t len, int64_t S, int64_t n,
                          int64_t K, int64_t offset, double* best, int64_t* last, int32_t* bp_d, int32_t* bp_m) {
  const int64_t K1 = K + 1;
  std::fill(best, best + K1, kNegInf);
  std::fill(last, last + K1, int64_t(0));
  const int64_t k0 = std::min(std::max<int64_t>(offset, 0), K);
  if (len == 0) {
    best[k0] = 0.0;
    return;
  }
  std::vector<double> inc((len + 1) * n * K1, kNegInf), alpha(n * K1);
  std::vector<Reach> reach(len + 1, Reach{K1, -1});
  for (int64_t j = 0; j < n; ++j) inc[j * K1 + k0] = static_cast<double>(in.start[j]);
  reach[0] = Reach{k0, k0};
  Reach here{K1, -1};
  for (int64_t e = 1; e <= len; ++e) {
    here = Reach{K1, -1};
    table_segments(in, cnt, inc.data(), reach.data(), e, S, n, K, alpha.data(), bp_d + e * n * K1, &here);
    if (e == len) break;
    reach[e] = here;
    for (int64_t j = 0; j < n; ++j) {
      double* out = inc.data() + (e * n + j) * K1;
      int32_t* bm = bp_m + (e * n + j) * K1;
      for (int64_t m = 0; m < n; ++m) {
        const double a = static_cast<double>(in.trans[m * n + j]);
        if (a == kNegInf) continue;
        const double* am = alpha.data() + m * K1;
        const int32_t mm = static_cast<int32_t>(m);
#pragma omp simd
        for (int64_t k = here.lo; k <= here.hi; ++k) {
          const double cand = am[k] + a;
          const bool better = cand > out[k];  // strict: the smallest previous label wins ties
          out[k] = better ? cand : out[k];
          bm[k] = better ? mm : bm[k];
        }
      }
    }
  }
  for (int64_t k = here.lo; k <= here.hi; ++k)
    for (int64_t j = 0; j < n; ++j) {
      const double v = alpha[j * K1 + k] + static_cast<double>(in.end[j]);
      if (v > best[k]) {
        best[k] = v;
        last[k] = j;
      }
    }
}

// The count inputs of one batch: prefix and first (B, T+1, N), tend and tlabel (B, T+1) int64.
struct CountBatch {
  const at::Tensor &prefix, &first, &tend, &tlabel;
  int64_t match;
  void check(const char* op, int64_t B, int64_t T, int64_t N) const {
    const structtorch::Check c{op};
    c.tensor(prefix, "prefix", at::kLong, {B, T + 1, N});
    c.tensor(first, "first", at::kLong, {B, T + 1, N});
    c.tensor(tend, "tend", at::kLong, {B, T + 1});
    c.tensor(tlabel, "tlabel", at::kLong, {B, T + 1});
    TORCH_CHECK(std::abs(match) <= kCountLimit, op, ": |match| must be at most 2^40");
    for (const at::Tensor* x : {&prefix, &first}) {
      const int64_t* v = x->data_ptr<int64_t>();
      for (int64_t i = 0; i < x->numel(); ++i)
        TORCH_CHECK(v[i] >= -kCountLimit && v[i] <= kCountLimit, op, ": prefix and first must lie within +-2^40");
    }
  }
  SegmentCount row(int64_t b, int64_t T, int64_t N) const {
    return {prefix.data_ptr<int64_t>() + b * (T + 1) * N, first.data_ptr<int64_t>() + b * (T + 1) * N,
            tend.data_ptr<int64_t>() + b * (T + 1), tlabel.data_ptr<int64_t>() + b * (T + 1), match};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> semimarkov_table_forward(
    const at::Tensor& content, const at::Tensor& forb, const at::Tensor& length, const at::Tensor& boundary,
    const at::Tensor& segment, const at::Tensor& trans, const at::Tensor& start, const at::Tensor& end,
    const at::Tensor& lengths, const at::Tensor& tracks, const at::Tensor& plif, double low, double high,
    const at::Tensor& prefix, const at::Tensor& first, const at::Tensor& tend, const at::Tensor& tlabel,
    int64_t match, const at::Tensor& offset, int64_t K) {
  const char* op = "semimarkov_table_forward";
  const SemiBatch x{content, forb, length, boundary, segment, trans, start, end};
  x.check(op, lengths);
  const int64_t B = x.B(), T = x.T(), N = x.N(), S = x.S();
  check_plif(op, tracks, plif, low, high, B, T, N, content.scalar_type());
  const CountBatch counts{prefix, first, tend, tlabel, match};
  counts.check(op, B, T, N);
  const structtorch::Check c{op};
  c.tensor(offset, "offset", at::kLong, {B});
  TORCH_CHECK(K >= 0 && K < (int64_t(1) << 31), op, ": K must lie in [0, 2^31), got ", K);
  TORCH_CHECK(S < (int64_t(1) << 31) && N < (int64_t(1) << 31), op, ": S and N must be below 2^31");
  c.numel({B, T + 1, N, K + 1});
  auto best = at::empty({B, K + 1}, content.options().dtype(at::kDouble));
  auto last = at::empty({B, K + 1}, lengths.options());
  auto bp_d = at::zeros({B, T + 1, N, K + 1}, lengths.options().dtype(at::kInt));
  auto bp_m = at::zeros({B, T + 1, N, K + 1}, lengths.options().dtype(at::kInt));
  const int64_t* len = lengths.data_ptr<int64_t>();
  const int64_t* off = offset.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(boundary.scalar_type(), "semimarkov_table_forward", [&] {
    at::parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        auto in = x.row<scalar_t>(b);
        in.attach_plif(tracks, plif, low, high, b);
        const int64_t rows = b * (T + 1) * N * (K + 1);
        semimarkov_table_one(in, counts.row(b, T, N), len[b], S, N, K, off[b], best.data_ptr<double>() + b * (K + 1),
                             last.data_ptr<int64_t>() + b * (K + 1), bp_d.data_ptr<int32_t>() + rows,
                             bp_m.data_ptr<int32_t>() + rows);
      }
    });
  });
  return {best, last, bp_d, bp_m};
}

// The segmentation with count k[b] (none where k[b] < 0) from the tables' backpointers, encoded
// as label + N * (1 where a segment starts), -1 beyond each length.
at::Tensor semimarkov_table_backtrack(const at::Tensor& bp_d, const at::Tensor& bp_m, const at::Tensor& last,
                                      const at::Tensor& lengths, const at::Tensor& prefix, const at::Tensor& first,
                                      const at::Tensor& tend, const at::Tensor& tlabel, int64_t match,
                                      const at::Tensor& k) {
  const char* op = "semimarkov_table_backtrack";
  const structtorch::Check c{op};
  TORCH_CHECK(bp_d.dim() == 4, op, ": bp_d must be (B, T+1, N, K+1)");
  const int64_t B = bp_d.size(0), T = bp_d.size(1) - 1, N = bp_d.size(2), K1 = bp_d.size(3);
  TORCH_CHECK(T >= 0 && K1 >= 1, op, ": bp_d must be (B, T+1, N, K+1)");
  c.tensor(bp_d, "bp_d", at::kInt, {B, T + 1, N, K1});
  c.tensor(bp_m, "bp_m", at::kInt, {B, T + 1, N, K1});
  c.tensor(last, "last", at::kLong, {B, K1});
  c.lengths(lengths, B, T);
  c.tensor(k, "k", at::kLong, {B});
  const CountBatch counts{prefix, first, tend, tlabel, match};
  counts.check(op, B, T, N);
  auto out = at::full({B, T}, -1, lengths.options());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = lengths.data_ptr<int64_t>()[b];
    int64_t kk = k.data_ptr<int64_t>()[b];
    if (kk < 0 || len == 0) continue;
    TORCH_CHECK(kk < K1, op, ": k[", b, "] = ", kk, " exceeds K");
    const SegmentCount cnt = counts.row(b, T, N);
    const int32_t* bd = bp_d.data_ptr<int32_t>() + b * (T + 1) * N * K1;
    const int32_t* bm = bp_m.data_ptr<int32_t>() + b * (T + 1) * N * K1;
    int64_t* row = out.data_ptr<int64_t>() + b * T;
    int64_t label = last.data_ptr<int64_t>()[b * K1 + kk];
    TORCH_CHECK(label >= 0 && label < N, op, ": last holds a label outside [0, N)");
    for (int64_t e = len; e > 0;) {
      const int64_t d = bd[(e * N + label) * K1 + kk];
      TORCH_CHECK(d >= 1 && d <= e, op, ": bp_d holds an impossible segment length");
      const int64_t s = e - d;
      for (int64_t t = s; t < e; ++t) row[t] = label;
      row[s] += N;
      kk -= cnt(s, e, label, N);
      TORCH_CHECK(kk >= 0 && kk < K1, op, ": the counts do not match the tables");
      if (s > 0) {
        label = bm[(s * N + label) * K1 + kk];
        TORCH_CHECK(label >= 0 && label < N, op, ": bp_m holds a label outside [0, N)");
      }
      e = s;
    }
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(structtorch_chain, m) {
  m.def("semimarkov_viterbi_forward(Tensor content, Tensor forb, Tensor length, Tensor boundary, Tensor segment, Tensor trans, Tensor start, Tensor end, Tensor lengths, Tensor tracks, Tensor plif, float low, float high) -> (Tensor, Tensor, Tensor)");
  m.def("semimarkov_logz_forward(Tensor content, Tensor forb, Tensor length, Tensor boundary, Tensor segment, Tensor trans, Tensor start, Tensor end, Tensor lengths, Tensor tracks, Tensor plif, float low, float high) -> (Tensor, Tensor, Tensor)");
  m.def("semimarkov_table_forward(Tensor content, Tensor forb, Tensor length, Tensor boundary, Tensor segment, Tensor trans, Tensor start, Tensor end, Tensor lengths, Tensor tracks, Tensor plif, float low, float high, Tensor prefix, Tensor first, Tensor tend, Tensor tlabel, int match, Tensor offset, int K) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("semimarkov_table_backtrack(Tensor bp_d, Tensor bp_m, Tensor last, Tensor lengths, Tensor prefix, Tensor first, Tensor tend, Tensor tlabel, int match, Tensor k) -> Tensor");
  m.def("semimarkov_logz_backward(Tensor grad, Tensor logz, Tensor alpha, Tensor inc, Tensor content, Tensor forb, Tensor length, Tensor boundary, Tensor segment, Tensor trans, Tensor start, Tensor end, Tensor lengths, Tensor tracks, Tensor plif, float low, float high) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(structtorch_chain, CPU, m) {
  m.impl("semimarkov_viterbi_forward", &semimarkov_viterbi_forward);
  m.impl("semimarkov_logz_forward", &semimarkov_logz_forward);
  m.impl("semimarkov_logz_backward", &semimarkov_logz_backward);
  m.impl("semimarkov_table_forward", &semimarkov_table_forward);
  m.impl("semimarkov_table_backtrack", &semimarkov_table_backtrack);
}
