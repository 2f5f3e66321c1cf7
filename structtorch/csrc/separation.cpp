// The separation oracle of the connectivity (vertex-separator) inequalities, compiled: the loop of
// structtorch/lp/separation.py's Separator.violated over pairs, nested cuts, support components,
// widest-path certificates and max-flows, step for step (the Python module's docstring explains the
// method; its code is the reference the tests compare with). The same pairs are tried in the same
// order, capacities are rounded the same way, and the cuts are the nearest minimum cuts, which do
// not depend on the max-flow algorithm (here Dinic's), so the cuts returned are those of the
// Python loop. Weights of separators are summed in numpy's pairwise order (bit-equal violations).
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <queue>
#include <tuple>
#include <vector>

#include "api.h"

namespace structtorch {
namespace lp {
namespace {

constexpr int64_t kInf = int64_t{1} << 30;  // separation.py's _INF
constexpr double kMargin = 1e-9;            // separation.py's _MARGIN

// numpy's float64 sum of a contiguous array (pairwise, blocks of 8 up to 128 elements)
double pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double res = 0.0;
    for (int64_t k = 0; k < n; ++k) res += a[k];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k];
    int64_t k = 8;
    for (; k < n - (n % 8); k += 8)
      for (int m = 0; m < 8; ++m) r[m] += a[k + m];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; k < n; ++k) res += a[k];
    return res;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

struct Cut {
  double violation;
  int64_t i, j;
  std::vector<int32_t> separator;  // sorted vertex ids
};

// A max-flow network in arc lists (arc e and its reverse e ^ 1), rebuilt for every flow.
struct Network {
  std::vector<int32_t> head, to, next;
  std::vector<int64_t> cap;
  std::vector<int32_t> level, cursor, queue;

  void reset(int32_t nodes) {
    head.assign(nodes, -1);
    to.clear(), next.clear(), cap.clear();
  }
  void arc(int32_t u, int32_t v, int64_t c) {
    for (auto [a, b, w] : {std::tuple{u, v, c}, std::tuple{v, u, int64_t{0}}}) {
      to.push_back(b), cap.push_back(w), next.push_back(head[a]);
      head[a] = static_cast<int32_t>(to.size()) - 1;
    }
  }
  bool levels(int32_t s, int32_t t) {
    level.assign(head.size(), -1);
    queue.assign(1, s);
    level[s] = 0;
    for (size_t q = 0; q < queue.size(); ++q)
      for (int32_t e = head[queue[q]]; e >= 0; e = next[e])
        if (cap[e] > 0 && level[to[e]] < 0) level[to[e]] = level[queue[q]] + 1, queue.push_back(to[e]);
    return level[t] >= 0;
  }
  int64_t push(int32_t u, int32_t t, int64_t limit) {
    if (u == t) return limit;
    for (int32_t& e = cursor[u]; e >= 0; e = next[e]) {
      if (cap[e] <= 0 || level[to[e]] != level[u] + 1) continue;
      const int64_t got = push(to[e], t, std::min(limit, cap[e]));
      if (got > 0) {
        cap[e] -= got, cap[e ^ 1] += got;
        return got;
      }
    }
    return 0;
  }
  // Dinic's max-flow, stopped once it reaches kInf (no finite cut)
  int64_t max_flow(int32_t s, int32_t t) {
    int64_t flow = 0;
    while (flow < kInf && levels(s, t)) {
      cursor = head;
      for (int64_t got; flow < kInf && (got = push(s, t, kInf)) > 0;) flow += got;
    }
    return flow;
  }
  // nodes reached from s along arcs of positive residual capacity (forward), or reaching s (backward)
  std::vector<char> reached(int32_t s, bool forward) {
    std::vector<char> seen(head.size(), 0);
    queue.assign(1, s);
    seen[s] = 1;
    for (size_t q = 0; q < queue.size(); ++q)
      for (int32_t e = head[queue[q]]; e >= 0; e = next[e])
        if (cap[forward ? e : e ^ 1] > 0 && !seen[to[e]]) seen[to[e]] = 1, queue.push_back(to[e]);
    return seen;
  }
};

class Oracle {
 public:
  Oracle(const double* y, const int32_t* indptr, const int32_t* indices, int32_t V)
      : y_(y), indptr_(indptr), indices_(indices), V_(V), caps_(V), positive_(V), mark_(V, 0), added_(V, 0), local_(V, -1) {
    scale_ = std::min(1e6, static_cast<double>(kInf / 4) / (V + 1));
    const int64_t cap_max = kInf / (V + 1);
    for (int32_t k = 0; k < V; ++k) {
      caps_[k] = static_cast<int64_t>(std::min(std::nearbyint(y[k] * scale_), static_cast<double>(cap_max)));
      positive_[k] = caps_[k] > 0;
    }
    label_components();
  }

