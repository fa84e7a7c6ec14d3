#include "policies/kvcluster/kv_cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "models/kernel/kmeans.h"
#include "policies/kvcluster/cluster_scan.h"
#include "sim/error.h"
#include "sim/rng.h"

namespace mobisim::policies::kvcluster {

namespace {
using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
}  // namespace

ClusterTable::ClusterTable(int head_dim, int head) : centroids_(head_dim), dim_(head_dim), head_(head) {
  if (head_dim <= 0) throw Error(fmt::format("ClusterTable: head_dim must be positive (got {})", head_dim));
}

int ClusterTable::count_alive() const {
  int n = 0;
  for (const auto& c : clusters_) n += c.alive && c.size() > 0;
  return n;
}

int ClusterTable::append_key(const float* k) {
  keys_.insert(keys_.end(), k, k + dim_);
  cluster_of_.push_back(-1);
  residence_.push_back(Residence::kFlash);
  return static_cast<int>(cluster_of_.size()) - 1;
}

std::vector<double> ClusterTable::centroid_of(const std::vector<int>& positions) const {
  std::vector<double> r(dim_, 0.0);
  for (int p : positions)
    for (int d = 0; d < dim_; ++d) r[d] += key(p)[d];
  if (!positions.empty())
    for (double& x : r) x /= static_cast<double>(positions.size());
  return r;
}

void ClusterTable::recompute_stats(int c) {
  Cluster& cl = clusters_[c];
  cl.n = static_cast<std::int64_t>(cl.members.size());
  cl.centroid = centroid_of(cl.members);
  double ss = 0;
  for (int p : cl.members)
    for (int d = 0; d < dim_; ++d) {
      const double diff = key(p)[d] - cl.centroid[d];
      ss += diff * diff;
    }
  cl.variance = cl.n > 0 ? ss / static_cast<double>(cl.n) : 0.0;
  sync_centroid(c);
  refresh_candidate(c);
}

void ClusterTable::refresh_candidate(int c) {
  if (candidate_.size() < clusters_.size()) candidate_.resize(clusters_.size(), 0);
  const Cluster& cl = clusters_[c];
  candidate_[c] = cl.alive && cl.n > 0 && !cl.local_window;
  refresh_live(c);
}

void ClusterTable::refresh_live(int c) {
  if (live_.size() < clusters_.size()) live_.resize(clusters_.size(), 0);
  const Cluster& cl = clusters_[c];
  const char now = cl.alive && cl.size() > 0;
  n_live_ += now - live_[c];
  live_[c] = now;
}

void ClusterTable::sync_centroid(int c) {
  centroids_.grow(static_cast<int>(clusters_.size()));
  const auto& r = clusters_[c].centroid;
  if (static_cast<int>(r.size()) == dim_) centroids_.set_row(c, r.data());
}

int ClusterTable::make_cluster(const std::vector<int>& positions) {
  const int id = static_cast<int>(clusters_.size());
  clusters_.emplace_back();
  for (int p : positions) {
    cluster_of_[p] = id;
    residence_[p] = Residence::kFlash;
  }
  clusters_.back().members = positions;
  clusters_.back().last_update_step = step_;
  recompute_stats(id);
  return id;
}

void ClusterTable::initial_partition(int tokens_per_cluster, int iters, std::uint64_t seed) {
  const int n = n_entries();
  if (n == 0) return;
  const int k = std::max(1, (n + tokens_per_cluster - 1) / tokens_per_cluster);
  const Eigen::Map<const kernel::Mat> points(keys_.data(), n, dim_);
  const kernel::KMeans km = kernel::kmeans(points, k, iters, cluster_seed(seed, head_, -1, 0));
  for (auto& group : km.members())
    if (!group.empty()) make_cluster(group);  // an empty K-means cluster is simply dropped
  for (auto& c : clusters_) c.last_update_step = -1;
}

void ClusterTable::add_entry(int c, int pos) {
  Cluster& cl = clusters_[c];
  // Welford: with delta = k - r, r' = r + delta / (n + 1) and
  // n' sigma'^2 = n sigma^2 + ||delta||^2 n / (n + 1).
  const double n = static_cast<double>(cl.n);
  double dist2 = 0;
  for (int d = 0; d < dim_; ++d) {
    const double delta = key(pos)[d] - cl.centroid[d];
    dist2 += delta * delta;
    cl.centroid[d] += delta / (n + 1.0);
  }
  cl.variance = (n * cl.variance + dist2 * n / (n + 1.0)) / (n + 1.0);
  cl.n += 1;
  sync_centroid(c);
  refresh_candidate(c);
  cl.members.push_back(pos);
  cluster_of_[pos] = c;
  residence_[pos] = Residence::kFlash;
  refresh_live(c);  // refresh_candidate above saw the size before the push
}

double ClusterTable::variance_with(int c, const float* k) const {
  const Cluster& cl = clusters_[c];
  const double n = static_cast<double>(cl.n);
  double dist2 = 0;
  for (int d = 0; d < dim_; ++d) {
    const double delta = k[d] - cl.centroid[d];
    dist2 += delta * delta;
  }
  return (n * cl.variance + dist2 * n / (n + 1.0)) / (n + 1.0);
}

void ClusterTable::buffer_entry(int c, int pos) {
  clusters_[c].buffered.push_back(pos);
  clusters_[c].split_pending = true;
  cluster_of_[pos] = c;
  residence_[pos] = Residence::kBuffer;
  ++total_buffered_;
  refresh_live(c);
}

void ClusterTable::flush_buffer(int c) {
  Cluster& cl = clusters_[c];
  const std::vector<int> buf = std::move(cl.buffered);
  cl.buffered.clear();
  total_buffered_ -= static_cast<std::int64_t>(buf.size());
  cl.split_pending = false;
  for (int p : buf) add_entry(c, p);
}

int ClusterTable::split(int c, int iters, std::uint64_t seed) {
  std::vector<int> all = clusters_[c].members;
  all.insert(all.end(), clusters_[c].buffered.begin(), clusters_[c].buffered.end());
  if (all.size() < 2) {
    flush_buffer(c);
    return -1;
  }
  kernel::Mat points(static_cast<Eigen::Index>(all.size()), dim_);
  for (std::size_t i = 0; i < all.size(); ++i)
    for (int d = 0; d < dim_; ++d) points(static_cast<Eigen::Index>(i), d) = key(all[i])[d];
  const kernel::KMeans km = kernel::kmeans(points, 2, iters, seed);
  std::vector<int> stay, leave;
  for (std::size_t i = 0; i < all.size(); ++i) (km.assign[i] == 0 ? stay : leave).push_back(all[i]);
  if (stay.empty() || leave.empty()) {
    flush_buffer(c);  // identical keys: nothing to separate
    return -1;
  }
  total_buffered_ -= static_cast<std::int64_t>(clusters_[c].buffered.size());
  clusters_[c].buffered.clear();
  clusters_[c].split_pending = false;
  clusters_[c].members = stay;
  for (int p : stay) residence_[p] = Residence::kFlash;
  recompute_stats(c);
  mark_updated(c);
  return make_cluster(leave);
}

int ClusterTable::local_window() {
  if (window_ < 0) {
    window_ = make_cluster({});
    clusters_[window_].local_window = true;
    refresh_candidate(window_);
  }
  return window_;
}

int ClusterTable::regroup(const std::vector<int>& positions) {
  std::vector<int> sources;
  for (int p : positions) sources.push_back(cluster_of_[p]);
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  const int id = static_cast<int>(clusters_.size());
  clusters_.emplace_back();
  for (int p : positions) cluster_of_[p] = id;
  for (int s : sources) {
    if (s < 0) continue;
    auto& m = clusters_[s].members;
    m.erase(std::remove_if(m.begin(), m.end(), [&](int p) { return cluster_of_[p] == id; }), m.end());
    recompute_stats(s);
  }
  for (int p : positions) residence_[p] = Residence::kFlash;
  clusters_[id].members = positions;
  clusters_[id].last_update_step = step_;
  recompute_stats(id);
  return id;
}

int ClusterTable::nearest_cluster(const float* k) const {
  const int rows = centroids_.rows();
  Eigen::VectorXd& d2 = scratch_scores_;
  if (rows > 0) {
    scratch_query_.assign(k, k + dim_);  // the key in double, as the distances take it
    d2.resize(rows);
    squared_distances(centroids_, scratch_query_.data(), d2.data());
  }
  int best = -1;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c < static_cast<int>(clusters_.size()); ++c) {
    if (!candidate_[c]) continue;
    double dist = 0;
    if (c < rows) {
      dist = d2[c];
    } else {
      const Cluster& cl = clusters_[c];
      for (int d = 0; d < dim_; ++d) dist += (k[d] - cl.centroid[d]) * (k[d] - cl.centroid[d]);
    }
    if (dist < best_d) {
      best_d = dist;
      best = c;
    }
  }
  return best;
}

