#include "policies/kvcluster/flash_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <set>

#include "sim/error.h"

namespace mobisim::policies::kvcluster {

const char* to_string(Placement p) {
  switch (p) {
    case Placement::kSequence: return "sequence";
    case Placement::kIntraCluster: return "intra";
    case Placement::kInterCluster: return "inter";
  }
  return "?";
}

Placement placement_from_string(const std::string& s) {
  if (s == "sequence") return Placement::kSequence;
  if (s == "intra") return Placement::kIntraCluster;
  if (s == "inter") return Placement::kInterCluster;
  throw ConfigError(fmt::format("unknown flash placement '{}' (expected sequence, intra or inter)", s));
}

std::vector<std::vector<double>> co_retrieval_counts(const ClusterTable& t, const kernel::Mat& queries,
                                                     const TopK& top) {
  const std::size_t m = t.clusters().size();
  std::vector<std::vector<double>> f(m, std::vector<double>(m, 0.0));
  for (Eigen::Index i = 0; i < queries.rows(); ++i) {
    const auto sel = t.select(queries.row(i).data(), top);
    for (int a : sel)
      for (int b : sel)
        if (a != b) f[a][b] += 1.0;
  }
  return f;
}

std::vector<int> correlation_chain(const std::vector<std::vector<double>>& f, const std::vector<int>& clusters) {
  if (clusters.size() < 2 || f.empty()) return clusters;
  std::vector<int> chain;
  std::set<int> left(clusters.begin(), clusters.end());
  // Start with the most co-retrieved pair (ties: lowest ids).
  int a = clusters[0], b = clusters[1];
  double best = -1;
  for (int i : clusters)
    for (int j : clusters)
      if (i < j && f[i][j] > best) {
        best = f[i][j];
        a = i;
        b = j;
      }
  chain = {a, b};
  left.erase(a);
  left.erase(b);
  while (!left.empty()) {
    const int tail = chain.back();
    int next = *left.begin();
    for (int c : left)
      if (f[tail][c] > f[tail][next]) next = c;
    chain.push_back(next);
    left.erase(next);
  }
  return chain;
}

ReadMerge read_merge_from_string(const std::string& s) {
  if (s == "page_runs") return ReadMerge::kPageRuns;
  if (s == "contiguous") return ReadMerge::kContiguousPieces;
  throw ConfigError(fmt::format("read merge '{}': expected page_runs or contiguous", s));
}

FlashLayout::FlashLayout(Placement placement, std::int64_t entry_bytes, std::int64_t page_bytes, int hot_buffers,
                         ReadMerge merge)
    : placement_(placement), entry_bytes_(entry_bytes), page_bytes_(page_bytes), hot_buffers_(hot_buffers), merge_(merge) {
  if (entry_bytes <= 0 || page_bytes <= 0 || hot_buffers < 0)
    throw ConfigError(fmt::format("flash layout: entry_bytes ({}) and page_bytes ({}) must be positive, "
                                  "hot_buffers ({}) non-negative",
                                  entry_bytes, page_bytes, hot_buffers));
  auto log2_exact = [](std::int64_t x) { return std::has_single_bit(static_cast<std::uint64_t>(x)) ? std::countr_zero(static_cast<std::uint64_t>(x)) : -1; };
  entry_shift_ = log2_exact(entry_bytes);
  page_shift_ = log2_exact(page_bytes);
}

std::int64_t FlashLayout::offset_of(int pos) const {
  auto it = offset_.find(pos);
  if (it == offset_.end()) throw Error(fmt::format("position {} has no flash offset", pos));
  return it->second;
}

int FlashLayout::content_at(std::int64_t offset) const {
  auto it = flash_.find(offset);
  return it == flash_.end() ? -1 : it->second;
}

bool FlashLayout::in_write_buffer(int pos) const {
  auto it = offset_.find(pos);
  return it != offset_.end() && content_at(it->second) != pos;
}

std::int64_t FlashLayout::write_buffered_entries() const {
  std::int64_t n = 0;
  for (const auto& [c, buf] : page_buffer_) n += static_cast<std::int64_t>(buf.size());
  return n;
}

std::int64_t FlashLayout::pages_touched(const std::vector<std::int64_t>& offsets) const {
  std::set<std::int64_t> pages;
  for (std::int64_t off : offsets)
    for (std::int64_t p = off / page_bytes_; p <= (off + entry_bytes_ - 1) / page_bytes_; ++p) pages.insert(p);
  return static_cast<std::int64_t>(pages.size());
}

void FlashLayout::record_offset(int pos, std::int64_t off) {
  offset_[pos] = off;
  if (pos >= static_cast<int>(flash_offset_.size())) {
    flash_offset_.resize(pos + 1, -1);
    listed_in_.resize(pos + 1, -1);
  }
  delist(pos);
  flash_offset_[pos] = -1;  // recorded, not yet on flash
}

void FlashLayout::write_flash(int pos, std::int64_t off, int cluster) {
  flash_[off] = pos;
  delist(pos);
  flash_offset_[pos] = off;
  if (cluster < 0) return;
  if (cluster >= static_cast<int>(cluster_offsets_.size())) cluster_offsets_.resize(cluster + 1);
  cluster_offsets_[cluster].push_back(off);
  listed_in_[pos] = cluster;
}

void FlashLayout::delist(int pos) {
  const int c = listed_in_[pos];
  if (c < 0) return;
  // Order within a cluster's list does not matter (reads sort or mark the offsets): the last
  // offset takes the removed one's place.
  auto& list = cluster_offsets_[c];
  auto it = std::find(list.begin(), list.end(), flash_offset_[pos]);
  if (it == list.end()) throw Error(fmt::format("flash layout: position {} missing from cluster {}'s offsets", pos, c));
  *it = list.back();
  list.pop_back();
  listed_in_[pos] = -1;
}

// ---------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------
int FlashLayout::new_pool(int capacity) {
  Pool p;
  p.begin = pools_.empty() ? 0 : pools_.back().begin + static_cast<std::int64_t>(pools_.back().capacity) * entry_bytes_;
  p.capacity = capacity;
  pools_.push_back(p);
  stats_.pools = static_cast<int>(pools_.size());
  stats_.allocated_bytes += static_cast<std::int64_t>(capacity) * entry_bytes_;
  return static_cast<int>(pools_.size()) - 1;
}

std::int64_t FlashLayout::slot_offset(const Slot& s, int index) const {
  const Pool& p = pools_[s.pool];
  return p.begin + static_cast<std::int64_t>(s.down ? p.capacity - 1 - index : index) * entry_bytes_;
}

FlashLayout::Slot FlashLayout::take_slot(int cluster, int entries) {
  // A free half of an existing pool whose partner leaves room (the split child's
  // "new pool, paired with another cluster"); otherwise a fresh pool.
  for (int i = static_cast<int>(pools_.size()) - 1; i >= 0; --i) {
    Pool& p = pools_[i];
    if (p.cluster_down < 0 && p.capacity - p.used_up >= entries) {
      p.cluster_down = cluster;
      p.used_down = 0;
      return slot_of_[cluster] = Slot{i, true};
    }
    if (p.cluster_up < 0 && p.capacity - p.used_down >= entries) {
      p.cluster_up = cluster;
      p.used_up = 0;
      return slot_of_[cluster] = Slot{i, false};
    }
  }
  const int i = new_pool(std::max(pool_entries_, 2 * entries));
  pools_[i].cluster_up = cluster;
  return slot_of_[cluster] = Slot{i, false};
}

void FlashLayout::release_slot(int cluster) {
  auto it = slot_of_.find(cluster);
  if (it == slot_of_.end()) return;
  Pool& p = pools_[it->second.pool];
  if (it->second.down) {
    p.cluster_down = -1;
    p.used_down = 0;
  } else {
    p.cluster_up = -1;
    p.used_up = 0;
  }
  slot_of_.erase(it);
}

void FlashLayout::unplace(int pos) {
  auto it = offset_.find(pos);
  if (it == offset_.end()) return;
  auto f = flash_.find(it->second);
  if (f != flash_.end() && f->second == pos) flash_.erase(f);
  offset_.erase(it);
  delist(pos);
  flash_offset_[pos] = -1;
  for (auto& [c, buf] : page_buffer_) buf.erase(std::remove(buf.begin(), buf.end(), pos), buf.end());
}

// Writes `positions` contiguously from the cluster's head (one sequential write).
void FlashLayout::bulk_write(int cluster, const std::vector<int>& positions) {
  const Slot s = slot_of_.at(cluster);
  Pool& p = pools_[s.pool];
  int& used = s.down ? p.used_down : p.used_up;
  std::vector<std::int64_t> offs;
  for (int pos : positions) {
    const std::int64_t off = slot_offset(s, used++);
    record_offset(pos, off);
    write_flash(pos, off, cluster);
    offs.push_back(off);
  }
  stats_.logical_write_bytes += static_cast<std::int64_t>(positions.size()) * entry_bytes_;
  stats_.physical_write_bytes += pages_touched(offs) * page_bytes_;
  auto& list = placed_[cluster];
  list.insert(list.end(), positions.begin(), positions.end());
  placed_changed(cluster);
}

void FlashLayout::touch_hot(int cluster) {
  if (hot_buffers_ == 0) return;
  hot_.erase(std::remove(hot_.begin(), hot_.end(), cluster), hot_.end());
  hot_.insert(hot_.begin(), cluster);
  if (static_cast<int>(hot_.size()) > hot_buffers_) {
    flush_page_buffer(hot_.back());
    page_buffer_.erase(hot_.back());
    hot_.pop_back();
  }
}

void FlashLayout::flush_page_buffer(int cluster) {
  auto it = page_buffer_.find(cluster);
  if (it == page_buffer_.end() || it->second.empty()) return;
  std::vector<std::int64_t> offs;
  for (int pos : it->second) {
    offs.push_back(offset_.at(pos));
    write_flash(pos, offset_.at(pos), cluster);
  }
  stats_.physical_write_bytes += pages_touched(offs) * page_bytes_;
  it->second.clear();
}

std::int64_t FlashLayout::placed_count(int cluster) const {
  auto it = placed_.find(cluster);
  return it == placed_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
}

int FlashLayout::naive_index(int cluster) const {
  return cluster >= 0 && cluster < static_cast<int>(naive_index_.size()) ? naive_index_[cluster] : -1;
}

void FlashLayout::add_to_naive_order(int cluster) {
  if (cluster < 0) throw Error(fmt::format("flash layout: cluster id {} is negative", cluster));
  if (naive_index(cluster) >= 0) {
    naive_repeats_ = true;  // the sums below would miss the repeat's changes: walk the order instead
  } else {
    if (cluster >= static_cast<int>(naive_index_.size())) naive_index_.resize(cluster + 1, -1);
    naive_index_[cluster] = static_cast<int>(naive_order_.size());
  }
  naive_order_.push_back(cluster);
  naive_sizes_.push_back(placed_count(cluster));
}

void FlashLayout::placed_changed(int cluster) {
  const int i = naive_index(cluster);
  if (i >= 0) naive_sizes_.set(i, placed_count(cluster));
}

void FlashLayout::charge_naive_append(int cluster) {
  // A packed cluster-by-cluster layout shifts every later cluster (after its first place in the
  // order) by one entry: the running sums of the placed entries after it.
  const int i = naive_index(cluster);
  if (i < 0) {
    add_to_naive_order(cluster);
    return;
  }
  if (!naive_repeats_) {
    stats_.naive_moved_bytes += naive_sizes_.after(i) * entry_bytes_;
    return;
  }
  for (auto it = naive_order_.begin() + i + 1; it != naive_order_.end(); ++it)
    stats_.naive_moved_bytes += placed_count(*it) * entry_bytes_;
}

void FlashLayout::append(int cluster, int pos) {
  charge_naive_append(cluster);
  Slot s = slot_of_.at(cluster);
  Pool& p = pools_[s.pool];
  if (p.used_up + p.used_down + 1 > p.capacity) {
    // The head ran into its partner: this cluster moves to a pool with room.
    std::vector<int> keep = placed_[cluster];
    for (int q : keep) unplace(q);
    placed_[cluster].clear();
    placed_changed(cluster);
    release_slot(cluster);
    stats_.moved_bytes += static_cast<std::int64_t>(keep.size()) * entry_bytes_;
    take_slot(cluster, static_cast<int>(keep.size()) + 1);
    keep.push_back(pos);
    bulk_write(cluster, keep);
    return;
  }
  int& used = s.down ? p.used_down : p.used_up;
  const std::int64_t off = slot_offset(s, used++);
  record_offset(pos, off);
  placed_[cluster].push_back(pos);
  placed_changed(cluster);
  stats_.logical_write_bytes += entry_bytes_;
  touch_hot(cluster);
  if (hot_buffers_ > 0) {
    auto& buf = page_buffer_[cluster];
    buf.push_back(pos);
    if (static_cast<std::int64_t>(buf.size()) * entry_bytes_ >= page_bytes_) flush_page_buffer(cluster);
  } else {
    write_flash(pos, off, cluster);
    stats_.physical_write_bytes += pages_touched({off}) * page_bytes_;  // partial page: amplified
  }
}

// ---------------------------------------------------------------------------
// Placement
// ---------------------------------------------------------------------------
void FlashLayout::place_initial(const ClusterTable& t, const std::vector<std::vector<double>>& co_counts) {
  if (!offset_.empty()) throw Error("flash layout: place_initial called twice");
  if (placement_ == Placement::kSequence) {
    sync(t);
    return;
  }
  std::vector<int> order;
  int largest = 1;
  for (int c = 0; c < static_cast<int>(t.clusters().size()); ++c)
    if (!t.cluster(c).local_window && !t.cluster(c).members.empty()) {
      order.push_back(c);
      largest = std::max(largest, static_cast<int>(t.cluster(c).members.size()));
    }
  if (placement_ == Placement::kInterCluster) order = correlation_chain(co_counts, order);
  pool_entries_ = 2 * largest;  // "twice the maximum cluster size"
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int c = order[i];
    if (i % 2 == 0) {
      const int pool = new_pool(pool_entries_);
      pools_[pool].cluster_up = c;
      slot_of_[c] = Slot{pool, false};
    } else {
      pools_.back().cluster_down = c;
      slot_of_[c] = Slot{static_cast<int>(pools_.size()) - 1, true};
    }
    bulk_write(c, t.cluster(c).members);
    add_to_naive_order(c);
  }
}

