#pragma once
// The simulator's pending-event set, ordered by (time, key). Keys are unique (the simulator packs
// priority, insertion sequence and slot into them), so (time, key) is a total order and the pop
// order is fully determined by the entries, whatever structure holds them.
//
// Why this shape. With 100,000 pending events, a plain heap's pop walks ~9 levels and the deepest
// three or four miss the cache one after another (perf on BM_HoldModelSteady/100000: half of the
// time on the first load of a level). So the set is two-tier:
//  - `near_`: a 4-ary min-heap of every entry earlier than `boundary_`, kept at a working size of
//    8,192 to 32,768 entries (128-512 KiB, cache-resident). Its array is 64-byte aligned with the
//    root at index 3, so the four children of a node (storage indices 4s-8 .. 4s-5) fill exactly
//    one cache line: one line per level.
//  - `far_`: every entry at or after `boundary_`, unsorted; a push there is an append.
// When `near_` outgrows its working size its later part spills to `far_`; when it runs empty, one
// sequential partition pass around a sampled pivot moves the earliest ~8,192 entries of `far_`
// back (the pivot becomes the new boundary). Both are exact: the boundary is an entry, and every
// entry is on the side of it that its (time, key) says. A queue that never held more than 32,768
// entries lives in `near_` alone (no boundary): small simulations run a plain heap.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "sim/time.h"

namespace mobisim::sim {

struct EventEntry {
  Time time;
  std::uint64_t key;
};

// Times are never negative (the clock starts at 0 and events are never scheduled in the past),
// so (time, key) compares as one unsigned 128-bit number: no data-dependent branches.
inline unsigned __int128 event_rank(const EventEntry& e) {
  return (static_cast<unsigned __int128>(static_cast<std::uint64_t>(e.time)) << 64) | e.key;
}
inline bool event_before(const EventEntry& a, const EventEntry& b) { return event_rank(a) < event_rank(b); }

// A 4-ary min-heap of entries (the near tier of EventQueue; usable alone).
class QuaternaryHeap {
 public:
  using Entry = EventEntry;

  QuaternaryHeap() = default;
  QuaternaryHeap(const QuaternaryHeap&) = delete;
  QuaternaryHeap& operator=(const QuaternaryHeap&) = delete;
  ~QuaternaryHeap() { release(); }

  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  const Entry& top() const { return data_[kRoot]; }
  void clear() { size_ = 0; }
  void reserve(std::size_t n) {
    if (n > capacity_) grow(n);
  }

  void push(Entry e) {
    if (size_ == capacity_) grow(std::max<std::size_t>(2 * capacity_, 64));
    std::size_t s = kRoot + size_++;
    while (s > kRoot) {
      const std::size_t parent = s / 4 + 2;
      if (!event_before(e, data_[parent])) break;
      data_[s] = data_[parent];
      s = parent;
    }
    data_[s] = e;
  }

  // Removes and returns the smallest entry. Precondition: !empty().
  Entry pop() {
    const Entry top = data_[kRoot];
    const Entry last = data_[kRoot + --size_];
    sift_down(kRoot, last, kRoot + size_);
    return top;
  }

  // The entries in storage (not sorted) order, for EventQueue's spill.
  Entry* entries() { return data_ + kRoot; }
  // Keeps the first `n` of entries() and restores the heap order over them (Floyd's bottom-up build).
  void truncate_and_heapify(std::size_t n) {
    size_ = n;
    if (n < 2) return;
    const std::size_t end = kRoot + n;
    const std::size_t last_parent = (end - 1) / 4 + 2;
    for (std::size_t s = last_parent + 1; s-- > kRoot;) sift_down(s, data_[s], end);
  }

  // The entry pop() returns after the current top, if nothing smaller is pushed meanwhile (the
  // smallest child of the root); nullptr when the queue holds fewer than two entries. A hint for
  // prefetching the memory the event after next will touch.
  const Entry* runner_up() const {
    if (size_ < 2) return nullptr;
    const std::size_t end = kRoot + size_;
    return &data_[end >= 8 ? min_of_four(4) : min_of_range(4, end)];
  }
  // The root's children and grandchildren (up to 20 entries, contiguous in storage): the entry
  // after the runner-up is always among them (its parent is the top or the runner-up). A prefetch hint.
  std::span<const Entry> top_levels() const {
    if (size_ < 2) return {};
    return {data_ + 4, std::min<std::size_t>(size_ - 1, 20)};
  }

 private:
  static constexpr std::size_t kRoot = 3;  // root at storage index 3: sibling groups start at multiples of 4
  static constexpr std::align_val_t kAlign{64};

