#pragma once
// The QA bank (PerCache section 4.1.1, MeanCache's semantic cache): entries of
// (query text, query embedding, answer), matched by cosine similarity of the
// query embeddings against a threshold tau_query, stored under a byte budget
// with LFU eviction (PerCache: "retrieval count counter ... LFU").
//
// An entry may be *pending*: a query whose answer has not been decoded yet
// (PerCache's scheduler stores predicted queries prefill-only when tau_query is
// above tau_scheduler). Pending entries never match; the QKV->QA conversion
// decodes them later. Every entry also remembers the chunk list its query
// retrieved, so the QA->QKV conversion can restore evicted tensors.
//
// Eviction order: lowest hit count first, then oldest insertion. Matching ties
// break towards the older entry. Everything is deterministic.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "traces/embedder.h"

namespace mobisim::policies {

struct QaEntry {
  std::string query;
  std::vector<float> embedding;
  std::string answer;                    // empty while pending
  bool answered = false;
  std::int64_t answer_tokens = 0;
  std::vector<std::int32_t> chunks;      // chunks retrieved by the query, best first
  bool predicted = false;                // from the query predictor (not a real user query)
  std::int64_t hits = 0;                 // LFU counter
  std::uint64_t inserted = 0;            // insertion sequence number
  std::uint64_t id = 0;                  // stable id (survives other entries' eviction)
  double chunks_at_s = 0;                // when `chunks` was retrieved (dynamic refresh: newer chunks may rank)
  std::int64_t refreshes = 0;            // times the dynamic refresh re-generated this entry
};

struct QaMatch {
  double similarity = -1.0;              // best similarity over answered entries (-1: none)
  std::optional<std::size_t> index;      // set when similarity >= tau
};

class QaBank {
 public:
  // `capacity_bytes` > 0; `entry_bytes`: the on-flash size of one entry (PerCache Table 1: 4 KB).
  QaBank(double capacity_bytes, double entry_bytes);

  // Best answered entry for `embedding`; a hit when its similarity >= tau.
  QaMatch match(const std::vector<float>& embedding, double tau) const;
  // Counts a hit on entry `index` (LFU).
  void touch(std::size_t index) { ++entries_[index].hits; }
  // Inserts, evicting LFU entries to stay within the capacity. Returns the new entry's id.
  std::uint64_t insert(QaEntry e);
  // Sets the answer of a pending entry (the QKV->QA conversion); false when gone.
  bool answer(std::uint64_t id, const std::string& text, std::int64_t tokens);
  // Dynamic refresh (PerCache 4.1.3): the entry's query was re-run over the current knowledge
  // bank at `at_s`: new chunk list, and (when `answered`) a new answer. False when gone.
  bool refresh(std::uint64_t id, std::vector<std::int32_t> chunks, double at_s, bool answered, const std::string& text,
               std::int64_t tokens);
  const QaEntry* find(std::uint64_t id) const;

  const std::vector<QaEntry>& entries() const { return entries_; }
  std::size_t size() const { return entries_.size(); }
  std::size_t pending() const;
  double used_bytes() const { return static_cast<double>(entries_.size()) * entry_bytes_; }
  double capacity_bytes() const { return capacity_bytes_; }
  double entry_bytes() const { return entry_bytes_; }
  std::uint64_t evictions() const { return evictions_; }

 private:
  double capacity_bytes_, entry_bytes_;
  std::vector<QaEntry> entries_;
  // Every entry's embedding also sits in a slot of blocked rows (an evicted entry's slot is
  // reused), so a match scores the whole bank a block at a time (each score dot()'s to the bit).
  // Entries whose embedding length differs from the first one's are scored one by one.
  traces::BlockedRows rows_;
  std::vector<std::size_t> slot_of_;      // per entry (parallel to entries_); npos: not in rows_
  std::vector<std::size_t> free_slots_;   // reused highest first
  std::size_t used_slots_ = 0;            // slots ever handed out
  std::uint64_t seq_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace mobisim::policies
