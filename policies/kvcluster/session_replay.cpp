#include "policies/kvcluster/session_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <utility>

#include "policies/kvcluster/cluster_scan.h"
#include "policies/kvcluster/flash_io.h"
#include "sim/error.h"

namespace mobisim::policies::kvcluster {

namespace {

// Raw scores -> exp(s - max) and their sum, as attention_mass has always computed them.
void finish_scores(ExactScores& e) {
  const float mx = e.weights.maxCoeff();
  e.weights = (e.weights.array() - mx).exp();
  e.total = e.weights.sum();
}

}  // namespace

ExactScores exact_scores(const kernel::Mat& keys, int n, const float* q) {
  const int d = static_cast<int>(keys.cols());
  const Eigen::Map<const Eigen::RowVectorXf> qv(q, d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  ExactScores e;
  e.weights = (keys.topRows(n) * qv.transpose()) * scale;
  finish_scores(e);
  return e;
}

double ExactScores::mass_of(const std::vector<int>& subset) const {
  const auto n = static_cast<int>(weights.size());
  double in = 0;
  for (int p : subset)
    if (p >= 0 && p < n) in += weights[p];
  return total > 0 ? in / total : 0.0;
}

double attention_mass(const kernel::Mat& keys, int n, const float* q, const std::vector<int>& subset) {
  return exact_scores(keys, n, q).mass_of(subset);
}

ExactAttention::ExactAttention(const traces::KvSession& s, int stride, int row_block)
    : own_(std::make_unique<traces::SessionStream>(s)),
      stream_(own_.get()),
      stride_(std::max(1, stride)),
      row_block_(std::max(2, row_block)) {}

ExactAttention::ExactAttention(traces::KvStream& s, int stride, int row_block)
    : stream_(&s), stride_(std::max(1, stride)), row_block_(std::max(2, row_block)) {}

ExactAttention::~ExactAttention() = default;

const ExactScores& ExactAttention::scores(int step, int table, int head_in_group, int n) {
  const traces::KvShape& shape = stream_->shape();
  const int group = shape.group();
  slots_.resize(static_cast<std::size_t>(shape.tables()) * group);
  Slot& sl = slots_[static_cast<std::size_t>(table) * group + head_in_group];
  const int k = sl.base >= 0 && step >= sl.base && (step - sl.base) % stride_ == 0 ? (step - sl.base) / stride_ : -1;
  if (k >= 0 && k < static_cast<int>(sl.ahead.size()) && sl.ahead[k].n == n) return sl.ahead[k].scores;
  if (!stream_->keeps_keys()) throw Error("exact attention: the session stream does not keep its keys");
  // A block of the steps to come (step, step + stride, ...), each over one more stride of keys,
  // computed in one pass over the keys: each key row is read once for all of them (key_scores).
  // Each score is still the GEMV's own dot product of that key row (row-major GEMV computes every
  // row alike, whatever the rows around it), so the values are those exact_scores gives.
  const int layer = table / shape.n_kv_heads, kvh = table % shape.n_kv_heads;
  const int head = layer * shape.n_heads + kvh * group + head_in_group;
  int count = 1;
  while (count < kLookahead && step + count * stride_ < shape.decode && n + count * stride_ <= shape.positions())
    ++count;
  stream_->ensure(step + (count - 1) * stride_ + 1);
  sl.base = step;
  sl.ahead.resize(static_cast<std::size_t>(count));
  const int d = shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int j = 0; j < count; ++j) {
    sl.ahead[j].n = n + j * stride_;
    sl.ahead[j].scores.weights.resize(sl.ahead[j].n);
  }
  const int n_last = sl.ahead.back().n;
  const traces::KeyRows keys = stream_->key_rows(table, 0, n_last);
  if (sl.ahead[0].n >= 2) {
    std::vector<const float*> qs(static_cast<std::size_t>(count));
    std::vector<int> ns(static_cast<std::size_t>(count));
    std::vector<float*> outs(static_cast<std::size_t>(count));
    for (int j = 0; j < count; ++j) {
      qs[j] = stream_->query(head, step + j * stride_);
      ns[j] = sl.ahead[j].n;
      outs[j] = sl.ahead[j].scores.weights.data();
    }
    key_scores(keys.data(), d, qs.data(), ns.data(), count, scale, outs.data());
  } else {
    // One key: Eigen takes a one-row product as a dot product (another summation order).
    for (int r0 = 0; r0 < n_last; r0 += row_block_)
      for (int j = 0; j < count; ++j) {
        // A last block of one row joins the block before it (the GEMV's rows, as above).
        const int left = sl.ahead[j].n - r0;
        if (left <= 0 || (left == 1 && r0 > 0)) continue;
        const int rows = left == row_block_ + 1 ? left : std::min(row_block_, left);
        const Eigen::Map<const Eigen::RowVectorXf> qv(stream_->query(head, step + j * stride_), d);
        sl.ahead[j].scores.weights.segment(r0, rows).noalias() = (keys.middleRows(r0, rows) * qv.transpose()) * scale;
      }
  }
  for (auto& e : sl.ahead) finish_scores(e.scores);
  return sl.ahead[0].scores;
}

namespace {

struct TableState {
  ClusterTable table;
  FlashLayout layout;
};

// How many query heads of a group select: all of them, or the first.
int selecting_heads(const traces::KvShape& s, GqaSelection gqa) {
  return gqa == GqaSelection::kUnion ? s.group() : 1;
}

// The queries that select for (layer, kv_head) at `step`: every head of the group, or its first.
void group_queries(const traces::KvStream& s, GqaSelection gqa, int layer, int kv_head, int step,
                   std::vector<const float*>& qs) {
  const traces::KvShape& sh = s.shape();
  const int heads = selecting_heads(sh, gqa);
  qs.resize(static_cast<std::size_t>(heads));
  for (int g = 0; g < heads; ++g) qs[g] = s.query(layer * sh.n_heads + kv_head * sh.group() + g, step);
}

constexpr int kHorizons[] = {1, 2, 4, 8, 16};

// The loading thread's own time for a layer's reads: every byte it read, page padding included
// (a buffered read copies whole pages out of the page cache, the path whose merging page_runs models).
double loading_seconds(double s_per_byte, const std::vector<ReadRun>& runs) {
  std::int64_t bytes = 0;
  for (const auto& r : runs) bytes += r.bytes;
  return static_cast<double>(bytes) * s_per_byte;
}

}  // namespace

GqaSelection gqa_selection_from_string(const std::string& s) {
  if (s == "union") return GqaSelection::kUnion;
  if (s == "first_head") return GqaSelection::kFirstHead;
  throw InputError(fmt::format("unknown GQA selection '{}' (expected union or first_head)", s));
}

// One policy's replay in progress: its tables and layouts, its DRAM cache and the Table 2 bookkeeping.
struct SessionReplay::State {
  std::unique_ptr<traces::SessionStream> own;  // the stream over a KvSession given to the constructor
  traces::KvStream& s;
  const KvClusterPolicy& policy;
  ReplayOptions opt;
  std::vector<TableState> tabs{};
  std::optional<ClusterCache> cache{};
  ReplaySummary sum{};
  std::vector<double> within_hits = std::vector<double>(5, 0.0);
  double within_total = 0;
  std::map<std::pair<int, int>, int> pending_update{};  // (table, cluster) -> step of its last unresolved update
  int next_step = 0;
  // opt.storage without its load cost, which the single loading thread pays serially per layer (step).
  std::optional<devices::StorageSpec> flash{};
  double load_s_per_byte = 0;
  // Scratch of step(), kept so that a step reuses its buffers instead of allocating them.
  std::vector<const float*> qs{};
  std::vector<int> missed{}, hit{}, forced{};
  std::vector<ReadRun> layer_runs{}, prefetch_runs{};
  std::vector<std::int64_t> list_bytes{};        // one list's run bytes, as StepRecord::append_runs takes them
  std::vector<std::uint8_t> run_code{};          // the step's StepRecord::run_code as it is collected
};

namespace {

// StepRecord::run_code's numbers: 7 bits a byte, low bits first, the top bit set while more follow.
void append_run_varint(std::vector<std::uint8_t>& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(v));
}

std::uint64_t read_run_varint(const std::vector<std::uint8_t>& in, std::size_t& at) {
  std::uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const std::uint8_t b = in.at(at++);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

// A run of whole pages is coded as its pages (low bit 0), any other as its bytes (low bit 1).
constexpr std::int64_t kRunCodePage = 4096;

}  // namespace

void StepRecord::append_runs(std::span<const std::int64_t> bytes) {
  append_run_varint(run_code, bytes.size());
  for (std::int64_t b : bytes) {
    if (b < 0) throw Error(fmt::format("replay: a read run of {} bytes", b));
    const auto u = static_cast<std::uint64_t>(b);
    append_run_varint(run_code, b > 0 && b % kRunCodePage == 0 ? (u / kRunCodePage) << 1 : (u << 1) | 1);
  }
}

std::vector<std::int64_t> StepRecord::runs_of_list(int k) const {
  std::size_t at = 0;
  std::vector<std::int64_t> runs;
  for (int list = 0; at < run_code.size(); ++list) {
    const std::uint64_t n = read_run_varint(run_code, at);
    if (list == k) runs.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t v = read_run_varint(run_code, at);
      if (list == k) runs.push_back(static_cast<std::int64_t>(v & 1 ? v >> 1 : (v >> 1) * kRunCodePage));
    }
    if (list == k) break;
  }
  return runs;
}

