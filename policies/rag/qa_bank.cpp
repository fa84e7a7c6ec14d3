#include "policies/rag/qa_bank.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/error.h"
#include "traces/embedder.h"

namespace mobisim::policies {

QaBank::QaBank(double capacity_bytes, double entry_bytes) : capacity_bytes_(capacity_bytes), entry_bytes_(entry_bytes) {
  if (!(entry_bytes > 0)) throw ConfigError(fmt::format("QA bank entry size must be > 0 bytes (got {})", entry_bytes));
  if (capacity_bytes < entry_bytes)
    throw ConfigError(fmt::format("QA bank capacity {} bytes is smaller than one entry ({} bytes)", capacity_bytes,
                                  entry_bytes));
}

namespace {
constexpr std::size_t kNoSlot = static_cast<std::size_t>(-1);
}

QaMatch QaBank::match(const std::vector<float>& embedding, double tau) const {
  QaMatch m;
  std::size_t best = entries_.size();
  // Every slot's similarity at once when the query has the bank's length; entries outside the
  // slots (another length) and every entry for a query of another length: one at a time.
  const bool blocked = rows_.dim() > 0 && embedding.size() == rows_.dim();
  const std::vector<double> slot_sims = blocked ? rows_.dots(embedding, used_slots_) : std::vector<double>{};
  // entries_ is in insertion order: a strict improvement is required, so ties keep the older entry.
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (!entries_[i].answered) continue;
    const double s = blocked && slot_of_[i] != kNoSlot ? slot_sims[slot_of_[i]] : traces::dot(embedding, entries_[i].embedding);
    if (best == entries_.size() || s > m.similarity) {
      m.similarity = s;
      best = i;
    }
  }
  if (best < entries_.size() && m.similarity >= tau) m.index = best;
  return m;
}

std::uint64_t QaBank::insert(QaEntry e) {
  while (!entries_.empty() && used_bytes() + entry_bytes_ > capacity_bytes_) {
    auto victim = std::min_element(entries_.begin(), entries_.end(), [](const QaEntry& a, const QaEntry& b) {
      return a.hits != b.hits ? a.hits < b.hits : a.inserted < b.inserted;
    });
    const auto v = static_cast<std::size_t>(victim - entries_.begin());
    if (slot_of_[v] != kNoSlot) free_slots_.push_back(slot_of_[v]);
    slot_of_.erase(slot_of_.begin() + static_cast<std::ptrdiff_t>(v));
    entries_.erase(victim);
    ++evictions_;
  }
  e.inserted = seq_;
  e.id = seq_++;
  e.hits = 0;
  if (rows_.dim() == 0 && !e.embedding.empty()) rows_ = traces::BlockedRows(e.embedding.size());
  std::size_t slot = kNoSlot;
  if (rows_.dim() > 0 && e.embedding.size() == rows_.dim()) {
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slot = used_slots_++;
    }
    rows_.set(slot, e.embedding);
  }
  slot_of_.push_back(slot);
  entries_.push_back(std::move(e));
  return entries_.back().id;
}

bool QaBank::answer(std::uint64_t id, const std::string& text, std::int64_t tokens) {
  for (auto& e : entries_)
    if (e.id == id) {
      e.answer = text;
      e.answer_tokens = tokens;
      e.answered = true;
      return true;
    }
  return false;
}

bool QaBank::refresh(std::uint64_t id, std::vector<std::int32_t> chunks, double at_s, bool answered,
                     const std::string& text, std::int64_t tokens) {
  for (auto& e : entries_)
    if (e.id == id) {
      e.chunks = std::move(chunks);
      e.chunks_at_s = at_s;
      ++e.refreshes;
      if (answered) {
        e.answer = text;
        e.answer_tokens = tokens;
        e.answered = true;
      }
      return true;
    }
  return false;
}

const QaEntry* QaBank::find(std::uint64_t id) const {
  for (const auto& e : entries_)
    if (e.id == id) return &e;
  return nullptr;
}

std::size_t QaBank::pending() const {
  return static_cast<std::size_t>(std::count_if(entries_.begin(), entries_.end(), [](const QaEntry& e) { return !e.answered; }));
}

}  // namespace mobisim::policies