  std::vector<Cut> violated(double tol, int64_t limit, int64_t nested, double offset) {
    const std::vector<int32_t> order = candidates(tol);
    const double threshold = 1 + tol + offset;
    std::vector<Cut> found;
    std::vector<char> adjacent(V_, 0);
    for (size_t a = 0; a + 1 < order.size(); ++a) {
      const int32_t i = order[a];
      for (int32_t e = indptr_[i]; e < indptr_[i + 1]; ++e) adjacent[indices_[e]] = 1;
      bool full = false;
      for (size_t b = a + 1; b < order.size() && !full; ++b) {
        const int32_t j = order[b];
        if (!(y_[i] + y_[j] > threshold) || adjacent[j]) continue;
        nested_cuts(i, j, tol + offset, nested, found);
        full = limit >= 0 && static_cast<int64_t>(found.size()) >= limit;
      }
      for (int32_t e = indptr_[i]; e < indptr_[i + 1]; ++e) adjacent[indices_[e]] = 0;
      if (full) break;
    }
    std::stable_sort(found.begin(), found.end(), [](const Cut& p, const Cut& q) { return p.violation > q.violation; });
    if (limit >= 0 && static_cast<int64_t>(found.size()) > limit) found.resize(limit);
    return found;
  }

 private:
  // one representative (lowest vertex) per component of y >= 1 - tol, weighted by its size, and
  // every other vertex with y > tol weighted by y; heaviest first, stable
  std::vector<int32_t> candidates(double tol) {
    std::vector<int32_t> order;
    std::vector<double> weight;
    std::vector<char> ones(V_), seen(V_, 0);
    for (int32_t k = 0; k < V_; ++k) ones[k] = y_[k] >= 1 - tol;
    for (int32_t k = 0; k < V_; ++k) {
      if (!ones[k] || seen[k]) continue;
      queue_.assign(1, k);
      seen[k] = 1;
      for (size_t q = 0; q < queue_.size(); ++q)
        for (int32_t e = indptr_[queue_[q]]; e < indptr_[queue_[q] + 1]; ++e)
          if (ones[indices_[e]] && !seen[indices_[e]]) seen[indices_[e]] = 1, queue_.push_back(indices_[e]);
      order.push_back(k), weight.push_back(static_cast<double>(queue_.size()));
    }
    for (int32_t k = 0; k < V_; ++k)
      if (y_[k] > tol && !ones[k]) order.push_back(k), weight.push_back(y_[k]);
    std::vector<size_t> rank(order.size());
    std::iota(rank.begin(), rank.end(), 0);
    std::stable_sort(rank.begin(), rank.end(), [&](size_t p, size_t q) { return weight[p] > weight[q]; });
    std::vector<int32_t> out(order.size());
    for (size_t r = 0; r < rank.size(); ++r) out[r] = order[rank[r]];
    return out;
  }