SessionReplay::SessionReplay(const traces::KvSession& s, const KvClusterPolicy& policy, ReplayOptions opt) {
  auto own = std::make_unique<traces::SessionStream>(s, "replay");
  traces::KvStream& stream = *own;
  init(std::move(own), stream, policy, std::move(opt));
}

SessionReplay::SessionReplay(traces::KvStream& s, const KvClusterPolicy& policy, ReplayOptions opt) {
  init(nullptr, s, policy, std::move(opt));
}

void SessionReplay::init(std::unique_ptr<traces::SessionStream> own, traces::KvStream& s, const KvClusterPolicy& policy,
                         ReplayOptions opt) {
  const traces::KvShape& sh = s.shape();
  policy.check_heads(sh.tables());
  if (opt.accuracy_every < 0)
    throw ConfigError(fmt::format("replay: accuracy_every must be non-negative (got {})", opt.accuracy_every));
  st_ = std::make_unique<State>(State{std::move(own), s, policy, std::move(opt)});
  State& x = *st_;
  std::vector<TableState>& tabs = x.tabs;
  const ReplayOptions& o = x.opt;
  if (o.storage) {
    x.flash = *o.storage;
    x.flash->load_ns_per_byte = 0;
    x.load_s_per_byte = o.storage->load_ns_per_byte * 1e-9;
  }
  const int nq = std::min(o.coretrieval_steps, sh.decode);
  s.ensure(nq);
  tabs.reserve(sh.tables());
  std::vector<const float*> qs;
  for (int i = 0; i < sh.tables(); ++i) {
    tabs.push_back({ClusterTable(sh.head_dim, i), FlashLayout(o.placement, o.entry_bytes, o.page_bytes, o.hot_buffers, o.read_merge)});
    auto& ts = tabs.back();
    policy.prefill(ts.table, kernel::Mat(s.key_rows(i, 0, sh.prefill)));
    const int layer = i / sh.n_kv_heads, kvh = i % sh.n_kv_heads;
    const int heads = selecting_heads(sh, o.gqa);
    kernel::Mat queries(static_cast<Eigen::Index>(nq) * heads, sh.head_dim);
    for (int t = 0; t < nq; ++t) {
      group_queries(s, o.gqa, layer, kvh, t, qs);
      for (int g = 0; g < heads; ++g)
        queries.row(static_cast<Eigen::Index>(t) * heads + g) = Eigen::Map<const Eigen::RowVectorXf>(qs[g], sh.head_dim);
    }
    ts.layout.place_initial(ts.table, co_retrieval_counts(ts.table, queries, policy.top_k()));
  }
  const std::int64_t total_bytes = static_cast<std::int64_t>(sh.positions()) * sh.tables() * o.entry_bytes;
  if (o.replacement && o.cache_ratio > 0)
    x.cache.emplace(static_cast<std::int64_t>(o.cache_ratio * total_bytes), o.replacement);
  x.sum.steps.reserve(sh.decode);
}

