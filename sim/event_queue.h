#pragma once
// The simulator's pending-event set: a 4-ary min-heap of 16-byte entries ordered by (time, key).
//
// Why this shape: with 100,000 pending events every pop walks ~8 levels of the heap, and the
// walk's memory traffic is what costs. A 4-ary heap is half as deep as a binary one, and the
// array is 64-byte aligned with the root stored at index 3, so the four children of a node
// (storage indices 4s-8 .. 4s-5) always fill exactly one cache line: one line per level.
// Keys are unique (the simulator packs priority, insertion sequence and slot into them), so
// (time, key) is a total order and the pop order is fully determined.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "sim/time.h"

namespace mobisim::sim {

class EventQueue {
 public:
  struct Entry {
    Time time;
    std::uint64_t key;
  };

  // Times are never negative (the clock starts at 0 and events are never scheduled in the past),
  // so (time, key) compares as one unsigned 128-bit number: no data-dependent branches.
  static bool before(const Entry& a, const Entry& b) { return rank(a) < rank(b); }

  EventQueue() = default;
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;
  ~EventQueue() { release(); }

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
      if (!before(e, data_[parent])) break;
      data_[s] = data_[parent];
      s = parent;
    }
    data_[s] = e;
  }

  // Removes and returns the smallest entry. Precondition: !empty().
  Entry pop() {
    const Entry top = data_[kRoot];
    const Entry last = data_[kRoot + --size_];
    const std::size_t end = kRoot + size_;
    std::size_t s = kRoot;
    for (;;) {
      const std::size_t first = 4 * s - 8;
      if (first >= end) break;
      prefetch_grandchildren(first, end);
      const std::size_t best = first + 4 <= end ? min_of_four(first) : min_of_range(first, end);
      if (!before(data_[best], last)) break;
      data_[s] = data_[best];
      s = best;
    }
    data_[s] = last;
    return top;
  }

  // The entry pop() returns after the current top, if nothing smaller is pushed meanwhile (the
  // smallest child of the root); nullptr when the queue holds fewer than two entries. A hint for
  // prefetching the memory the event after next will touch.
  const Entry* runner_up() const {
    if (size_ < 2) return nullptr;
    const std::size_t end = kRoot + size_;
    return &data_[end >= 8 ? min_of_four(4) : min_of_range(4, end)];
  }

 private:
  static constexpr std::size_t kRoot = 3;  // root at storage index 3: sibling groups start at multiples of 4
  static constexpr std::align_val_t kAlign{64};

  static unsigned __int128 rank(const Entry& e) {
    return (static_cast<unsigned __int128>(static_cast<std::uint64_t>(e.time)) << 64) | e.key;
  }
  // Deep levels of a large heap are cache misses, one after another down the path. While the
  // children of a node are compared, fetch the four lines holding all their children, so the next
  // level's miss overlaps this one's instead of following it.
  void prefetch_grandchildren(std::size_t first, std::size_t end) const {
    const std::size_t grand = 4 * first - 8;
    if (grand >= end) return;
    const char* p = reinterpret_cast<const char*>(data_ + grand);
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
    __builtin_prefetch(p + 128);
    __builtin_prefetch(p + 192);
  }
  std::size_t min_of_four(std::size_t first) const {
    const std::size_t a = before(data_[first + 1], data_[first]) ? first + 1 : first;
    const std::size_t b = before(data_[first + 3], data_[first + 2]) ? first + 3 : first + 2;
    return before(data_[b], data_[a]) ? b : a;
  }
  std::size_t min_of_range(std::size_t first, std::size_t end) const {
    std::size_t best = first;
    for (std::size_t c = first + 1; c < end; ++c)
      if (before(data_[c], data_[best])) best = c;
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

}  // namespace mobisim::sim