void FlashLayout::place_new_cluster(const ClusterTable& t, int cluster) {
  const auto& members = t.cluster(cluster).members;
  for (int pos : members)
    if (offset_.count(pos)) {
      // Leaves a split parent: relocated (its bytes were loaded with the parent, written anew).
      stats_.moved_bytes += entry_bytes_;
      unplace(pos);
    }
  take_slot(cluster, static_cast<int>(members.size()));
  bulk_write(cluster, members);
  add_to_naive_order(cluster);
}

void FlashLayout::sync_cluster(const ClusterTable& t, int cluster) {
  const Cluster& cl = t.cluster(cluster);
  if (cl.local_window) return;
  auto it = placed_.find(cluster);
  if (it == placed_.end() || !slot_of_.count(cluster)) {
    if (!cl.members.empty()) place_new_cluster(t, cluster);
    return;
  }
  // Entries that left (a split child took them) stay as holes until rewritten;
  // the head does not move back, so the remaining entries need no relocation.
  auto& list = it->second;
  list.erase(std::remove_if(list.begin(), list.end(), [&](int pos) { return t.cluster_of(pos) != cluster; }),
             list.end());
  placed_changed(cluster);
  std::vector<int> fresh;
  if (list.size() <= cl.members.size() && std::equal(list.begin(), list.end(), cl.members.begin())) {
    // The usual case (appends): what is placed is a prefix of the members.
    fresh.assign(cl.members.begin() + static_cast<std::ptrdiff_t>(list.size()), cl.members.end());
  } else {
    std::vector<int> have(list);
    std::sort(have.begin(), have.end());
    for (int pos : cl.members)
      if (!std::binary_search(have.begin(), have.end(), pos)) fresh.push_back(pos);
  }
  for (int pos : fresh) {
    if (offset_.count(pos)) {
      stats_.moved_bytes += entry_bytes_;  // came from another cluster's region
      unplace(pos);
    }
    append(cluster, pos);
  }
}