SessionReplay::~SessionReplay() = default;
SessionReplay::SessionReplay(SessionReplay&&) noexcept = default;

void SessionReplay::step(ExactAttention& exact) {
  State& x = *st_;
  const traces::KvShape& s = x.s.shape();
  const KvClusterPolicy& policy = x.policy;
  const ReplayOptions& opt = x.opt;
  auto& tabs = x.tabs;
  auto& cache = x.cache;
  auto& sum = x.sum;
  auto& within_hits = x.within_hits;
  auto& within_total = x.within_total;
  auto& pending_update = x.pending_update;
  if (x.next_step >= s.decode)
    throw InputError(fmt::format("replay: step {} past the session's {} decode steps", x.next_step, s.decode));
  const int step = x.next_step++;
  x.s.ensure(step + 1);
  StepRecord rec;
  rec.layer_io_seconds.assign(s.n_layers, 0.0);
  rec.layer_prefetch_seconds.assign(s.n_layers, 0.0);
  rec.layer_write_bytes.assign(s.n_layers, 0);
  rec.layer_moved_bytes.assign(s.n_layers, 0);
  rec.layer_representatives.assign(s.n_layers, 0);
  double mass_sum = 0;
  int mass_n = 0;
  const bool measure_mass = opt.accuracy_every > 0 && step % opt.accuracy_every == 0;
  auto& layer_runs = x.layer_runs;
  auto& prefetch_runs = x.prefetch_runs;
  auto& missed = x.missed;
  auto& hit = x.hit;
  auto& forced = x.forced;
  for (int layer = 0; layer < s.n_layers; ++layer) {
    layer_runs.clear();
    prefetch_runs.clear();
    for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) {
      const int ti = layer * s.n_kv_heads + kvh;
      auto& ts = tabs[ti];
      group_queries(x.s, opt.gqa, layer, kvh, step, x.qs);
      const std::vector<const float*>& qs = x.qs;
      // Retrieval: P_req, minus what the DRAM cache holds.
      std::vector<int> sel = ts.table.select_union(qs, policy.top_k());
      rec.layer_representatives[layer] += ts.table.n_alive();
      missed.clear();
      hit.clear();
      for (int c : sel) {
        const std::int64_t bytes = static_cast<std::int64_t>(ts.table.cluster(c).size()) * opt.entry_bytes;
        if (cache && cache->access({ti, c}, bytes, step)) {
          rec.hit_bytes += bytes;
          hit.push_back(c);
        } else {
          missed.push_back(c);
          rec.wanted_bytes += bytes;
        }
      }
      if (!pending_update.empty())
        for (int c : sel) {
          auto it = pending_update.find({ti, c});
          if (it != pending_update.end()) {
            const int age = step - it->second;
            for (int h = 0; h < 5; ++h) within_hits[h] += age <= kHorizons[h];
            pending_update.erase(it);
          }
        }
      // Read before the step changes the clusters (a split); the layout keeps the pre-step offsets
      // until its sync below either way: reads resolve against what was on flash.
      const auto runs = ts.layout.read_runs_of_entries(ts.table, missed);
      const int n_before = ts.table.n_entries();
      const StepOutcome out =
          policy.decode_selected(ts.table, std::move(sel), static_cast<int>(qs.size()), x.s.key(ti, s.prefill + step));
      // Cached clusters live on flash too (layer-wise virtualization): prefetched, not on the critical path.
      if (!hit.empty()) {
        const auto pre = ts.layout.read_runs_of(ts.table.positions_of(hit));
        prefetch_runs.insert(prefetch_runs.end(), pre.begin(), pre.end());
      }
      // A forced load reads the cluster as it was on flash before its split.
      forced.clear();
      for (int c : out.forced_loads) {
        const auto m = ts.layout.placed_positions(c);
        forced.insert(forced.end(), m.begin(), m.end());
      }
      const auto forced_runs = ts.layout.read_runs_of(forced);
      for (const auto& r : runs) {
        rec.read_bytes += r.bytes;
        rec.commands += 1;
        sum.run_count += 1;
        sum.run_entries_sum += r.entries;
        sum.run_entries_max = std::max(sum.run_entries_max, r.entries);
        sum.piece_count += r.pieces;
        sum.piece_entries += r.entries;
        sum.longest_piece = std::max(sum.longest_piece, r.longest_piece);
      }
      for (const auto& r : forced_runs) {
        rec.forced_bytes += r.bytes;
        rec.commands += 1;
      }
      layer_runs.insert(layer_runs.end(), runs.begin(), runs.end());
      layer_runs.insert(layer_runs.end(), forced_runs.begin(), forced_runs.end());
      const FlashStats before = ts.layout.stats();
      ts.layout.sync(ts.table, out);
      rec.layer_write_bytes[layer] += ts.layout.stats().physical_write_bytes - before.physical_write_bytes;
      rec.layer_moved_bytes[layer] += ts.layout.stats().moved_bytes - before.moved_bytes;
      if (cache) {
        for (int c : out.updated)
          cache->updated({ti, c}, static_cast<std::int64_t>(ts.table.cluster(c).size()) * opt.entry_bytes, step);
      }
      for (const auto* list : {&out.updated, &out.created})
        for (int c : *list) {
          pending_update[{ti, c}] = step;  // an unresolved earlier update counts as never retrieved
          within_total += 1;
        }
      rec.attended += static_cast<std::int64_t>(out.attended.size());
      rec.splits += out.splits;
      rec.cluster_flops += out.cluster_flops;
      if (measure_mass) {
        std::vector<int> att = out.attended;
        att.push_back(n_before);  // the new token attends itself
        const int group = s.group();
        for (int g = 0; g < group; ++g) {
          // Policy-independent (session, step, head): shared by every replay of this session.
          mass_sum += exact.scores(step, ti, g, n_before + 1).mass_of(att);
          ++mass_n;
        }
      }
    }
    if (x.flash) {
      rec.run_code.swap(x.run_code);  // collected in the kept buffer, handed over exactly sized below
      for (const auto* list : {&layer_runs, &prefetch_runs}) {
        x.list_bytes.clear();
        for (const ReadRun& r : *list) x.list_bytes.push_back(r.bytes);
        rec.append_runs(x.list_bytes);
      }
      rec.run_code.swap(x.run_code);
      rec.layer_io_seconds[layer] = idle_read_seconds(*x.flash, layer_runs) + loading_seconds(x.load_s_per_byte, layer_runs);
      rec.layer_prefetch_seconds[layer] = idle_read_seconds(*x.flash, prefetch_runs) + loading_seconds(x.load_s_per_byte, prefetch_runs);
    }
    sum.max_representatives = std::max<std::int64_t>(sum.max_representatives, rec.layer_representatives[layer]);
    rec.io_seconds += rec.layer_io_seconds[layer];
  }
  rec.run_code.assign(x.run_code.begin(), x.run_code.end());  // exactly its size: the record is kept
  x.run_code.clear();
  rec.mass = mass_n > 0 ? mass_sum / mass_n : 0.0;
  rec.mass_measured = measure_mass;
  rec.cache_bytes = cache ? cache->used_bytes() : 0;
  for (const auto& ts : tabs) rec.dram_only_entries += ts.table.dram_only_entries() + ts.layout.write_buffered_entries();
  sum.steps.push_back(std::move(rec));
}