  void nested_cuts(int32_t i, int32_t j, double tol, int64_t count, std::vector<Cut>& out) {
    const double floor = y_[i] + y_[j] - 1 - tol + kMargin;  // a separator this heavy is not violated
    blocked_.clear();
    for (int64_t k = 0; k < count; ++k) {
      std::vector<int32_t> cut;
      if (!min_separator(i, j, k % 2 == 0, floor, cut)) break;
      std::vector<double> values(cut.size());
      for (size_t m = 0; m < cut.size(); ++m) values[m] = y_[cut[m]];
      const double violation = y_[i] + y_[j] - 1 - pairwise_sum(values.data(), values.size());
      if (violation <= tol) break;
      blocked_.insert(blocked_.end(), cut.begin(), cut.end());
      out.push_back({violation, std::min(i, j), std::max(i, j), std::move(cut)});
    }
  }

  // the support component of s (positive vertices, i, j and the blocked ones) in members_ (marked
  // 1) and its sorted non-support neighbours, the zero-capacity cut around it, in boundary_ (marked
  // 2); clear_marks() undoes the marks
  void side(int32_t i, int32_t j, int32_t s) {
    added_[i] = added_[j] = 1;
    for (int32_t v : blocked_) added_[v] = 1;
    members_.assign(1, s);
    boundary_.clear();
    mark_[s] = 1;
    for (size_t q = 0; q < members_.size(); ++q)
      for (int32_t e = indptr_[members_[q]]; e < indptr_[members_[q] + 1]; ++e) {
        const int32_t v = indices_[e];
        if (mark_[v]) continue;
        const bool inside = positive_[v] || added_[v];
        mark_[v] = inside ? 1 : 2;
        (inside ? members_ : boundary_).push_back(v);
      }
    added_[i] = added_[j] = 0;
    for (int32_t v : blocked_) added_[v] = 0;
    std::sort(boundary_.begin(), boundary_.end());
  }

  void clear_marks() {
    for (int32_t v : members_) mark_[v] = 0;
    for (int32_t v : boundary_) mark_[v] = 0;
  }

  bool min_separator(int32_t i, int32_t j, bool near_source, double floor, std::vector<int32_t>& cut) {
    if (blocked_.empty() && near_source && positive_[i] && positive_[j]) return first_separator(i, j, floor, cut);
    const int32_t s = near_source ? i : j, t = near_source ? j : i;
    side(i, j, s);
    const bool apart = mark_[t] != 1;
    clear_marks();
    if (apart) {  // different components: a zero-capacity cut, no flow needed
      cut = boundary_;
      return true;
    }
    std::vector<int32_t> region = members_;
    region.insert(region.end(), boundary_.begin(), boundary_.end());
    if (path_above(i, j, floor)) return false;
    std::sort(region.begin(), region.end());
    return flow_cut(region, i, j, near_source, cut);
  }

  // min_separator's first call on a pair of positive vertices, where most pairs end: the support
  // is the positive vertices, whose components are labelled once per plane, and the certificate
  // is read from one widest-path search from i for all j
  bool first_separator(int32_t i, int32_t j, double floor, std::vector<int32_t>& cut) {
    const Component& comp = component(label_[i]);
    if (label_[j] != label_[i]) {
      cut = comp.boundary;
      return true;
    }
    if (widest(i)[j] >= floor) return false;
    return flow_cut(comp.region, i, j, true, cut);
  }

  struct Component {
    std::vector<int32_t> boundary, region;  // sorted: the non-positive neighbours; with the members
  };

  const Component& component(int32_t c) {
    if (components_[c].region.empty()) {
      std::vector<int32_t>& boundary = components_[c].boundary;
      std::vector<int32_t>& region = components_[c].region;
      for (int32_t v = 0; v < V_; ++v) {
        if (label_[v] != c) continue;
        region.push_back(v);
        for (int32_t e = indptr_[v]; e < indptr_[v + 1]; ++e)
          if (!positive_[indices_[e]]) boundary.push_back(indices_[e]);
      }
      std::sort(boundary.begin(), boundary.end());
      boundary.erase(std::unique(boundary.begin(), boundary.end()), boundary.end());
      region.insert(region.end(), boundary.begin(), boundary.end());
      std::sort(region.begin(), region.end());
    }
    return components_[c];
  }