void FlashLayout::sync(const ClusterTable& t) {
  if (placement_ == Placement::kSequence) {
    // Strict sequence order: entry p at p x entry_bytes, written as generated
    // through one tail page buffer (appends never rewrite a page).
    std::vector<std::int64_t> offs;
    for (; sequence_placed_ < t.n_entries(); ++sequence_placed_) {
      const std::int64_t off = static_cast<std::int64_t>(sequence_placed_) * entry_bytes_;
      record_offset(sequence_placed_, off);
      write_flash(sequence_placed_, off, -1);
      offs.push_back(off);
    }
    stats_.logical_write_bytes += static_cast<std::int64_t>(offs.size()) * entry_bytes_;
    stats_.allocated_bytes = static_cast<std::int64_t>(t.n_entries()) * entry_bytes_;
    stats_.physical_write_bytes =
        (stats_.allocated_bytes + page_bytes_ - 1) / page_bytes_ * page_bytes_;  // the tail is written once
    return;
  }
  for (int c = 0; c < static_cast<int>(t.clusters().size()); ++c) sync_cluster(t, c);
}

void FlashLayout::sync(const ClusterTable& t, const StepOutcome& step) {
  if (placement_ == Placement::kSequence) {
    sync(t);
    return;
  }
  // Created clusters first: entries leaving a split parent are re-homed before
  // the parent's list is pruned.
  for (int c : step.created) sync_cluster(t, c);
  for (int c : step.updated) sync_cluster(t, c);
}

