#include "policies/rag/kv_tree.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "sim/error.h"

namespace mobisim::policies {

KvEviction parse_kv_eviction(const std::string& s) {
  if (s == "lfu") return KvEviction::kLfu;
  if (s == "pgdsf") return KvEviction::kPgdsf;
  throw ConfigError(fmt::format("unknown KV eviction policy '{}' (known: lfu, pgdsf)", s));
}

KvTree::KvTree(double limit_bytes, KvEviction eviction, bool boundary_rule)
    : limit_(limit_bytes), eviction_(eviction), boundary_rule_(boundary_rule) {
  nodes_.push_back(KvNode{});  // root slot, not alive until the first insertion
}

// Whether child `c` with a continuation of `len` chunks beats the best so far: longer, then more
// frequent, then older.
bool KvTree::preferred(std::int32_t c, std::int64_t len, std::int32_t best_child, std::int64_t best) const {
  if (best_child < 0 || len != best) return best_child < 0 || len > best;
  const KvNode &n = nodes_[static_cast<std::size_t>(c)], &b = nodes_[static_cast<std::size_t>(best_child)];
  return n.freq > b.freq || (n.freq == b.freq && n.created < b.created);
}

std::int64_t KvTree::longest(std::int32_t node, const std::vector<std::int32_t>& chunks, std::size_t i,
                             std::int32_t* first_child) const {
  if (i >= chunks.size()) return 0;
  std::int64_t best = 0;
  std::int32_t best_child = -1;
  for (std::int32_t c : nodes_[static_cast<std::size_t>(node)].children) {
    const KvNode& n = nodes_[static_cast<std::size_t>(c)];
    if (!n.alive || n.chunk != chunks[i]) continue;
    const std::int64_t len = 1 + longest(c, chunks, i + 1, nullptr);
    if (preferred(c, len, best_child, best)) {
      best = len;
      best_child = c;
    }
  }
  if (first_child) *first_child = best_child;
  return best;
}

std::int64_t KvTree::best_chain(std::int32_t node, const std::vector<std::int32_t>& chunks, std::size_t i,
                                std::int32_t* chain, std::int32_t* scratch) const {
  if (i >= chunks.size()) return 0;
  std::int32_t* candidate = scratch;                     // a child's own chain
  std::int32_t* below = scratch + (chunks.size() - i);  // the scratch of the level below
  std::int64_t best = 0;
  std::int32_t best_child = -1;
  for (std::int32_t c : nodes_[static_cast<std::size_t>(node)].children) {
    const KvNode& n = nodes_[static_cast<std::size_t>(c)];
    if (!n.alive || n.chunk != chunks[i]) continue;
    const std::int64_t sub = best_chain(c, chunks, i + 1, candidate, below);
    const std::int64_t len = 1 + sub;
    if (preferred(c, len, best_child, best)) {
      best = len;
      best_child = c;
      chain[0] = c;
      std::copy(candidate, candidate + sub, chain + 1);
    }
  }
  return best;
}

// The same walk as choosing, level by level, the child longest() prefers: that child's own best
// chain is the one the next level would choose, so one descent finds the whole path.
KvMatch KvTree::match(const std::vector<std::int32_t>& chunks) const {
  KvMatch m;
  if (!nodes_[0].alive) return m;
  m.nodes.push_back(0);
  m.tokens = nodes_[0].tokens;
  m.bytes = nodes_[0].bytes;
  const std::size_t n = chunks.size();
  std::vector<std::int32_t> chain(n + 1), scratch(n * (n + 1) / 2 + n + 1);
  const std::int64_t len = best_chain(0, chunks, 0, chain.data(), scratch.data());
  for (std::int64_t k = 0; k < len; ++k) {
    const KvNode& node = nodes_[static_cast<std::size_t>(chain[static_cast<std::size_t>(k)])];
    m.nodes.push_back(chain[static_cast<std::size_t>(k)]);
    m.tokens += node.tokens;
    m.bytes += node.bytes;
    ++m.chunks;
  }
  return m;
}

void KvTree::update_priority(KvNode& n) {
  n.priority = clock_ + static_cast<double>(n.freq) * n.cost_s / std::max(1.0, n.bytes);
}

void KvTree::touch(const KvMatch& m) {
  ++tick_;
  for (std::int32_t id : m.nodes) {
    KvNode& n = nodes_[static_cast<std::size_t>(id)];
    ++n.freq;
    n.last_access = tick_;
    update_priority(n);
  }
}

std::int32_t KvTree::make_node(std::int32_t parent, const KvSlice& s) {
  KvNode n;
  n.chunk = s.chunk;
  n.tokens = s.tokens;
  n.bytes = s.bytes;
  n.cost_s = s.cost_s;
  n.freq = 1;
  n.last_access = ++tick_;
  n.created = tick_;
  n.parent = parent;
  n.alive = true;
  update_priority(n);
  nodes_.push_back(n);
  const auto id = static_cast<std::int32_t>(nodes_.size() - 1);
  nodes_[static_cast<std::size_t>(parent)].children.push_back(id);
  used_ += s.bytes;
  return id;
}

bool KvTree::evict_one(const std::vector<std::int32_t>& protect) {
  std::int32_t victim = -1;
  auto key_less = [&](const KvNode& a, const KvNode& b) {
    if (eviction_ == KvEviction::kPgdsf) {
      if (a.priority != b.priority) return a.priority < b.priority;
    } else if (a.freq != b.freq) {
      return a.freq < b.freq;
    }
    if (a.last_access != b.last_access) return a.last_access < b.last_access;
    return a.created < b.created;
  };
  for (std::size_t i = 1; i < nodes_.size(); ++i) {
    const KvNode& n = nodes_[i];
    if (!n.alive) continue;
    bool leaf = true;
    for (auto c : n.children)
      if (nodes_[static_cast<std::size_t>(c)].alive) leaf = false;
    if (!leaf) continue;
    if (std::find(protect.begin(), protect.end(), static_cast<std::int32_t>(i)) != protect.end()) continue;
    if (victim < 0 || key_less(n, nodes_[static_cast<std::size_t>(victim)])) victim = static_cast<std::int32_t>(i);
  }
  if (victim < 0) return false;
  KvNode& v = nodes_[static_cast<std::size_t>(victim)];
  if (eviction_ == KvEviction::kPgdsf) clock_ = std::max(clock_, v.priority);
  v.alive = false;
  used_ -= v.bytes;
  auto& siblings = nodes_[static_cast<std::size_t>(v.parent)].children;
  siblings.erase(std::remove(siblings.begin(), siblings.end(), victim), siblings.end());
  ++evictions_;
  return true;
}

double KvTree::insert(const KvSlice& root, const std::vector<KvSlice>& chunks) {
  double written = 0;
  std::vector<std::int32_t> path{0};
  auto fits = [&](double bytes) {
    while (used_ + bytes > limit_)
      if (!evict_one(path)) return false;
    return true;
  };
  ++tick_;
  if (!nodes_[0].alive) {
    if (!fits(root.bytes)) return 0;
    KvNode& r = nodes_[0];
    r.chunk = -1;
    r.tokens = root.tokens;
    r.bytes = root.bytes;
    r.cost_s = root.cost_s;
    r.freq = 1;
    r.alive = true;
    r.created = r.last_access = tick_;
    update_priority(r);
    used_ += root.bytes;
    written += root.bytes;
  }
  std::vector<std::int32_t> ids;
  for (const auto& s : chunks) ids.push_back(s.chunk);
  std::int32_t cur = 0;
  std::size_t i = 0;
  // Shared part of the path: descend while the tree has the chunk, except that (rule 1) the
  // last common node is not shared when the new path continues beyond it.
  while (i < ids.size()) {
    std::int32_t next = -1;
    const std::int64_t len = longest(cur, ids, i, &next);
    if (next < 0) break;
    const bool last_common = (len == 1);
    if (boundary_rule_ && last_common && i + 1 < ids.size()) break;
    cur = next;
    path.push_back(cur);
    ++i;
  }
  for (; i < ids.size(); ++i) {
    if (!fits(chunks[i].bytes)) break;
    cur = make_node(cur, chunks[i]);
    path.push_back(cur);
    written += chunks[i].bytes;
  }
  return written;
}

void KvTree::set_limit(double limit_bytes) {
  limit_ = limit_bytes;
  while (used_ > limit_)
    if (!evict_one({})) break;
  if (used_ > limit_ && nodes_[0].alive && nodes_[0].children.empty()) {
    nodes_[0].alive = false;
    used_ -= nodes_[0].bytes;
    ++evictions_;
  }
}

std::size_t KvTree::live_nodes() const {
  return static_cast<std::size_t>(std::count_if(nodes_.begin(), nodes_.end(), [](const KvNode& n) { return n.alive; }));
}

std::vector<std::vector<std::int32_t>> KvTree::paths() const {
  std::vector<std::vector<std::int32_t>> out;
  std::vector<std::int32_t> cur;
  std::function<void(std::int32_t)> walk = [&](std::int32_t id) {
    const KvNode& n = nodes_[static_cast<std::size_t>(id)];
    bool any = false;
    for (auto c : n.children) {
      if (!nodes_[static_cast<std::size_t>(c)].alive) continue;
      any = true;
      cur.push_back(nodes_[static_cast<std::size_t>(c)].chunk);
      walk(c);
      cur.pop_back();
    }
    if (!any && id != 0) out.push_back(cur);
  };
  if (nodes_[0].alive) walk(0);
  return out;
}

}  // namespace mobisim::policies