  // the components of the positive vertices: label_ (V,), -1 elsewhere
  void label_components() {
    label_.assign(V_, -1);
    int32_t count = 0;
    for (int32_t k = 0; k < V_; ++k) {
      if (!positive_[k] || label_[k] >= 0) continue;
      queue_.assign(1, k);
      label_[k] = count;
      for (size_t q = 0; q < queue_.size(); ++q)
        for (int32_t e = indptr_[queue_[q]]; e < indptr_[queue_[q] + 1]; ++e)
          if (positive_[indices_[e]] && label_[indices_[e]] < 0) label_[indices_[e]] = count, queue_.push_back(indices_[e]);
      ++count;
    }
    components_.assign(count, Component{});
  }

  // for every vertex v, the largest min over the inner vertices of an i-v path (+inf for i's
  // neighbours): path_above(i, j, floor) without blocked vertices is widest(i)[j] >= floor
  const std::vector<double>& widest(int32_t i) {
    if (widest_source_ == i) return widest_;
    constexpr double inf = std::numeric_limits<double>::infinity();
    widest_source_ = i;
    widest_.assign(V_, -inf);
    std::priority_queue<std::pair<double, int32_t>> heap;
    widest_[i] = inf;
    heap.push({inf, i});
    while (!heap.empty()) {
      const auto [w, u] = heap.top();
      heap.pop();
      if (w < widest_[u]) continue;  // a stale entry
      const double through = u == i ? inf : std::min(w, y_[u]);
      for (int32_t e = indptr_[u]; e < indptr_[u + 1]; ++e)
        if (through > widest_[indices_[e]]) widest_[indices_[e]] = through, heap.push({through, indices_[e]});
    }
    return widest_;
  }

  // whether an i-j path has only inner vertices with y >= floor or blocked
  bool path_above(int32_t i, int32_t j, double floor) {
    std::vector<char> strong(V_), seen(V_, 0);
    for (int32_t k = 0; k < V_; ++k) strong[k] = y_[k] >= floor;
    strong[i] = strong[j] = 1;
    for (int32_t v : blocked_) strong[v] = 1;
    queue_.assign(1, i);
    seen[i] = 1;
    for (size_t q = 0; q < queue_.size(); ++q)
      for (int32_t e = indptr_[queue_[q]]; e < indptr_[queue_[q] + 1]; ++e) {
        const int32_t v = indices_[e];
        if (v == j) return true;
        if (strong[v] && !seen[v]) seen[v] = 1, queue_.push_back(v);
      }
    return false;
  }

  // the nearest minimum cut of the split network of ``region`` (sorted vertex ids)
  bool flow_cut(const std::vector<int32_t>& region, int32_t i, int32_t j, bool near_source,
                std::vector<int32_t>& cut) {
    const int32_t n = static_cast<int32_t>(region.size());
    for (int32_t k = 0; k < n; ++k) local_[region[k]] = k;
    std::vector<int64_t> cap(n);
    for (int32_t k = 0; k < n; ++k) cap[k] = caps_[region[k]];
    cap[local_[i]] = cap[local_[j]] = kInf;
    for (int32_t v : blocked_)
      if (local_[v] >= 0) cap[local_[v]] = kInf;
    net_.reset(2 * n);
    for (int32_t k = 0; k < n; ++k) {  // k_in = k -> k_out = n + k, and k_out -> the neighbours' k_in
      net_.arc(k, n + k, cap[k]);
      for (int32_t e = indptr_[region[k]]; e < indptr_[region[k] + 1]; ++e)
        if (local_[indices_[e]] >= 0) net_.arc(n + k, local_[indices_[e]], kInf);
    }
    const int32_t a = local_[i], b = local_[j];
    for (int32_t v : region) local_[v] = -1;
    if (net_.max_flow(n + a, b) >= kInf) return false;
    const std::vector<char> seen = near_source ? net_.reached(n + a, true) : net_.reached(b, false);
    cut.clear();
    for (int32_t k = 0; k < n; ++k)
      if (near_source ? (seen[k] && !seen[n + k]) : (!seen[k] && seen[n + k])) cut.push_back(region[k]);
    return true;
  }