// ---------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------
// Sets the bit of every offset's entry slot in slot_bits_ (grown to `words` words); false when an
// offset repeats. The caller clears the bits it read.
bool FlashLayout::mark_slots(const std::vector<std::int64_t>& offsets, std::int64_t words) const {
  if (static_cast<std::int64_t>(slot_bits_.size()) < words) slot_bits_.resize(static_cast<std::size_t>(words), 0);
  bool distinct = true;
  for (std::int64_t off : offsets) {
    const std::int64_t slot = entry_slot(off);
    std::uint64_t& w = slot_bits_[static_cast<std::size_t>(slot / 64)];
    const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
    distinct = distinct && !(w & bit);
    w |= bit;
  }
  return distinct;
}

void FlashLayout::sort_offsets(std::vector<std::int64_t>& offsets) const {
  std::int64_t top = 0;
  bool slots = true;
  for (std::int64_t off : offsets) {
    slots = slots && off >= 0 && entry_slot(off) * entry_bytes_ == off;
    top = std::max(top, off);
  }
  const std::int64_t words = entry_slot(top) / 64 + 1;
  // The bitmap pays off when it is not much larger than the list it sorts.
  if (!slots || words > 4 * static_cast<std::int64_t>(offsets.size()) + 64) {
    std::sort(offsets.begin(), offsets.end());
    return;
  }
  const bool distinct = mark_slots(offsets, words);
  std::size_t n = 0;
  for (std::int64_t i = 0; i < words; ++i) {
    std::uint64_t w = slot_bits_[static_cast<std::size_t>(i)];
    slot_bits_[static_cast<std::size_t>(i)] = 0;
    if (!distinct) continue;  // only clearing: a repeated offset must stay repeated
    while (w) {
      offsets[n++] = (i * 64 + std::countr_zero(w)) * entry_bytes_;
      w &= w - 1;
    }
  }
  if (!distinct) std::sort(offsets.begin(), offsets.end());
}