StepRecord SessionReplay::append(int count) {
  State& x = *st_;
  const traces::KvShape& s = x.s.shape();
  if (count < 0 || x.next_step + count > s.decode)
    throw InputError(fmt::format("replay: appending {} positions past the session's {} decode steps", count, s.decode));
  StepRecord rec;
  rec.layer_write_bytes.assign(s.n_layers, 0);
  rec.layer_moved_bytes.assign(s.n_layers, 0);
  if (count == 0) return rec;
  x.s.ensure(x.next_step + count);
  const int heads = selecting_heads(s, x.opt.gqa);
  for (int k = 0; k < count; ++k) {
    const int step = x.next_step++;
    for (int ti = 0; ti < s.tables(); ++ti) {
      const int layer = ti / s.n_kv_heads;
      auto& ts = x.tabs[ti];
      const StepOutcome out = x.policy.decode_selected(ts.table, {}, heads, x.s.key(ti, s.prefill + step));
      // A forced load reads the cluster as it was on flash before its split.
      x.forced.clear();
      for (int c : out.forced_loads) {
        const auto m = ts.layout.placed_positions(c);
        x.forced.insert(x.forced.end(), m.begin(), m.end());
      }
      for (const auto& r : ts.layout.read_runs_of(x.forced)) {
        rec.forced_bytes += r.bytes;
        rec.commands += 1;
      }
      const FlashStats before = ts.layout.stats();
      ts.layout.sync(ts.table, out);
      rec.layer_write_bytes[layer] += ts.layout.stats().physical_write_bytes - before.physical_write_bytes;
      rec.layer_moved_bytes[layer] += ts.layout.stats().moved_bytes - before.moved_bytes;
      if (x.cache)
        for (int c : out.updated)
          x.cache->updated({ti, c}, static_cast<std::int64_t>(ts.table.cluster(c).size()) * x.opt.entry_bytes, step);
      rec.splits += out.splits;
      rec.cluster_flops += out.cluster_flops;
    }
  }
  x.s.release(x.next_step);
  return rec;
}

