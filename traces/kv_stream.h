#pragma once
// A KV decode session read a decode step at a time. A replay (policies/kvcluster/session_replay.h)
// reads the prefill keys once, then per step only that step's key and queries (exact attention
// also reads every earlier key and looks a few steps ahead). A KvSession (traces/kv_session.h)
// holds all of it, values included, for the whole session: 340 MB for one 16K-token session of
// Llama-3.2-3B's 8 KV heads, most of it queries and values no reader ever looks at twice.
// DriftingStream draws the generated session (traces::DriftingSpec) a step at a time, as far as
// its readers have asked, and forgets what every reader has passed: the values (drawn, since the
// keys depend on the draws, never stored), the queries of past steps, and the keys too unless the
// stream keeps them (exact attention needs keys [0, n)). Its numbers are generate_drifting_session's,
// draw for draw, and a prefix of a longer stream is the shorter session (every draw is causal).
#include <string>
#include <vector>

#include <Eigen/Core>

#include "models/kernel/transformer.h"
#include "traces/kv_session.h"

namespace mobisim::traces {

// A session's dimensions, without its vectors.
struct KvShape {
  std::string source;
  int n_layers = 0, n_kv_heads = 0, n_heads = 0, head_dim = 0, prefill = 0, decode = 0;
  int tables() const { return n_layers * n_kv_heads; }
  int positions() const { return prefill + decode; }
  int group() const { return n_heads / n_kv_heads; }
};

using KeyRows = Eigen::Map<const kernel::Mat>;

class KvStream {
 public:
  virtual ~KvStream() = default;
  const KvShape& shape() const { return shape_; }
  // Makes decode steps [0, end) readable (end is clamped to the session): the keys of positions
  // below prefill + end and the queries of steps below end. Cheap when already done.
  virtual void ensure(int end) = 0;
  // No reader will ask for decode steps below `step` (nor for their keys, unless kept) again.
  virtual void release(int step) = 0;
  // Whether key_rows(t, 0, n) stays readable for every ensured n (exact attention needs it).
  virtual bool keeps_keys() const = 0;
  // `count` keys of table (layer x KV head) `table` from position `first`, contiguous rows.
  // Pointers stay valid until the next ensure or release.
  virtual KeyRows key_rows(int table, int first, int count) const = 0;
  const float* key(int table, int pos) const { return key_rows(table, pos, 1).data(); }
  // Query head `head` (layer x n_heads + head in layer) at decode step `step`.
  virtual const float* query(int head, int step) const = 0;

 protected:
  KvShape shape_;
};

// A session in memory read as a stream: ensure and release do nothing. It refers to `s`, which
// must outlive it.
class SessionStream final : public KvStream {
 public:
  // Validates `s` (InputError naming `where`).
  explicit SessionStream(const KvSession& s, const std::string& where = "session stream");
  void ensure(int) override {}
  void release(int) override {}
  bool keeps_keys() const override { return true; }
  KeyRows key_rows(int table, int first, int count) const override;
  const float* query(int head, int step) const override;

 private:
  const KvSession& s_;
};

// The drifting generator drawn as its readers go (see the header comment).
class DriftingStream final : public KvStream {
 public:
  DriftingStream(const DriftingSpec& spec, bool keep_keys);
  ~DriftingStream() override;
  DriftingStream(const DriftingStream&) = delete;
  DriftingStream& operator=(const DriftingStream&) = delete;
  void ensure(int end) override;
  void release(int step) override;
  bool keeps_keys() const override { return keep_keys_; }
  KeyRows key_rows(int table, int first, int count) const override;
  const float* query(int head, int step) const override;
  // Lengthens the session to `decode` steps (never shortens it): the draws are causal, so the
  // longer stream continues the shorter one draw for draw (a conversation's next turn). Not for a
  // stream that keeps its keys (its key rows are reserved for the length it was made with).
  void extend(int decode);

 private:
  struct Table;
  bool keep_keys_;
  std::vector<Table> tables_;
  int drawn_ = 0;  // positions drawn in every table
};

}  // namespace mobisim::traces