bool FlashLayout::page_runs_from_bitmap(const std::vector<std::int64_t>& offsets, std::vector<ReadRun>& runs) const {
  std::int64_t words = 0;
  if (!mark_distinct_slots(offsets, words)) return false;
  page_runs_from_marked_slots(words, runs);
  return true;
}

bool FlashLayout::mark_distinct_slots(const std::vector<std::int64_t>& offsets, std::int64_t& words) const {
  // One pass over the offsets checks and marks them (a repeated slot noted without a branch).
  std::vector<std::uint64_t>& bits = slot_bits_;
  std::uint64_t end_word = 0, repeats = 0;  // repeats: nonzero once a slot is marked twice
  bool on_grid = true;
  for (std::int64_t off : offsets) {
    const std::int64_t slot = entry_slot(off);
    if (off < 0 || slot * entry_bytes_ != off) {
      on_grid = false;
      break;
    }
    const std::uint64_t word = static_cast<std::uint64_t>(slot) / 64;
    const std::uint64_t bit = std::uint64_t{1} << (static_cast<std::uint64_t>(slot) % 64);
    if (word >= bits.size()) bits.resize(word + 1, 0);
    repeats |= bits[word] & bit;
    bits[word] |= bit;
    end_word = std::max(end_word, word + 1);
  }
  words = static_cast<std::int64_t>(end_word);
  // A map much larger than the list is sorted instead (as sort_offsets decides).
  if (on_grid && repeats == 0 && words <= 4 * static_cast<std::int64_t>(offsets.size()) + 64) return true;
  std::fill(bits.begin(), bits.begin() + words, 0);
  return false;
}