void SessionReplay::reset_cache(std::int64_t capacity_bytes) {
  State& x = *st_;
  x.cache.reset();
  if (x.opt.replacement && capacity_bytes > 0) x.cache.emplace(capacity_bytes, x.opt.replacement);
}

int SessionReplay::positions() const { return st_->s.shape().prefill + st_->next_step; }

std::int64_t SessionReplay::live_clusters() const {
  std::int64_t n = 0;
  for (const auto& ts : st_->tabs) n += ts.table.n_alive();
  return n;
}

std::vector<StepRecord> SessionReplay::take_steps() { return std::exchange(st_->sum.steps, {}); }

// What finish() adds to the running statistics: the tables' and layouts' state, the cache's counts.
void SessionReplay::fill_end_statistics(ReplaySummary& sum, int decoded) const {
  const State& x = *st_;
  const traces::KvShape& s = x.s.shape();
  sum.kv_bytes_end = static_cast<std::int64_t>(s.prefill + decoded) * s.tables() * x.opt.entry_bytes;
  for (const auto& ts : x.tabs) {
    ts.table.check_invariants();
    sum.mean_variance += ts.table.mean_variance() / s.tables();
    sum.clusters_end += ts.table.n_alive();
    const auto& f = ts.layout.stats();
    sum.flash.logical_write_bytes += f.logical_write_bytes;
    sum.flash.physical_write_bytes += f.physical_write_bytes;
    sum.flash.moved_bytes += f.moved_bytes;
    sum.flash.naive_moved_bytes += f.naive_moved_bytes;
    sum.flash.allocated_bytes += f.allocated_bytes;
    sum.flash.pools += f.pools;
  }
  if (x.cache) {
    sum.cache_hits = x.cache->hits();
    sum.cache_misses = x.cache->misses();
    sum.cache_peak_bytes = x.cache->peak_bytes();
  }
  for (double h : x.within_hits) sum.updated_retrieved_within.push_back(x.within_total > 0 ? h / x.within_total : 0.0);
}