  // Places `e` at storage index `s` or below it, among the entries in [kRoot, end).
  void sift_down(std::size_t s, Entry e, std::size_t end) {
    for (;;) {
      const std::size_t first = 4 * s - 8;
      if (first >= end) break;
      const std::size_t best = first + 4 <= end ? min_of_four(first) : min_of_range(first, end);
      if (!event_before(data_[best], e)) break;
      data_[s] = data_[best];
      s = best;
    }
    data_[s] = e;
  }
  std::size_t min_of_four(std::size_t first) const {
    const std::size_t a = event_before(data_[first + 1], data_[first]) ? first + 1 : first;
    const std::size_t b = event_before(data_[first + 3], data_[first + 2]) ? first + 3 : first + 2;
    return event_before(data_[b], data_[a]) ? b : a;
  }
  std::size_t min_of_range(std::size_t first, std::size_t end) const {
    std::size_t best = first;
    for (std::size_t c = first + 1; c < end; ++c)
      if (event_before(data_[c], data_[best])) best = c;
    return best;
  }
  void grow(std::size_t capacity) {
    auto* fresh = static_cast<Entry*>(::operator new((kRoot + capacity) * sizeof(Entry), kAlign));
    if (data_) std::memcpy(fresh + kRoot, data_ + kRoot, size_ * sizeof(Entry));
    release();
    data_ = fresh;
    capacity_ = capacity;
  }
  void release() {
    if (data_) ::operator delete(data_, kAlign);
    data_ = nullptr;
  }

  Entry* data_ = nullptr;  // storage; entries live at [kRoot, kRoot + size_)
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};


class EventQueue {
 public:
  using Entry = EventEntry;

  bool empty() const { return near_.empty(); }  // far_ is non-empty only while near_ is too
  std::size_t size() const { return near_.size() + far_.size(); }
  // The earliest entry. Precondition: !empty().
  const Entry& top() const { return near_.top(); }
  void clear() {
    near_.clear();
    far_.clear();
    bounded_ = false;
  }
  void reserve(std::size_t n) { near_.reserve(std::min(n, kSpillAbove + 1)); }

  void push(Entry e) {
    if (bounded_ && !event_before(e, boundary_)) {
      far_.push_back(e);
      return;
    }
    near_.push(e);
    if (near_.size() > kSpillAbove) spill();
  }

  // Removes and returns the earliest entry. Precondition: !empty().
  Entry pop() {
    const Entry e = near_.pop();
    if (near_.empty()) refill();
    return e;
  }

  // The entry pop() returns after the current top if nothing earlier is pushed meanwhile, or
  // nullptr if that is not known cheaply. A prefetch hint.
  const Entry* runner_up() const { return near_.runner_up(); }
  // Entries popped within the next few pops if nothing earlier is pushed (the heap's levels below
  // its top; the second and third pops are among them). A prefetch hint.
  std::span<const Entry> soon() const { return near_.top_levels(); }

 private:
  // The heap's working size: 8,192 entries (128 KiB). It spills its later three quarters to far_
  // above four times that, and a refill moves about that many back.
  static constexpr std::size_t kNearTarget = 8192;
  static constexpr std::size_t kSpillAbove = 4 * kNearTarget;
  static constexpr std::size_t kSamples = 128;

  // An entry of [first, first + n) near the q/kSamples quantile: the q-th smallest of kSamples
  // entries taken at even strides. Exactly q sampled entries are before it (keys are unique), so
  // partitioning around it leaves at least q entries below and kSamples - q at or above it.
  static Entry sample_quantile(const Entry* first, std::size_t n, std::size_t q) {
    std::array<Entry, kSamples> sample;
    const std::size_t stride = n / kSamples;
    for (std::size_t i = 0; i < kSamples; ++i) sample[i] = first[i * stride];
    std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(q), sample.end(), event_before);
    return sample[q];
  }

  // near_ outgrew its working size: move its later part (at or after a sampled pivot at the 1/4
  // quantile) to far_. The pivot is before the old boundary (it was in near_), so far_ stays at
  // or after the new boundary.
  void spill() {
    Entry* first = near_.entries();
    const std::size_t n = near_.size();
    const Entry pivot = sample_quantile(first, n, kSamples / 4);
    Entry* mid = std::partition(first, first + n, [&](const Entry& e) { return event_before(e, pivot); });
    far_.insert(far_.end(), mid, first + n);
    near_.truncate_and_heapify(static_cast<std::size_t>(mid - first));
    boundary_ = pivot;
    bounded_ = true;
  }

  // near_ ran empty: move the earliest ~kNearTarget entries of far_ (all of it if that is small)
  // into it, in one sequential partition pass around a sampled pivot that becomes the boundary.
  void refill() {
    if (far_.size() <= kNearTarget) {
      for (const Entry& e : far_) near_.push(e);
      far_.clear();
      bounded_ = false;
      return;
    }
    const std::size_t q = std::clamp<std::size_t>(kSamples * kNearTarget / far_.size(), 1, kSamples - 1);
    const Entry pivot = sample_quantile(far_.data(), far_.size(), q);
    auto mid = std::partition(far_.begin(), far_.end(), [&](const Entry& e) { return event_before(e, pivot); });
    const std::size_t moved = static_cast<std::size_t>(mid - far_.begin());
    for (auto it = far_.begin(); it != mid; ++it) near_.push(*it);
    // Close the gap with entries from the back (the order inside far_ is irrelevant).
    const std::size_t rest = far_.size() - moved;
    const std::size_t from_back = std::min(moved, rest);
    std::memmove(far_.data(), far_.data() + far_.size() - from_back, from_back * sizeof(Entry));
    far_.resize(rest);
    boundary_ = pivot;
    bounded_ = true;
  }

  QuaternaryHeap near_;     // every entry before boundary_ (every entry, while !bounded_)
  std::vector<Entry> far_;  // every entry at or after boundary_; non-empty only if near_ is
  Entry boundary_{0, 0};
  bool bounded_ = false;
};

}  // namespace mobisim::sim