void FlashLayout::page_runs_from_marked_slots(std::int64_t words, std::vector<ReadRun>& runs) const {
  // Entries in ascending order, each joining the run its first page continues (or opening one);
  // its pieces, entries and longest piece counted as runs_from_offsets counts them. Taken a block
  // of adjacent slots (set bits in a row) at a time: after a block's first entry every entry
  // continues its run (its bytes follow the previous entry's) and its piece, so the block counts as
  // its entries one by one would.
  std::int64_t prev_page = -2, prev_off = -1;
  int piece = 0;
  for (std::int64_t i = 0; i < words; ++i) {
    std::uint64_t w = slot_bits_[static_cast<std::size_t>(i)];
    slot_bits_[static_cast<std::size_t>(i)] = 0;
    while (w) {
      const int lo = std::countr_zero(w);
      const int len = std::countr_one(w >> lo);  // the block: slots i * 64 + lo .. + len - 1
      w = len + lo >= 64 ? 0 : w & ~(((std::uint64_t{1} << len) - 1) << lo);
      const std::int64_t off = (i * 64 + lo) * entry_bytes_;
      const std::int64_t end = off + len * entry_bytes_;  // one past the block's last byte
      const std::int64_t first = page_index(off), last = page_index(end - 1);
      const bool same_run = !runs.empty() && first <= prev_page + 1;
      if (same_run) {
        prev_page = std::max(prev_page, last);
        runs.back().bytes = (prev_page + 1) * page_bytes_ - runs.back().offset_bytes;
      } else {
        runs.push_back({first * page_bytes_, (last - first + 1) * page_bytes_, 0});
        prev_page = last;
      }
      ReadRun& r = runs.back();
      if (!(same_run && off == prev_off + entry_bytes_)) {
        r.pieces += 1;
        piece = 0;
      }
      piece += len;
      r.entries += len;
      r.longest_piece = std::max(r.longest_piece, piece);
      prev_off = end - entry_bytes_;
    }
  }
}

