#pragma once
// A list of integers that grows at its end, whose values change one at a time, and whose sums
// after any index are asked for often: a Fenwick (binary indexed) tree, O(log n) for each of the
// three operations. FlashLayout counts with it the bytes a packed cluster-by-cluster layout would
// shift on an append (every cluster after the one appended to), which summed the clusters after it
// one by one on every append. Integer sums: the result does not depend on the order of additions.
#include <cstdint>
#include <vector>

namespace mobisim::policies::kvcluster {

class RunningSums {
 public:
  int size() const { return static_cast<int>(value_.size()); }
  std::int64_t value(int i) const { return value_[static_cast<std::size_t>(i)]; }
  // Appends `v` as element size().
  void push_back(std::int64_t v) {
    value_.push_back(v);
    const int node = size();  // 1-based: it covers elements (node - lowbit(node), node]
    const int below = node - (node & -node);
    tree_.push_back(v + prefix(node - 1) - prefix(below));
    total_ += v;
  }
  void set(int i, std::int64_t v) {
    const std::int64_t delta = v - value_[static_cast<std::size_t>(i)];
    if (delta == 0) return;
    value_[static_cast<std::size_t>(i)] = v;
    total_ += delta;
    for (int node = i + 1; node <= size(); node += node & -node) tree_[static_cast<std::size_t>(node - 1)] += delta;
  }
  // Sum of elements [0, count).
  std::int64_t prefix(int count) const {
    std::int64_t s = 0;
    for (int node = count; node > 0; node -= node & -node) s += tree_[static_cast<std::size_t>(node - 1)];
    return s;
  }
  // Sum of the elements after index i.
  std::int64_t after(int i) const { return total_ - prefix(i + 1); }

 private:
  std::vector<std::int64_t> value_, tree_;
  std::int64_t total_ = 0;
};

}  // namespace mobisim::policies::kvcluster