double ClusterTable::similarity(int c, const float* q) const {
  // Four partial sums so the loop vectorizes; the order is fixed, so results stay deterministic.
  const double* r = clusters_[c].centroid.data();
  double s[4] = {0, 0, 0, 0};
  int d = 0;
  for (; d + 4 <= dim_; d += 4)
    for (int j = 0; j < 4; ++j) s[j] += static_cast<double>(q[d + j]) * r[d + j];
  for (; d < dim_; ++d) s[0] += static_cast<double>(q[d]) * r[d];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

std::vector<int> ClusterTable::select(const float* q, const TopK& top) const {
  const int rows = centroids_.rows();
  Eigen::VectorXd& scores = scratch_scores_;
  if (rows > 0) {
    scratch_query_.assign(q, q + dim_);  // the query in double
    const double* qd = scratch_query_.data();
    scores.resize(rows);
    if (rows >= 2) {
      centroid_scores(centroids_, &qd, 1, scores.data());  // what `scores = C * qd` (one GEMV) gives
    } else {
      // One row: Eigen's product is a dot product, in its own order.
      scratch_multi_.resize(static_cast<std::size_t>(dim_));
      centroids_.copy_row(0, scratch_multi_.data());
      const Eigen::Map<const RowMatD> cm(scratch_multi_.data(), 1, dim_);
      scores.setZero();
      scores.noalias() += cm * Eigen::Map<const Eigen::VectorXd>(qd, dim_);
    }
  }
  candidates_gathered_ = false;  // gathered when a ranking needs them (keep_ranked_candidates)
  return select_scored(scores.data(), rows, q, top, 0);
}

void ClusterTable::gather_candidates() const {
  if (candidates_gathered_) return;
  candidates_gathered_ = true;
  scratch_cand_.clear();
  scratch_cand_size_.clear();
  for (int c = 0; c < static_cast<int>(clusters_.size()); ++c)
    if (candidate_[c]) {
      scratch_cand_.push_back(c);
      scratch_cand_size_.push_back(clusters_[c].size());
    }
}

bool ClusterTable::keep_at_least(const double* scores, int rows, const float* q, double floor_score, double need,
                                 bool by_count, std::vector<std::pair<double, int>>& cand) const {
  // Every candidate scoring below `floor_score` ranks after every one kept (ranks are by score first), so
  // the kept ones are a prefix of the ranking; the selection lies inside it when it holds `need`.
  // Every candidate is written and those below the floor overwritten by the next (no branch on
  // the score, which is taken or not at random), into a buffer that only grows (resizing `cand`
  // to every cluster would clear it all on each call).
  const int n_clusters = static_cast<int>(clusters_.size());
  if (scratch_above_.size() < static_cast<std::size_t>(n_clusters)) scratch_above_.resize(static_cast<std::size_t>(n_clusters));
  std::pair<double, int>* above = scratch_above_.data();
  std::size_t kept = 0;
  bool unordered = false;  // a NaN score, which no floor places: the full ranking decides
  for (int c = 0; c < n_clusters; ++c) {
    if (!candidate_[c]) continue;
    const double score = c < rows ? scores[c] : similarity(c, q);
    unordered = unordered || score != score;
    above[kept] = {score, c};
    kept += score >= floor_score;
  }
  cand.assign(above, above + kept);
  std::int64_t held = 0;  // entries (or clusters by count) kept
  for (const auto& sc : cand) held += by_count ? 1 : clusters_[sc.second].size();
  return !unordered && !cand.empty() && static_cast<double>(held) >= need;
}

void ClusterTable::keep_ranked_candidates(const double* scores, int rows, const float* q, double need, bool by_count,
                                          std::vector<std::pair<double, int>>& cand) const {
  gather_candidates();
  cand.clear();
  cand.reserve(scratch_cand_.size());
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;  // the scores' range, for keep_top_bins
  for (int c : scratch_cand_) {
    const double score = c < rows ? scores[c] : similarity(c, q);
    cand.emplace_back(score, c);
    lo = std::min(lo, score);
    hi = std::max(hi, score);
  }
  keep_top_bins(cand, lo, hi, need, by_count);
}

double& ClusterTable::rank_floor(int slot) const {
  if (static_cast<int>(scratch_floor_.size()) <= slot)
    scratch_floor_.resize(static_cast<std::size_t>(slot) + 1, std::numeric_limits<double>::quiet_NaN());
  return scratch_floor_[static_cast<std::size_t>(slot)];
}

std::vector<int> ClusterTable::select_scored(const double* scores, int rows, const float* q, const TopK& top,
                                             int slot) const {
  // Ranked by score, ties to the lower id: exactly the prefix a full stable sort would yield.
  std::vector<std::pair<double, int>>& heap = scratch_heap_;
  const bool by_count = top.clusters > 0;
  const double need = by_count ? static_cast<double>(top.clusters) : top.percent / 100.0 * n_entries();
  // A query head's selection moves little from one step to the next: the candidates scoring above
  // where its last one ended (with a margin) usually hold it, found in one pass; when they do not,
  // (or there is no such score yet) the whole ranking's top bins are taken as before.
  double& floor_score = rank_floor(slot);
  const bool floor_held = use_rank_floor_ && !std::isnan(floor_score) && keep_at_least(scores, rows, q, floor_score, need, by_count, heap);
  floor_hits_ += floor_held;
  if (!floor_held) keep_ranked_candidates(scores, rows, q, need, by_count, heap);
  // What is left is about what the selection takes: sorted whole (the ranking is a strict order,
  // so any sort gives the heap's order), where a heap paid two unpredictable branches a level.
  auto higher_rank = [](const std::pair<double, int>& a, const std::pair<double, int>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::sort(heap.begin(), heap.end(), higher_rank);
  std::vector<int> out;
  double covered = 0;
  for (const auto& [score, c] : heap) {
    if (by_count ? static_cast<int>(out.size()) >= top.clusters : (!out.empty() && covered >= need)) break;
    out.push_back(c);
    covered += clusters_[c].size();
  }
  // Next step's floor: the score half as many ranks again below this selection's last (or the
  // lowest kept), so that a drift of the query rarely pushes the selection past it.
  if (!heap.empty()) {
    const std::size_t margin = out.size() + out.size() / 2 + 1;
    floor_score = heap[std::min(margin, heap.size() - 1)].first;
  }
  return out;
}

void ClusterTable::keep_top_bins(std::vector<std::pair<double, int>>& cand, double lo, double hi, double need,
                                 bool by_count) const {
  // Scores binned between their minimum and maximum: the bin index never decreases with the
  // score, so every candidate of a lower bin scores strictly below every candidate kept. The top
  // bins holding `need` (entries, or clusters by count) hold the whole ranked prefix selection takes.
  constexpr int kBins = 256;
  if (cand.size() < 2 * static_cast<std::size_t>(kBins) / 8) return;  // small tables: the heap is cheap
  if (!(hi > lo)) return;
  const double scale = (kBins - 1) / (hi - lo);
  auto bin_of = [&](double score) { return std::clamp(static_cast<int>((score - lo) * scale), 0, kBins - 1); };
  double weight[kBins] = {};
  std::vector<std::uint8_t>& bins = scratch_bins_;  // each candidate's bin, computed once
  bins.resize(cand.size());
  for (std::size_t i = 0; i < cand.size(); ++i) {
    const int b = bin_of(cand[i].first);
    bins[i] = static_cast<std::uint8_t>(b);
    weight[b] += by_count ? 1.0 : scratch_cand_size_[i];  // cand[i] is still candidate i here
  }
  int first = kBins - 1;  // lowest bin kept
  double held = weight[first];
  while (first > 0 && !(held >= need && held > 0)) held += weight[--first];
  if (first == 0) return;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < cand.size(); ++i)
    if (bins[i] >= first) cand[kept++] = cand[i];
  cand.resize(kept);
}

std::vector<int> ClusterTable::positions_of(const std::vector<int>& cs) const {
  std::vector<int> out;
  for (int c : cs) {
    out.insert(out.end(), clusters_[c].members.begin(), clusters_[c].members.end());
    out.insert(out.end(), clusters_[c].buffered.begin(), clusters_[c].buffered.end());
  }
  return out;
}

double ClusterTable::mean_variance() const {
  double sum = 0, weight = 0;
  for (const auto& c : clusters_)
    if (c.alive && c.n >= 2 && !c.local_window) {
      sum += c.variance * static_cast<double>(c.n);
      weight += static_cast<double>(c.n);
    }
  return weight > 0 ? sum / weight : 0.0;
}

void ClusterTable::check_invariants() const {
  std::vector<int> seen(cluster_of_.size(), 0);
  std::int64_t buffered = 0;
  for (int c = 0; c < static_cast<int>(clusters_.size()); ++c) {
    const Cluster& cl = clusters_[c];
    auto visit = [&](int p, Residence where) {
      if (p < 0 || p >= n_entries()) throw Error(fmt::format("cluster {} holds position {} out of range", c, p));
      if (++seen[p] > 1) throw Error(fmt::format("position {} is in more than one cluster", p));
      if (cluster_of_[p] != c) throw Error(fmt::format("position {} is in cluster {} but recorded in {}", p, c, cluster_of_[p]));
      if (residence_[p] != where) throw Error(fmt::format("position {} of cluster {}: residence disagrees", p, c));
    };
    for (int p : cl.members) visit(p, Residence::kFlash);
    for (int p : cl.buffered) visit(p, Residence::kBuffer);
    if (!cl.buffered.empty() && !cl.split_pending) throw Error(fmt::format("cluster {} buffers without its flag", c));
    if (cl.n != static_cast<std::int64_t>(cl.members.size()))
      throw Error(fmt::format("cluster {}: n = {} but {} members", c, cl.n, cl.members.size()));
    buffered += static_cast<std::int64_t>(cl.buffered.size());
  }
  for (int p = 0; p < n_entries(); ++p)
    if (seen[p] != 1) throw Error(fmt::format("position {} is in no cluster", p));
  if (buffered != total_buffered_)
    throw Error(fmt::format("buffered total {} disagrees with the buffers ({})", total_buffered_, buffered));
  if (n_live_ != count_alive())
    throw Error(fmt::format("live cluster count {} disagrees with the clusters ({})", n_live_, count_alive()));
}

ParamSchema common_cluster_schema(const std::string& representatives_default) {
  ParamSchema s;
  s.integer("tokens_per_cluster", 32, "prefill K-means uses ceil(L0 / tokens_per_cluster) clusters").at_least(1);
  s.integer("kmeans_iters", 20, "Lloyd rounds of every K-means (prefill, split, local window)").at_least(1);
  s.integer("top_k", 0, "clusters retrieved per step; 0: use top_k_percent").non_negative();
  s.real("top_k_percent", 10.0, "retrieve clusters until this share of the cached entries is covered")
      .with_unit("%")
      .range(0.0, 100.0);
  s.integer("seed", 1, "seed of every K-means").non_negative();
  s.text("representatives", representatives_default,
         "where the cluster representatives live between steps: dram (held for every layer, read from no "
         "flash) or flash (loaded per layer beside the Q projection, seed 003 section 6.1 Pipeline 1)")
      .in({"dram", "flash"});
  return s;
}

KvClusterPolicy::KvClusterPolicy(const Params& p)
    : tokens_per_cluster_(static_cast<int>(p.integer("tokens_per_cluster"))),
      kmeans_iters_(static_cast<int>(p.integer("kmeans_iters"))),
      top_{static_cast<int>(p.integer("top_k")), p.real("top_k_percent")},
      seed_(static_cast<std::uint64_t>(p.integer("seed"))),
      representatives_on_flash_(p.text("representatives") == "flash") {}

void KvClusterPolicy::prefill(ClusterTable& t, const kernel::Mat& keys) const {
  if (keys.cols() != t.head_dim())
    throw InputError(fmt::format("prefill keys have {} columns, the head has {} dimensions", keys.cols(), t.head_dim()));
  for (Eigen::Index i = 0; i < keys.rows(); ++i) t.append_key(keys.row(i).data());
  t.initial_partition(tokens_per_cluster_, kmeans_iters_, seed_);
}

std::vector<int> ClusterTable::select_union(QueryGroup qs, const TopK& top) const {
  if (qs.empty()) return {};
  const int rows = centroids_.rows();
  if (qs.size() == 1 || rows < 2) {
    std::vector<int> out = select(qs[0], top);
    if (qs.size() == 1) return out;
    std::vector<char> taken(clusters_.size(), 0);
    for (int c : out) taken[c] = 1;
    for (std::size_t g = 1; g < qs.size(); ++g)
      for (int c : select(qs[g], top))
        if (!taken[c]) {
          taken[c] = 1;
          out.push_back(c);
        }
    return out;
  }
  // Every head's scores in one pass over the centroids (the values select's GEMV gives).
  const int heads = static_cast<int>(qs.size());
  const std::size_t dim = static_cast<std::size_t>(dim_);
  scratch_query_.resize(dim * heads);
  std::vector<const double*> qd(qs.size());
  for (int h = 0; h < heads; ++h) {
    std::copy(qs[h], qs[h] + dim_, scratch_query_.begin() + static_cast<std::ptrdiff_t>(h * dim));
    qd[h] = scratch_query_.data() + h * dim;
  }
  scratch_multi_.resize(static_cast<std::size_t>(rows) * heads);
  centroid_scores(centroids_, qd.data(), heads, scratch_multi_.data());
  candidates_gathered_ = false;  // gathered once for every head, if a ranking needs them
  std::vector<int> out = select_scored(scratch_multi_.data(), rows, qs[0], top, 0);
  std::vector<char>& taken = scratch_taken_;
  taken.assign(clusters_.size(), 0);
  for (int c : out) taken[c] = 1;
  for (int h = 1; h < heads; ++h)
    for (int c : select_scored(scratch_multi_.data() + static_cast<std::size_t>(h) * rows, rows, qs[h], top, h))
      if (!taken[c]) {
        taken[c] = 1;
        out.push_back(c);
      }
  return out;
}

std::vector<int> KvClusterPolicy::attended_positions(const ClusterTable& t, const float* q) const {
  std::vector<int> out = t.positions_of(t.select(q, top_));
  if (t.local_window_id() >= 0) {
    const auto& recent = t.cluster(t.local_window_id()).members;
    out.insert(out.end(), recent.begin(), recent.end());
  }
  return out;
}

std::uint64_t cluster_seed(std::uint64_t seed, int head, int cluster, int step) {
  std::uint64_t s = seed ^ 0x9e3779b97f4a7c15ULL;
  s = sim::fnv1a64(fmt::format("kvcluster/{}/{}/{}", head, cluster, step), s);
  return sim::splitmix64(s);
}

}  // namespace mobisim::policies::kvcluster