std::vector<ReadRun> FlashLayout::runs_from_offsets(std::vector<std::int64_t>& offsets) const {
  std::vector<ReadRun> runs;
  if (offsets.empty()) return runs;
  if (merge_ == ReadMerge::kPageRuns && page_runs_from_bitmap(offsets, runs)) return runs;
  sort_offsets(offsets);
  if (merge_ == ReadMerge::kContiguousPieces) return pieces_from_sorted_offsets(offsets);
  // Every page an entry touches, in order (offsets are sorted, so the pages already are); a page
  // repeated by the next entry is skipped, a gap closes the run. No page list is materialized.
  std::int64_t run_start = -2, prev = -2;
  for (std::int64_t off : offsets)
    for (std::int64_t page = page_index(off), last = page_index(off + entry_bytes_ - 1); page <= last; ++page) {
      if (page == prev) continue;
      if (page != prev + 1) {
        if (run_start >= 0) runs.push_back({run_start * page_bytes_, (prev - run_start + 1) * page_bytes_, 0});
        run_start = page;
      }
      prev = page;
    }
  runs.push_back({run_start * page_bytes_, (prev - run_start + 1) * page_bytes_, 0});
  // Count entries and byte-contiguous pieces per run (offsets and runs both ascending: one merge pass).
  std::size_t r = 0;
  std::int64_t prev_off = -1;
  int piece = 0;
  for (std::int64_t off : offsets) {
    const std::size_t before = r;
    while (r + 1 < runs.size() && runs[r + 1].offset_bytes <= off) ++r;
    const bool continues = r == before && prev_off >= 0 && off == prev_off + entry_bytes_;
    if (!continues) {
      runs[r].pieces += 1;
      piece = 0;
    }
    piece += 1;
    runs[r].entries += 1;
    runs[r].longest_piece = std::max(runs[r].longest_piece, piece);
    prev_off = off;
  }
  return runs;
}

std::vector<ReadRun> FlashLayout::pieces_from_sorted_offsets(const std::vector<std::int64_t>& offsets) const {
  std::vector<ReadRun> runs;
  std::size_t i = 0;
  while (i < offsets.size()) {
    std::size_t j = i + 1;
    while (j < offsets.size() && offsets[j] == offsets[j - 1] + entry_bytes_) ++j;
    const std::int64_t first_page = offsets[i] / page_bytes_, last_page = (offsets[j - 1] + entry_bytes_ - 1) / page_bytes_;
    const int n = static_cast<int>(j - i);
    runs.push_back({first_page * page_bytes_, (last_page - first_page + 1) * page_bytes_, n, 1, n});
    i = j;
  }
  return runs;
}

void FlashLayout::add_flash_offsets(std::span<const int> positions) const {
  for (int pos : positions)
    if (pos >= 0 && pos < static_cast<int>(flash_offset_.size()) && flash_offset_[pos] >= 0)
      read_offsets_.push_back(flash_offset_[pos]);
}

std::vector<ReadRun> FlashLayout::read_runs_of(const std::vector<int>& positions) const {
  read_offsets_.clear();
  add_flash_offsets(positions);
  return runs_from_offsets(read_offsets_);
}

std::vector<ReadRun> FlashLayout::read_runs_of_entries(const ClusterTable& t, const std::vector<int>& clusters) const {
  // The offsets in positions_of's order (members, then buffered, cluster by cluster), gathered
  // straight off the clusters: a decode step reads a tenth of the context or more, which
  // positions_of copied first. (Marking the bitmap in this same pass was measured slower: the
  // gather's loads, which miss the L2 cache, overlap less behind the marking's stores.)
  read_offsets_.clear();
  if (placement_ == Placement::kSequence) {
    for (int c : clusters) {
      add_flash_offsets(t.cluster(c).members);
      add_flash_offsets(t.cluster(c).buffered);
    }
  } else {
    // The cluster placements list each cluster's offsets on flash as they write them: the same
    // offsets as its entries' (buffered ones are never on flash), read in a row instead of one
    // position at a time. (check_invariants compares the lists with the table.)
    for (int c : clusters)
      if (c >= 0 && c < static_cast<int>(cluster_offsets_.size()))
        read_offsets_.insert(read_offsets_.end(), cluster_offsets_[c].begin(), cluster_offsets_[c].end());
  }
  return runs_from_offsets(read_offsets_);
}