ReplaySummary SessionReplay::finish() {
  ReplaySummary sum = std::move(st_->sum);
  fill_end_statistics(sum, st_->s.shape().decode);
  return sum;
}

ReplaySummary SessionReplay::summary() const {
  ReplaySummary sum = st_->sum;
  fill_end_statistics(sum, st_->next_step);
  return sum;
}

ReplaySummary replay_session(const traces::KvSession& s, const KvClusterPolicy& policy, const ReplayOptions& opt) {
  ExactAttention exact(s, opt.accuracy_every);
  SessionReplay r(s, policy, opt);
  for (int step = 0; step < s.decode; ++step) r.step(exact);
  return r.finish();
}

std::vector<ReplaySummary> replay_sessions(const traces::KvSession& s, const std::vector<ReplayJob>& jobs) {
  traces::SessionStream stream(s, "replay");
  return std::move(replay_stream(stream, jobs, {s.decode}).front());
}

std::vector<std::vector<ReplaySummary>> replay_stream(traces::KvStream& s, const std::vector<ReplayJob>& jobs,
                                                      const std::vector<int>& lengths) {
  const int decode = s.shape().decode;
  for (std::size_t k = 0; k < lengths.size(); ++k)
    if (lengths[k] < 0 || lengths[k] > decode || (k > 0 && lengths[k] < lengths[k - 1]))
      throw Error(fmt::format("replay: lengths must ascend within [0, {}] (got {})", decode, lengths[k]));
  int stride = 0;  // the measured steps of every job are multiples of this
  for (const auto& j : jobs)
    if (j.options.accuracy_every > 0) stride = std::gcd(stride, j.options.accuracy_every);
  ExactAttention exact(s, stride);
  std::vector<SessionReplay> replays;
  replays.reserve(jobs.size());
  for (const auto& j : jobs) replays.emplace_back(s, *j.policy, j.options);
  std::vector<std::vector<ReplaySummary>> out;
  std::size_t next = 0;
  // The summaries of every length reached after `done` decode steps (the whole session's: final).
  auto take = [&](int done) {
    for (; next < lengths.size() && lengths[next] == done; ++next) {
      std::vector<ReplaySummary> at;
      at.reserve(replays.size());
      for (auto& r : replays) at.push_back(done == decode && next + 1 == lengths.size() ? r.finish() : r.summary());
      out.push_back(std::move(at));
    }
  };
  take(0);
  const int last = lengths.empty() ? 0 : lengths.back();
  // Step-major: every replay's step t reads the exact attention of step t, computed once.
  for (int step = 0; step < last; ++step) {
    for (auto& r : replays) r.step(exact);
    s.release(step + 1);
    take(step + 1);
  }
  return out;
}

}  // namespace mobisim::policies::kvcluster
