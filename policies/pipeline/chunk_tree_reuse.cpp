#include "policies/pipeline/chunk_tree_reuse.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema ChunkTreeReuse::schema() {
  ParamSchema s;
  s.real("storage_limit_gb", 8.0, "flash the tree may hold (PerCache section 5.4: 8 GB)").positive().with_unit("GB");
  s.text("eviction", std::string("lfu"), "lfu (PerCache) | pgdsf (RAGCache; a slice's cost is its token count)")
      .in({"lfu", "pgdsf"});
  s.boolean("boundary_rules", true, "PerCache appendix B.2's two tokenization boundary rules");
  s.integer("boundary_tokens", 4, "rule 2: the final matched node's last tokens, recomputed").range(0, 1 << 20);
  s.text("payload", std::string("kv"), "what a stored token weighs: kv (K/V) | qkv (PerCache's Q, K and V)")
      .in({"kv", "qkv"});
  return s;
}

ChunkTreeReuse::ChunkTreeReuse(const Params& p)
    : tree_(p.real("storage_limit_gb") * 1e9, policies::parse_kv_eviction(p.text("eviction")),
            p.boolean("boundary_rules")),
      boundary_rules_(p.boolean("boundary_rules")),
      boundary_tokens_(p.integer("boundary_tokens")),
      qkv_(p.text("payload") == "qkv") {}

void ChunkTreeReuse::begin_model(const models::ModelSpec& spec) {
  bytes_per_token_ = qkv_ ? spec.qkv_bytes_per_token(spec.kv_dtype) : spec.kv_bytes_per_token();
}

void ChunkTreeReuse::name_chunks(const std::vector<std::uint64_t>& chunk_keys) {
  if (!chunk_ids_.empty()) throw Error("internal: chunk_tree's chunks are named before its first request");
  for (std::size_t i = 0; i < chunk_keys.size(); ++i)
    if (!chunk_ids_.emplace(chunk_keys[i], static_cast<std::int32_t>(i)).second)
      throw Error(fmt::format("internal: chunk key {:#x} given twice", chunk_keys[i]));
}

// The leading system segment (the root) and the chunk segments right after it.
ChunkTreeReuse::TreePath ChunkTreeReuse::path_of(const Request& r) {
  TreePath path;
  std::size_t i = 0;
  if (!r.prompt.empty() && r.prompt.front().kind == "system") path.root_tokens = r.prompt[i++].tokens;
  for (; i < r.prompt.size() && r.prompt[i].kind == "chunk"; ++i) {
    const auto next = static_cast<std::int32_t>(chunk_ids_.size());
    path.chunks.push_back(chunk_ids_.emplace(r.prompt[i].key, next).first->second);
    path.tokens.push_back(r.prompt[i].tokens);
  }
  return path;
}

KvMatch ChunkTreeReuse::match(const Request& r, double now_s) {
  (void)now_s;
  files_.clear();
  const TreePath path = path_of(r);
  const policies::KvMatch m = tree_.match(path.chunks);
  if (m.nodes.empty()) return {};
  tree_.touch(m);
  std::int64_t trim = 0;
  if (boundary_rules_)
    trim = std::min<std::int64_t>(boundary_tokens_, tree_.nodes()[static_cast<std::size_t>(m.nodes.back())].tokens);
  KvMatch out;
  out.tokens = m.tokens - trim;
  out.chunks = m.chunks;
  for (const std::int32_t id : m.nodes) files_.push_back(tree_.nodes()[static_cast<std::size_t>(id)].tokens);
  out.bytes = static_cast<double>(out.tokens) * bytes_per_token_;
  return out;
}

KvStored ChunkTreeReuse::store(const Request& r, double now_s) {
  (void)now_s;
  const TreePath path = path_of(r);
  const auto slice = [&](std::int32_t chunk, std::int64_t tokens) {
    return policies::KvSlice{chunk, tokens, static_cast<double>(tokens) * bytes_per_token_, static_cast<double>(tokens)};
  };
  std::vector<policies::KvSlice> slices;
  for (std::size_t k = 0; k < path.chunks.size(); ++k) slices.push_back(slice(path.chunks[k], path.tokens[k]));
  // Chunk slices are appended to the tree's node list (the root has its own slot): the growth is
  // what was inserted, without a walk over the tree.
  const std::size_t nodes_before = tree_.nodes().size();
  const std::uint64_t evicted_before = tree_.evictions();
  KvStored out;
  out.bytes = tree_.insert(slice(-1, path.root_tokens), slices);
  out.evicted = static_cast<int>(tree_.evictions() - evicted_before);
  out.inserted = static_cast<int>(tree_.nodes().size() - nodes_before);
  return out;
}

MOBISIM_REGISTER(KvReuse, ChunkTreeReuse, "chunk_tree",
                 "PerCache's QKV cache tree / RAGCache's knowledge tree: the system prompt and the retrieved chunks' "
                 "slices, matched from the root until the first miss.")

}  // namespace mobisim::policies::pipeline