std::vector<ReadRun> FlashLayout::read_runs(const ClusterTable& t, const std::vector<int>& clusters) const {
  read_offsets_.clear();
  for (int c : clusters) add_flash_offsets(t.cluster(c).members);
  return runs_from_offsets(read_offsets_);
}

void FlashLayout::check_invariants(const ClusterTable& t) const {
  // The running sums of the packed layout's order agree with the placed lists, and each position
  // on flash is where offset_ says it is.
  if (!naive_repeats_) {
    std::int64_t after = 0;
    for (int i = static_cast<int>(naive_order_.size()) - 1; i >= 0; --i) {
      if (naive_sizes_.value(i) != placed_count(naive_order_[i]) || naive_sizes_.after(i) != after)
        throw Error(fmt::format("packed-layout order, cluster {}: running sums disagree with the placed entries",
                                naive_order_[i]));
      after += naive_sizes_.value(i);
    }
  }
  for (int pos = 0; pos < static_cast<int>(flash_offset_.size()); ++pos) {
    auto it = offset_.find(pos);
    const bool on_flash = it != offset_.end() && content_at(it->second) == pos;
    if (flash_offset_[pos] != (on_flash ? it->second : -1))
      throw Error(fmt::format("position {}: the dense flash offset disagrees with the layout", pos));
  }
  // Each cluster's list of offsets on flash holds those of its entries on flash (the reads'
  // source), compared as sorted lists.
  if (placement_ != Placement::kSequence)
    for (int c = 0; c < static_cast<int>(t.clusters().size()); ++c) {
      std::vector<std::int64_t> want;
      for (const auto* list : {&t.cluster(c).members, &t.cluster(c).buffered})
        for (int pos : *list)
          if (pos < static_cast<int>(flash_offset_.size()) && flash_offset_[pos] >= 0) want.push_back(flash_offset_[pos]);
      std::vector<std::int64_t> have = c < static_cast<int>(cluster_offsets_.size()) ? cluster_offsets_[c]
                                                                                     : std::vector<std::int64_t>{};
      std::sort(want.begin(), want.end());
      std::sort(have.begin(), have.end());
      if (have != want)
        throw Error(fmt::format("cluster {}: {} offsets listed on flash, its entries have {} there", c, have.size(),
                                want.size()));
    }
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const Pool& p = pools_[i];
    if (p.used_up + p.used_down > p.capacity)
      throw Error(fmt::format("pool {}: heads crossed ({} up + {} down > {})", i, p.used_up, p.used_down, p.capacity));
    if (i + 1 < pools_.size() && p.begin + static_cast<std::int64_t>(p.capacity) * entry_bytes_ > pools_[i + 1].begin)
      throw Error(fmt::format("pools {} and {} overlap", i, i + 1));
  }
  for (const auto& entry : offset_) {
    // Named copies, not structured bindings: clang 14 (the fuzz build) cannot capture those.
    const auto pos = entry.first;
    const auto off = entry.second;
    const int at = content_at(off);
    const bool buffered = [&] {
      for (const auto& [c, buf] : page_buffer_)
        if (std::find(buf.begin(), buf.end(), pos) != buf.end()) return true;
      return false;
    }();
    if (at != pos && !buffered)
      throw Error(fmt::format("position {} recorded at byte {} but flash holds {} there", pos, off, at));
    if (placement_ != Placement::kSequence) {
      const int c = t.cluster_of(pos);
      auto s = slot_of_.find(c);
      if (s == slot_of_.end()) throw Error(fmt::format("position {} of cluster {} has no pool", pos, c));
      const Pool& p = pools_[s->second.pool];
      const std::int64_t idx = (off - p.begin) / entry_bytes_;
      const bool inside = s->second.down ? idx >= p.capacity - p.used_down && idx < p.capacity : idx >= 0 && idx < p.used_up;
      if (!inside) throw Error(fmt::format("position {} of cluster {} lies outside its pool half", pos, c));
    }
  }
}

}  // namespace mobisim::policies::kvcluster