  const double* y_;
  const int32_t* indptr_;
  const int32_t* indices_;
  int32_t V_;
  double scale_;
  std::vector<int64_t> caps_;
  std::vector<char> positive_;
  std::vector<char> mark_, added_;  // scratch of side()
  std::vector<int32_t> local_, queue_, members_, boundary_, blocked_, label_;
  std::vector<Component> components_;
  std::vector<double> widest_;
  int32_t widest_source_ = -1;
  Network net_;
};

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> connectivity_cuts(
    const at::Tensor& y, const at::Tensor& indptr, const at::Tensor& indices, double tol, double offset,
    int64_t limit, int64_t nested) {
  TORCH_CHECK(y.dim() == 1 && y.scalar_type() == at::kDouble && y.is_contiguous(),
              "connectivity_cuts: y must be a contiguous (V,) float64 tensor");
  const int64_t V = y.size(0);
  TORCH_CHECK(indptr.dim() == 1 && indptr.scalar_type() == at::kInt && indptr.is_contiguous() &&
                  indptr.size(0) == V + 1,
              "connectivity_cuts: indptr must be a contiguous (V + 1,) int32 tensor");
  TORCH_CHECK(indices.dim() == 1 && indices.scalar_type() == at::kInt && indices.is_contiguous(),
              "connectivity_cuts: indices must be a contiguous int32 tensor");
  TORCH_CHECK(nested >= 1, "connectivity_cuts: nested must be >= 1");
  const int32_t* ptr = indptr.data_ptr<int32_t>();
  const int32_t* idx = indices.data_ptr<int32_t>();
  TORCH_CHECK(ptr[0] == 0 && ptr[V] == indices.size(0), "connectivity_cuts: indptr does not match indices");
  for (int64_t k = 0; k < V; ++k) TORCH_CHECK(ptr[k] <= ptr[k + 1], "connectivity_cuts: indptr must not decrease");
  for (int64_t e = 0; e < indices.size(0); ++e)
    TORCH_CHECK(idx[e] >= 0 && idx[e] < V, "connectivity_cuts: an index is out of range");
  const std::vector<Cut> cuts =
      Oracle(y.data_ptr<double>(), ptr, idx, static_cast<int32_t>(V)).violated(tol, limit, nested, offset);
  const int64_t K = static_cast<int64_t>(cuts.size());
  at::Tensor pairs = at::empty({K, 2}, at::kLong), violation = at::empty({K}, at::kDouble);
  at::Tensor offsets = at::zeros({K + 1}, at::kLong);
  int64_t* o = offsets.data_ptr<int64_t>();
  for (int64_t k = 0; k < K; ++k) o[k + 1] = o[k] + static_cast<int64_t>(cuts[k].separator.size());
  at::Tensor vertices = at::empty({o[K]}, at::kLong);
  int64_t* p = pairs.data_ptr<int64_t>();
  int64_t* v = vertices.data_ptr<int64_t>();
  for (const Cut& c : cuts) {
    *p++ = c.i, *p++ = c.j;
    v = std::copy(c.separator.begin(), c.separator.end(), v);
  }
  std::transform(cuts.begin(), cuts.end(), violation.data_ptr<double>(), [](const Cut& c) { return c.violation; });
  return {pairs, violation, vertices, offsets};
}

}  // namespace lp
}  // namespace structtorch
