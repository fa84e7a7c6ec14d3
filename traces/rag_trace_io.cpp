#include "traces/rag_trace_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/time.h"
#include "sim/h5.h"

namespace mobisim::traces {

namespace {

std::string user_group(std::size_t i) { return fmt::format("u{:05d}", i); }

template <class T>
std::vector<std::int32_t> narrow32(const std::vector<T>& v) {
  return std::vector<std::int32_t>(v.begin(), v.end());
}

// CSR encoding of per-query id lists: offsets has Q+1 entries.
void write_lists(const H5::Group& g, const std::string& name, const std::vector<Query>& qs,
                 std::vector<std::int32_t> Query::*member) {
  std::vector<std::int64_t> offsets{0};
  std::vector<std::int32_t> ids;
  for (const auto& q : qs) {
    const auto& l = q.*member;
    ids.insert(ids.end(), l.begin(), l.end());
    offsets.push_back(static_cast<std::int64_t>(ids.size()));
  }
  h5::write_dataset(g, name + "_offsets", offsets);
  h5::write_dataset(g, name + "_ids", ids);
}

void write_embeddings(const H5::Group& g, const std::vector<std::vector<float>>& rows, std::size_t dim) {
  std::vector<float> flat;
  flat.reserve(rows.size() * dim);
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  h5::write_matrix(g, "embedding", flat, rows.size(), dim, "unit-L2");
}

}  // namespace

void validate_rag_trace(const RagTrace& t, const std::string& what) {
  auto bad = [&](const std::string& m) { throw Error(fmt::format("{}: inconsistent RAG trace: {}", what, m)); };
  const std::size_t dim = static_cast<std::size_t>(std::max(0, t.meta.embedding_dim));
  for (std::size_t u = 0; u < t.users.size(); ++u) {
    const UserTrace& ut = t.users[u];
    if (ut.user_id.empty()) bad(fmt::format("user {} has an empty user_id", u));
    for (std::size_t v = 0; v < u; ++v)
      if (t.users[v].user_id == ut.user_id) bad(fmt::format("users {} and {} share user_id '{}'", v, u, ut.user_id));
    for (std::size_t c = 0; c < ut.chunks.size(); ++c) {
      if (ut.chunks[c].embedding.size() != dim)
        bad(fmt::format("user {} chunk {} has {} embedding values, meta.embedding_dim is {}", u, c,
                        ut.chunks[c].embedding.size(), dim));
      if (!std::isfinite(ut.chunks[c].added_s) || ut.chunks[c].added_s < 0)
        bad(fmt::format("user {} chunk {} added_s {} is not a finite non-negative time", u, c, ut.chunks[c].added_s));
    }
    double prev = -INFINITY;
    for (std::size_t q = 0; q < ut.queries.size(); ++q) {
      const Query& qq = ut.queries[q];
      if (qq.embedding.size() != dim)
        bad(fmt::format("user {} query {} has {} embedding values, meta.embedding_dim is {}", u, q,
                        qq.embedding.size(), dim));
      if (!std::isfinite(qq.arrival_s) || qq.arrival_s < prev || qq.arrival_s > sim::kMaxArrival_s)
        bad(fmt::format("user {} query {} arrival_s {} is not finite, earlier than the previous query, or past "
                        "{:g} s (the clock's range)", u, q, qq.arrival_s, sim::kMaxArrival_s));
      prev = qq.arrival_s;
      for (auto* l : {&qq.retrieved, &qq.relevant})
        for (std::int32_t id : *l)
          if (id < 0 || static_cast<std::size_t>(id) >= ut.chunks.size())
            bad(fmt::format("user {} query {} refers to chunk {} of {}", u, q, id, ut.chunks.size()));
      for (std::int32_t id : qq.retrieved)
        if (ut.chunks[static_cast<std::size_t>(id)].added_s > qq.arrival_s)
          bad(fmt::format("user {} query {} (arrival {} s) retrieved chunk {}, which is only added at {} s", u, q,
                          qq.arrival_s, id, ut.chunks[static_cast<std::size_t>(id)].added_s));
    }
    for (const auto& w : ut.idle_windows)
      if (!(w.end_s >= w.start_s)) bad(fmt::format("user {} idle window ends before it starts", u));
  }
}

// ---------------------------------------------------------------------------
// Replay columns (traces/SCHEMA.md, `/replay`): what a replay that reads no texts or embeddings
// needs, one dataset per field across all users, users in trace order.
// ---------------------------------------------------------------------------
namespace replay {
constexpr const char* kGroupName = "replay";
constexpr const char* kGroup = "/replay";
constexpr const char* kUserChunkEnd = "user_chunk_end";    // int64 [U]: end row of each user's chunks
constexpr const char* kUserQueryEnd = "user_query_end";    // int64 [U]: end row of each user's queries
constexpr const char* kChunkTokens = "chunk_tokens";       // int32 [C]
constexpr const char* kChunkAddedS = "chunk_added_s";      // double [C] (files with late chunks)
constexpr const char* kArrivalS = "query_arrival_s";       // double [Q]
constexpr const char* kQueryTokens = "query_tokens";       // int32 [Q]
constexpr const char* kAnswerTokens = "answer_tokens";     // int32 [Q]
constexpr const char* kRetrievedEnd = "retrieved_end";     // int64 [Q]: end row of each query's ids
constexpr const char* kRetrievedIds = "retrieved_ids";     // int32 [R]: chunk ids within the user
constexpr const char* kAnswerEnd = "answer_text_end";      // int64 [Q]: end byte of each reference answer
constexpr const char* kAnswerText = "answer_text";         // uint8 [B]: the answers' UTF-8 bytes
// Rows per chunk: the writer appends whole chunks (a chunk is written once, not per user); a
// reader reads a window of rows at a time.
constexpr std::size_t kChunkRows = 1024, kTextChunkBytes = 16 * 1024;
}  // namespace replay

namespace {

// A column appended value by value and written a whole chunk at a time.
template <class T>
class BufferedColumn {
 public:
  BufferedColumn(const H5::Group& g, const char* name, std::size_t chunk_rows)
      : ds_(g, name, chunk_rows), chunk_rows_(chunk_rows) {
    buf_.reserve(chunk_rows);
  }
  void push(T v) {
    buf_.push_back(v);
    if (buf_.size() == chunk_rows_) flush();
  }
  std::size_t rows() const { return ds_.size() + buf_.size(); }
  void flush() {
    ds_.append(buf_.data(), buf_.size());
    buf_.clear();
  }

 private:
  h5::AppendableDataset<T> ds_;
  std::size_t chunk_rows_;
  std::vector<T> buf_;
};

}  // namespace

class RagTraceWriter::ReplayColumns {
 public:
  ReplayColumns(const H5::Group& root, bool late)
      : group_(h5::make_group(root, replay::kGroupName)),
        user_chunk_end_(group_, replay::kUserChunkEnd, replay::kChunkRows),
        user_query_end_(group_, replay::kUserQueryEnd, replay::kChunkRows),
        chunk_tokens_(group_, replay::kChunkTokens, replay::kChunkRows),
        arrival_(group_, replay::kArrivalS, replay::kChunkRows),
        query_tokens_(group_, replay::kQueryTokens, replay::kChunkRows),
        answer_tokens_(group_, replay::kAnswerTokens, replay::kChunkRows),
        retrieved_end_(group_, replay::kRetrievedEnd, replay::kChunkRows),
        retrieved_ids_(group_, replay::kRetrievedIds, replay::kChunkRows),
        answer_end_(group_, replay::kAnswerEnd, replay::kChunkRows),
        answer_text_(group_, replay::kAnswerText, replay::kTextChunkBytes) {
    if (late) chunk_added_.emplace(group_, replay::kChunkAddedS, replay::kChunkRows);
  }

  void add_user(const UserTrace& ut) {
    for (const auto& c : ut.chunks) {
      chunk_tokens_.push(c.tokens);
      if (chunk_added_) chunk_added_->push(c.added_s);
    }
    for (const auto& q : ut.queries) {
      arrival_.push(q.arrival_s);
      query_tokens_.push(q.tokens);
      answer_tokens_.push(q.answer_tokens);
      for (std::int32_t id : q.retrieved) retrieved_ids_.push(id);
      retrieved_end_.push(static_cast<std::int64_t>(retrieved_ids_.rows()));
      for (char ch : q.answer_text) answer_text_.push(static_cast<std::uint8_t>(ch));
      answer_end_.push(static_cast<std::int64_t>(answer_text_.rows()));
    }
    user_chunk_end_.push(static_cast<std::int64_t>(chunk_tokens_.rows()));
    user_query_end_.push(static_cast<std::int64_t>(arrival_.rows()));
  }

  void finish() {
    for (auto* c : {&user_chunk_end_, &user_query_end_, &retrieved_end_, &answer_end_}) c->flush();
    for (auto* c : {&chunk_tokens_, &query_tokens_, &answer_tokens_, &retrieved_ids_}) c->flush();
    arrival_.flush();
    if (chunk_added_) chunk_added_->flush();
    answer_text_.flush();
  }

 private:
  H5::Group group_;
  BufferedColumn<std::int64_t> user_chunk_end_, user_query_end_;
  BufferedColumn<std::int32_t> chunk_tokens_;
  std::optional<BufferedColumn<double>> chunk_added_;
  BufferedColumn<double> arrival_;
  BufferedColumn<std::int32_t> query_tokens_, answer_tokens_;
  BufferedColumn<std::int64_t> retrieved_end_;
  BufferedColumn<std::int32_t> retrieved_ids_;
  BufferedColumn<std::int64_t> answer_end_;
  BufferedColumn<std::uint8_t> answer_text_;
};

RagTraceWriter::RagTraceWriter(const std::string& path, const RagTraceMeta& meta, std::size_t num_users,
                               std::int64_t schema_version)
    : writer_(path),
      dim_(static_cast<std::size_t>(std::max(0, meta.embedding_dim))),
      late_(schema_version >= 2),
      num_users_(num_users) {
  H5::Group root = writer_.root();
  h5::write_attr(root, "format", kRagTraceFormat);
  h5::write_attr(root, "schema_version", schema_version);
  h5::write_attr(root, "source", meta.source);
  h5::write_attr(root, "tokenizer", meta.tokenizer);
  h5::write_attr(root, "tokens_exact", static_cast<std::int64_t>(meta.tokens_exact ? 1 : 0));
  h5::write_attr(root, "embedder", meta.embedder);
  h5::write_attr(root, "embedding_dim", static_cast<std::int64_t>(dim_));
  h5::write_attr(root, "chunker", meta.chunker);
  h5::write_attr(root, "chunk_words", static_cast<std::int64_t>(meta.chunk_words));
  h5::write_attr(root, "arrival_model", meta.arrival_model);
  h5::write_attr(root, "params_yaml", meta.params_yaml);
  h5::write_attr(root, "retrieval", meta.retrieval);
  h5::write_attr(root, "retrieved_k", static_cast<std::int64_t>(meta.retrieved_k));
  h5::write_attr(root, "num_users", static_cast<std::int64_t>(num_users));

  users_ = h5::make_group(root, "users");
  replay_ = std::make_unique<ReplayColumns>(root, late_);
}

RagTraceWriter::~RagTraceWriter() = default;

void RagTraceWriter::add_user(const UserTrace& ut) {
  if (written_ == num_users_)
    throw Error(fmt::format("{}: more users than the {} announced", writer_.path(), num_users_));
  H5::Group ug = h5::make_group(users_, user_group(written_));
  h5::write_attr(ug, "user_id", ut.user_id);
  h5::write_dataset(ug, "topics", ut.topics);

  H5::Group cg = h5::make_group(ug, "chunks");
  std::vector<std::string> ctext;
  std::vector<std::int32_t> ctok;
  std::vector<std::vector<float>> cemb;
  for (const auto& c : ut.chunks) {
    ctext.push_back(c.text);
    ctok.push_back(c.tokens);
    cemb.push_back(c.embedding);
  }
  h5::write_dataset(cg, "text", ctext);
  h5::write_dataset(cg, "tokens", ctok, "tokens");
  if (dim_ > 0) write_embeddings(cg, cemb, dim_);
  if (late_) {
    std::vector<double> added;
    for (const auto& c : ut.chunks) added.push_back(c.added_s);
    h5::write_dataset(cg, "added_s", added, "s");
  }

  H5::Group qg = h5::make_group(ug, "queries");
  std::vector<std::string> qtext, atext, kind;
  std::vector<double> arrival;
  std::vector<std::int32_t> qtok, atok, topic;
  std::vector<std::vector<float>> qemb;
  for (const auto& q : ut.queries) {
    qtext.push_back(q.text);
    atext.push_back(q.answer_text);
    kind.push_back(q.kind);
    arrival.push_back(q.arrival_s);
    qtok.push_back(q.tokens);
    atok.push_back(q.answer_tokens);
    topic.push_back(q.topic);
    qemb.push_back(q.embedding);
  }
  h5::write_dataset(qg, "text", qtext);
  h5::write_dataset(qg, "arrival_s", arrival, "s");
  h5::write_dataset(qg, "tokens", qtok, "tokens");
  h5::write_dataset(qg, "answer_text", atext);
  h5::write_dataset(qg, "answer_tokens", atok, "tokens");
  h5::write_dataset(qg, "kind", kind);
  h5::write_dataset(qg, "topic", topic);
  if (dim_ > 0) write_embeddings(qg, qemb, dim_);
  write_lists(qg, "retrieved", ut.queries, &Query::retrieved);
  write_lists(qg, "relevant", ut.queries, &Query::relevant);

  H5::Group ig = h5::make_group(ug, "idle_windows");
  std::vector<double> is, ie;
  std::vector<std::uint8_t> ch;
  for (const auto& iw : ut.idle_windows) {
    is.push_back(iw.start_s);
    ie.push_back(iw.end_s);
    ch.push_back(iw.charging ? 1 : 0);
  }
  h5::write_dataset(ig, "start_s", is, "s");
  h5::write_dataset(ig, "end_s", ie, "s");
  h5::write_dataset(ig, "charging", ch);
  replay_->add_user(ut);
  ++written_;
}

void RagTraceWriter::commit() {
  if (written_ != num_users_)
    throw Error(fmt::format("{}: {} users written, {} announced", writer_.path(), written_, num_users_));
  replay_->finish();
  replay_.reset();
  users_ = H5::Group();  // every HDF5 handle closed before the file is
  writer_.commit();
}

void write_rag_trace(const std::string& path, const RagTrace& t) {
  validate_rag_trace(t, path);
  RagTraceWriter w(path, t.meta, t.users.size(), rag_schema_version_needed(t));
  for (const auto& u : t.users) w.add_user(u);
  w.commit();
}

namespace {

// The checks both read paths (a user's group, the replay columns) make, with one message each;
// `object` names the dataset and `i` the row in it.
double checked_added_s(const std::string& path, const std::string& object, std::size_t i, double v) {
  if (!std::isfinite(v) || v < 0)
    throw InputError(fmt::format("{}: {}[{}] = {} is not a finite non-negative time", path, object, i, v));
  return v;
}

// Arrival `v` of a user's query, after `previous` (null for the user's first).
double checked_arrival(const std::string& path, const std::string& object, std::size_t i, double v,
                       const double* previous) {
  if (!std::isfinite(v) || (previous && v < *previous))
    throw InputError(
        fmt::format("{}: {}[{}] = {} is not finite or earlier than the previous query", path, object, i, v));
  return v;
}

std::int32_t checked_chunk_id(const std::string& path, const std::string& object, std::size_t i, std::int64_t id,
                              std::size_t n_chunks) {
  if (id < 0 || static_cast<std::size_t>(id) >= n_chunks)
    throw InputError(fmt::format("{}: {}[{}] = {} is not a chunk id (the user has {} chunks)", path, object, i, id,
                                 n_chunks));
  return static_cast<std::int32_t>(id);
}

// A query (`where`, its index `q`) retrieved only chunks already added when it arrived.
void check_retrieved_present(const std::string& path, const std::string& where, std::size_t q, const Query& x,
                             const std::vector<Chunk>& chunks) {
  for (std::int32_t id : x.retrieved)
    if (chunks[static_cast<std::size_t>(id)].added_s > x.arrival_s)
      throw InputError(fmt::format("{}: {}: query {} (arrival {} s) retrieved chunk {}, added only at {} s", path,
                                   where, q, x.arrival_s, id, chunks[static_cast<std::size_t>(id)].added_s));
}

std::vector<std::vector<std::int32_t>> read_lists(const h5::Reader& r, const std::string& base, std::size_t nq,
                                                  std::size_t n_chunks) {
  auto offsets = r.ints(base + "_offsets", nq + 1);
  auto ids = r.ints(base + "_ids");
  std::vector<std::vector<std::int32_t>> out(nq);
  if (offsets.empty() || offsets.front() != 0 || static_cast<std::size_t>(offsets.back()) != ids.size())
    throw InputError(fmt::format("{}: {}_offsets: must start at 0 and end at {} (the length of {}_ids)", r.path(),
                                 base, ids.size(), base));
  for (std::size_t q = 0; q < nq; ++q) {
    if (offsets[q + 1] < offsets[q])
      throw InputError(fmt::format("{}: {}_offsets: decreasing at query {}", r.path(), base, q));
    for (auto i = offsets[q]; i < offsets[q + 1]; ++i)
      out[q].push_back(checked_chunk_id(r.path(), base + "_ids", static_cast<std::size_t>(i), ids[i], n_chunks));
  }
  return out;
}

std::vector<std::vector<float>> read_embeddings(const h5::Reader& r, const std::string& path, std::size_t n,
                                                std::size_t dim) {
  std::vector<std::vector<float>> out(n);
  if (dim == 0) {
    if (r.exists(path))
      throw InputError(fmt::format("{}: {}: present but the file's embedding_dim is 0", r.path(), path));
    return out;
  }
  std::size_t rows = 0, cols = 0;
  auto flat = r.matrix(path, rows, cols);
  if (rows != n || cols != dim)
    throw InputError(fmt::format("{}: {}: shape [{}, {}], expected [{}, {}] (rows x embedding_dim)", r.path(), path,
                                 rows, cols, n, dim));
  for (std::size_t i = 0; i < n; ++i) out[i].assign(flat.begin() + i * dim, flat.begin() + (i + 1) * dim);
  return out;
}

// Token counts size simulated work (prefill, decode), so a damaged or hostile count must not pass:
// one chunk, query or answer of more than 2^20 tokens is beyond every model's context here.
constexpr std::int64_t kMaxTokens = std::int64_t{1} << 20;

std::int32_t checked(const std::string& path, const std::string& object, std::size_t i, std::int64_t v,
                     std::int64_t lo, std::int64_t hi) {
  if (v < lo || v > hi)
    throw InputError(fmt::format("{}: {}[{}] = {} is outside [{}, {}]", path, object, i, v, lo, hi));
  return static_cast<std::int32_t>(v);
}

std::int32_t checked_attr(const h5::Reader& r, const char* name, std::int64_t hi) {
  if (!r.has_attr("/", name)) return 0;
  const std::int64_t v = r.attr_int("/", name);
  if (v < 0 || v > hi)
    throw InputError(fmt::format("{}: root attribute {} = {} is outside [0, {}]", r.path(), name, v, hi));
  return static_cast<std::int32_t>(v);
}

}  // namespace

// ---------------------------------------------------------------------------
// Reading the replay columns
// ---------------------------------------------------------------------------
namespace {

// A column read a window of rows at a time: replays read users in order, so one read serves the
// next users too, and memory holds one window however long the column is.
template <class T>
class WindowedColumn {
 public:
  WindowedColumn(const h5::Reader& r, const std::string& path, std::size_t window) : col_(r, path), window_(window) {}
  std::size_t size() const { return col_.size(); }
  // Rows [offset, offset + n); valid until the next call on this column.
  const T* rows(std::size_t offset, std::size_t n) {
    const bool inside = offset >= lo_ && offset - lo_ <= buf_.size() && n <= buf_.size() - (offset - lo_);
    if (!inside) {
      const std::size_t m = offset <= col_.size() ? std::max(n, std::min(window_, col_.size() - offset)) : n;
      col_.read(offset, m, buf_);  // InputError when [offset, offset + n) leaves the column
      lo_ = offset;
    }
    return buf_.data() + (offset - lo_);
  }

 private:
  h5::ColumnReader<T> col_;
  std::size_t window_, lo_ = 0;
  std::vector<T> buf_;
};

std::string replay_path(const char* column) { return fmt::format("{}/{}", replay::kGroup, column); }

// A whole per-user end column: `users` non-decreasing rows ending at `rows`.
std::vector<std::int64_t> read_user_ends(const h5::Reader& r, const char* column, std::size_t users, std::size_t rows) {
  const std::string path = replay_path(column);
  auto ends = r.ints(path, users);
  std::int64_t prev = 0;
  for (std::size_t u = 0; u < users; ++u) {
    if (ends[u] < prev)
      throw InputError(fmt::format("{}: {}[{}] = {} is below the previous user's end {}", r.path(), path, u, ends[u],
                                   prev));
    prev = ends[u];
  }
  if (static_cast<std::uint64_t>(prev) != rows)
    throw InputError(fmt::format("{}: {}: the last user ends at row {}, the columns have {} rows", r.path(), path,
                                 prev, rows));
  return ends;
}

}  // namespace

class RagTraceFile::ReplayColumns {
 public:
  static constexpr std::size_t kWindowRows = 4096, kWindowBytes = 64 * 1024;

  ReplayColumns(const h5::Reader& r, std::size_t users, std::int64_t version)
      : path_(r.path()),
        chunk_tokens_(r, replay_path(replay::kChunkTokens), kWindowRows),
        arrival_(r, replay_path(replay::kArrivalS), kWindowRows),
        query_tokens_(r, replay_path(replay::kQueryTokens), kWindowRows),
        answer_tokens_(r, replay_path(replay::kAnswerTokens), kWindowRows),
        retrieved_end_(r, replay_path(replay::kRetrievedEnd), kWindowRows),
        retrieved_ids_(r, replay_path(replay::kRetrievedIds), kWindowRows),
        answer_end_(r, replay_path(replay::kAnswerEnd), kWindowRows),
        answer_text_(r, replay_path(replay::kAnswerText), kWindowBytes) {
    if (r.exists(replay_path(replay::kChunkAddedS))) {
      if (version < 2)
        throw InputError(fmt::format("{}: {} needs schema_version >= 2 (the file says {})", path_,
                                     replay_path(replay::kChunkAddedS), version));
      chunk_added_.emplace(r, replay_path(replay::kChunkAddedS), kWindowRows);
      same_rows(chunk_added_->size(), chunk_tokens_.size(), replay::kChunkAddedS, replay::kChunkTokens);
    }
    for (const auto& [rows, name] : {std::pair{query_tokens_.size(), replay::kQueryTokens},
                                     {answer_tokens_.size(), replay::kAnswerTokens},
                                     {retrieved_end_.size(), replay::kRetrievedEnd},
                                     {answer_end_.size(), replay::kAnswerEnd}})
      same_rows(rows, arrival_.size(), name, replay::kArrivalS);
    chunk_end_ = read_user_ends(r, replay::kUserChunkEnd, users, chunk_tokens_.size());
    query_end_ = read_user_ends(r, replay::kUserQueryEnd, users, arrival_.size());
  }

  // User u's numbers (and reference answers when `answers`), checked as the user's group would
  // be; nullopt when one of its queries lacks precomputed retrieval (its embeddings are then needed).
  std::optional<UserTrace> read(std::size_t u, const std::string& user_id, bool answers) {
    UserTrace ut;
    ut.user_id = user_id;
    const std::size_t c0 = u ? static_cast<std::size_t>(chunk_end_[u - 1]) : 0;
    const std::size_t q0 = u ? static_cast<std::size_t>(query_end_[u - 1]) : 0;
    read_chunks(ut, c0, static_cast<std::size_t>(chunk_end_[u]) - c0);
    const std::size_t nq = static_cast<std::size_t>(query_end_[u]) - q0;
    ut.queries.resize(nq);
    read_query_numbers(ut, q0);
    if (!read_retrieved(ut, q0)) return std::nullopt;
    if (answers) read_answers(ut, q0);
    return ut;
  }

 private:
  void same_rows(std::size_t rows, std::size_t expected, const char* name, const char* like) const {
    if (rows != expected)
      throw InputError(fmt::format("{}: {}: {} rows, {} has {}", path_, replay_path(name), rows, replay_path(like),
                                   expected));
  }

  void read_chunks(UserTrace& ut, std::size_t c0, std::size_t nc) {
    ut.chunks.resize(nc);
    const std::int64_t* tokens = chunk_tokens_.rows(c0, nc);
    for (std::size_t c = 0; c < nc; ++c)
      ut.chunks[c].tokens = checked(path_, replay_path(replay::kChunkTokens), c0 + c, tokens[c], 0, kMaxTokens);
    if (!chunk_added_) return;
    const double* added = chunk_added_->rows(c0, nc);
    for (std::size_t c = 0; c < nc; ++c)
      ut.chunks[c].added_s = checked_added_s(path_, replay_path(replay::kChunkAddedS), c0 + c, added[c]);
  }

  void read_query_numbers(UserTrace& ut, std::size_t q0) {
    const std::size_t nq = ut.queries.size();
    const double* arrival = arrival_.rows(q0, nq);
    for (std::size_t q = 0; q < nq; ++q)
      ut.queries[q].arrival_s =
          checked_arrival(path_, replay_path(replay::kArrivalS), q0 + q, arrival[q], q > 0 ? &arrival[q - 1] : nullptr);
    const std::int64_t* tokens = query_tokens_.rows(q0, nq);
    for (std::size_t q = 0; q < nq; ++q)
      ut.queries[q].tokens = checked(path_, replay_path(replay::kQueryTokens), q0 + q, tokens[q], 0, kMaxTokens);
    const std::int64_t* answer_tokens = answer_tokens_.rows(q0, nq);
    for (std::size_t q = 0; q < nq; ++q)
      ut.queries[q].answer_tokens =
          checked(path_, replay_path(replay::kAnswerTokens), q0 + q, answer_tokens[q], 0, kMaxTokens);
  }

  // The [begin, end) rows of each of the queries' items, from an end column (items counted from
  // the start of the file): checked non-decreasing and within `items` rows.
  std::vector<std::size_t> spans(WindowedColumn<std::int64_t>& ends, const char* name, std::size_t q0, std::size_t nq,
                                 std::size_t items) {
    const std::size_t back = q0 > 0 ? 1 : 0;
    const std::int64_t* e = ends.rows(q0 - back, nq + back);
    std::vector<std::size_t> bounds(nq + 1);
    std::int64_t prev = back ? e[0] : 0;
    bounds[0] = static_cast<std::size_t>(std::max<std::int64_t>(prev, 0));
    for (std::size_t q = 0; q < nq; ++q) {
      const std::int64_t end = e[back + q];
      if (end < prev || prev < 0 || static_cast<std::uint64_t>(end) > items)
        throw InputError(fmt::format("{}: {}[{}] = {} is below the previous end {} or beyond the {} rows of its items",
                                     path_, replay_path(name), q0 + q, end, prev, items));
      bounds[q + 1] = static_cast<std::size_t>(end);
      prev = end;
    }
    return bounds;
  }

  bool read_retrieved(UserTrace& ut, std::size_t q0) {
    const std::size_t nq = ut.queries.size(), nc = ut.chunks.size();
    const auto b = spans(retrieved_end_, replay::kRetrievedEnd, q0, nq, retrieved_ids_.size());
    const std::int64_t* ids = retrieved_ids_.rows(b[0], b[nq] - b[0]);
    for (std::size_t q = 0; q < nq; ++q) {
      if (b[q + 1] == b[q]) return false;
      Query& x = ut.queries[q];
      for (std::size_t i = b[q]; i < b[q + 1]; ++i)
        x.retrieved.push_back(checked_chunk_id(path_, replay_path(replay::kRetrievedIds), i, ids[i - b[0]], nc));
      check_retrieved_present(path_, replay_path(replay::kRetrievedIds), q0 + q, x, ut.chunks);
    }
    return true;
  }

  void read_answers(UserTrace& ut, std::size_t q0) {
    const std::size_t nq = ut.queries.size();
    const auto b = spans(answer_end_, replay::kAnswerEnd, q0, nq, answer_text_.size());
    const std::uint8_t* bytes = answer_text_.rows(b[0], b[nq] - b[0]);
    for (std::size_t q = 0; q < nq; ++q)
      ut.queries[q].answer_text.assign(reinterpret_cast<const char*>(bytes) + (b[q] - b[0]), b[q + 1] - b[q]);
  }

  std::string path_;
  std::vector<std::int64_t> chunk_end_, query_end_;
  WindowedColumn<std::int64_t> chunk_tokens_;
  std::optional<WindowedColumn<double>> chunk_added_;
  WindowedColumn<double> arrival_;
  WindowedColumn<std::int64_t> query_tokens_, answer_tokens_, retrieved_end_, retrieved_ids_, answer_end_;
  WindowedColumn<std::uint8_t> answer_text_;
};

RagTraceFile::RagTraceFile(const std::string& path) : reader_(std::make_unique<h5::Reader>(path)) {
  const h5::Reader& r = *reader_;
  if (!r.has_attr("/", "format") || r.attr_string("/", "format") != kRagTraceFormat)
    throw InputError(fmt::format("{}: not a mobisim RAG trace (root attribute format != '{}')", path,
                                 kRagTraceFormat));
  if (!r.has_attr("/", "schema_version"))
    throw InputError(fmt::format("{}: missing root attribute schema_version", path));
  const std::int64_t version = r.attr_int("/", "schema_version");
  if (version > kRagSchemaVersion)
    throw InputError(fmt::format("{}: RAG trace schema version {} is newer than this mobisim supports ({}); "
                                 "upgrade mobisim or re-create the trace",
                                 path, version, kRagSchemaVersion));
  if (version < 1) throw InputError(fmt::format("{}: invalid RAG trace schema version {}", path, version));

  RagTraceMeta& m = meta_;
  m.schema_version = version;
  auto opt_str = [&](const char* name) { return r.has_attr("/", name) ? r.attr_string("/", name) : std::string(); };
  m.source = opt_str("source");
  m.tokenizer = opt_str("tokenizer");
  m.tokens_exact = r.has_attr("/", "tokens_exact") && r.attr_int("/", "tokens_exact") != 0;
  m.embedder = opt_str("embedder");
  const std::int64_t dim = r.attr_int("/", "embedding_dim");
  if (dim < 0 || dim > (1 << 20)) throw InputError(fmt::format("{}: embedding_dim {} out of range", path, dim));
  m.embedding_dim = static_cast<std::int32_t>(dim);
  m.chunker = opt_str("chunker");
  m.chunk_words = checked_attr(r, "chunk_words", kMaxTokens);
  m.arrival_model = opt_str("arrival_model");
  m.params_yaml = opt_str("params_yaml");
  m.retrieval = opt_str("retrieval");
  m.retrieved_k = checked_attr(r, "retrieved_k", kMaxTokens);
  const std::int64_t n_users = r.attr_int("/", "num_users");
  if (n_users < 0) throw InputError(fmt::format("{}: num_users {} is negative", path, n_users));
  const auto present = r.children("/users");
  if (present.size() != static_cast<std::size_t>(n_users))
    throw InputError(fmt::format("{}: /users has {} groups, num_users says {}", path, present.size(), n_users));
  // Users are told apart by id (statistics, results); an empty or repeated id is damage.
  std::unordered_map<std::string, std::size_t> seen;
  user_ids_.resize(static_cast<std::size_t>(n_users));
  for (std::size_t u = 0; u < user_ids_.size(); ++u) {
    const std::string g = "/users/" + user_group(u);
    user_ids_[u] = r.attr_string(g, "user_id");
    if (user_ids_[u].empty()) throw InputError(fmt::format("{}: {}: attribute user_id is empty", path, g));
    const auto [it, fresh] = seen.emplace(user_ids_[u], u);
    if (!fresh)
      throw InputError(fmt::format("{}: {}: user_id '{}' repeats user {}'s", path, g, user_ids_[u], it->second));
  }
  // The replay columns are a copy of the users' numbers: trusted to equal them only where the
  // bytes are what mobisim wrote.
  if (r.verified() && r.exists(replay::kGroup))
    replay_ = std::make_unique<ReplayColumns>(r, user_ids_.size(), version);
}

RagTraceFile::~RagTraceFile() = default;

const std::string& RagTraceFile::path() const { return reader_->path(); }

UserTrace RagTraceFile::read_user(std::size_t u, const UserParts& parts) const {
  const std::string& id = user_ids_.at(u);
  if (replay_ && !parts.content && !parts.embeddings)
    if (auto ut = replay_->read(u, id, parts.answers)) return std::move(*ut);
  return read_user_group(u, parts);
}

UserTrace RagTraceFile::read_user_group(std::size_t u, const UserParts& parts) const {
  const h5::Reader& r = *reader_;
  const std::string& path = r.path();
  const std::int64_t version = meta_.schema_version;
  const auto d = static_cast<std::size_t>(meta_.embedding_dim);
  UserTrace ut;
  const std::string g = "/users/" + user_group(u);
  ut.user_id = user_ids_.at(u);
  if (parts.content) ut.topics = r.strings(g + "/topics");

  // The chunk count comes from the first chunk dataset read; every other one must match it.
  std::vector<std::string> ctext;
  if (parts.content) ctext = r.strings(g + "/chunks/text");
  const auto ctok = parts.content ? r.ints(g + "/chunks/tokens", ctext.size()) : r.ints(g + "/chunks/tokens");
  const std::size_t nc = ctok.size();
  // Version 2: optional chunks/added_s (absent: every chunk is present from the start).
  std::vector<double> cadded;
  if (r.exists(g + "/chunks/added_s")) {
    if (version < 2)
      throw InputError(fmt::format("{}: {}/chunks/added_s needs schema_version >= 2 (the file says {})", path, g,
                                   version));
    cadded = r.doubles(g + "/chunks/added_s", nc);
  }
  ut.chunks.resize(nc);
  for (std::size_t c = 0; c < nc; ++c) {
    if (!cadded.empty()) ut.chunks[c].added_s = checked_added_s(path, g + "/chunks/added_s", c, cadded[c]);
    if (parts.content) ut.chunks[c].text = std::move(ctext[c]);
    ut.chunks[c].tokens = checked(path, g + "/chunks/tokens", c, ctok[c], 0, kMaxTokens);
  }

  // Likewise the query count.
  const std::string qg = g + "/queries";
  std::vector<std::string> qtext;
  if (parts.content) qtext = r.strings(qg + "/text");
  const auto arrival = parts.content ? r.doubles(qg + "/arrival_s", qtext.size()) : r.doubles(qg + "/arrival_s");
  const std::size_t nq = arrival.size();
  const auto qtok = r.ints(qg + "/tokens", nq);
  std::vector<std::string> atext;
  if (parts.answers || !r.verified()) {
    atext = r.strings(qg + "/answer_text", nq);
  } else if (const auto shape = r.shape(qg + "/answer_text"); shape != std::vector<std::size_t>{nq}) {
    throw InputError(fmt::format("{}: {}/answer_text: expected {} elements, got shape [{}]", path, qg, nq,
                                 fmt::join(shape, ", ")));
  }
  const auto atok = r.ints(qg + "/answer_tokens", nq);
  std::vector<std::string> kind;
  std::vector<std::int64_t> topic;
  if (parts.content) {
    kind = r.strings(qg + "/kind", nq);
    topic = r.ints(qg + "/topic", nq);
  }
  auto retrieved = read_lists(r, qg + "/retrieved", nq, nc);
  std::vector<std::vector<std::int32_t>> relevant;
  if (parts.content) relevant = read_lists(r, qg + "/relevant", nq, nc);
  // A query without precomputed retrieval is retrieved in simulation by embedding cosine, so
  // its user's embeddings are needed even when no policy matches by embedding.
  const bool need_embeddings =
      parts.embeddings || std::any_of(retrieved.begin(), retrieved.end(), [](const auto& l) { return l.empty(); });
  if (need_embeddings) {
    auto cemb = read_embeddings(r, g + "/chunks/embedding", nc, d);
    for (std::size_t c = 0; c < nc; ++c) ut.chunks[c].embedding = std::move(cemb[c]);
  }
  std::vector<std::vector<float>> qemb;
  if (need_embeddings) qemb = read_embeddings(r, qg + "/embedding", nq, d);
  ut.queries.resize(nq);
  for (std::size_t q = 0; q < nq; ++q) {
    Query& x = ut.queries[q];
    x.arrival_s = checked_arrival(path, qg + "/arrival_s", q, arrival[q], q > 0 ? &arrival[q - 1] : nullptr);
    x.tokens = checked(path, qg + "/tokens", q, qtok[q], 0, kMaxTokens);
    if (!atext.empty()) x.answer_text = std::move(atext[q]);
    x.answer_tokens = checked(path, qg + "/answer_tokens", q, atok[q], 0, kMaxTokens);
    if (parts.content) {
      x.text = std::move(qtext[q]);
      x.kind = std::move(kind[q]);
      x.topic = checked(path, qg + "/topic", q, topic[q], std::numeric_limits<std::int32_t>::min(),
                        std::numeric_limits<std::int32_t>::max());
      x.relevant = std::move(relevant[q]);
    }
    if (need_embeddings) x.embedding = std::move(qemb[q]);
    x.retrieved = std::move(retrieved[q]);
    check_retrieved_present(path, qg, q, x, ut.chunks);
  }

  if (!parts.content) return ut;
  const std::string ig = g + "/idle_windows";
  const auto is = r.doubles(ig + "/start_s");
  const auto ie = r.doubles(ig + "/end_s", is.size());
  const auto ch = r.ints(ig + "/charging", is.size());
  for (std::size_t i = 0; i < is.size(); ++i) {
    if (!std::isfinite(is[i]) || !std::isfinite(ie[i]) || is[i] < 0)
      throw InputError(fmt::format("{}: {}: window {} [{}, {}] is not a finite non-negative interval", path, ig, i,
                                   is[i], ie[i]));
    if (!(ie[i] >= is[i]))
      throw InputError(fmt::format("{}: {}: window {} ends ({}) before it starts ({})", path, ig, i, ie[i], is[i]));
    ut.idle_windows.push_back({is[i], ie[i], ch[i] != 0});
  }
  return ut;
}

RagTrace read_rag_trace(const std::string& path) {
  const RagTraceFile file(path);
  RagTrace t;
  t.meta = file.meta();
  t.users.reserve(file.num_users());
  for (std::size_t u = 0; u < file.num_users(); ++u) t.users.push_back(file.read_user(u, UserParts{}));
  return t;
}

// ---------------------------------------------------------------------------
// External embeddings
// ---------------------------------------------------------------------------
std::vector<float> read_npy_matrix(const std::string& path, std::size_t& rows, std::size_t& cols) {
  const std::string bytes = read_file(path);
  auto bad = [&](const std::string& m) -> void { throw InputError(fmt::format("{}: not a usable .npy file: {}", path, m)); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) bad("missing \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) bad("truncated header");
    header_len = 0;
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + i]);
    header_start = 12;
  } else {
    bad(fmt::format("unsupported format version {}", major));
  }
  if (header_start + header_len > bytes.size()) bad("truncated header");
  const std::string header = bytes.substr(header_start, header_len);
  auto field = [&](const std::string& key) {
    auto p = header.find("'" + key + "'");
    if (p == std::string::npos) bad("header has no '" + key + "'");
    p = header.find(':', p);
    return p + 1;
  };
  std::size_t p = field("descr");
  auto q1 = header.find('\'', p), q2 = header.find('\'', q1 + 1);
  const std::string descr = header.substr(q1 + 1, q2 - q1 - 1);
  std::size_t elem = 0;
  if (descr == "<f4") elem = 4;
  else if (descr == "<f8") elem = 8;
  else bad("dtype '" + descr + "' (expected <f4 or <f8)");
  p = field("fortran_order");
  if (header.compare(header.find_first_not_of(' ', p), 5, "False") != 0) bad("fortran_order must be False");
  p = field("shape");
  auto o = header.find('(', p), c = header.find(')', p);
  if (o == std::string::npos || c == std::string::npos) bad("malformed shape");
  std::vector<std::size_t> dims;
  std::string cur;
  for (char ch : header.substr(o + 1, c - o - 1)) {
    if (ch >= '0' && ch <= '9') cur += ch;
    else if (!cur.empty()) {
      dims.push_back(std::stoull(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) dims.push_back(std::stoull(cur));
  if (dims.size() != 2) bad(fmt::format("expected a 2-D array, got {} dimensions", dims.size()));
  rows = dims[0];
  cols = dims[1];
  const std::size_t data_start = header_start + header_len;
  if (bytes.size() - data_start != rows * cols * elem)
    bad(fmt::format("data has {} bytes, shape ({}, {}) of {} needs {} (truncated?)", bytes.size() - data_start, rows,
                    cols, descr, rows * cols * elem));
  std::vector<float> out(rows * cols);
  const char* src = bytes.data() + data_start;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (elem == 4) {
      std::memcpy(&out[i], src + 4 * i, 4);
    } else {
      double dv;
      std::memcpy(&dv, src + 8 * i, 8);
      out[i] = static_cast<float>(dv);
    }
  }
  return out;
}

namespace {
void assign_rows(const std::string& what, const std::vector<float>& flat, std::size_t rows, std::size_t cols,
                 std::size_t expected_rows, const std::vector<std::vector<float>*>& targets) {
  if (rows != expected_rows)
    throw InputError(fmt::format("{}: {} rows, the trace needs {} (one per item, in trace order)", what, rows,
                                 expected_rows));
  if (cols == 0) throw InputError(fmt::format("{}: zero columns", what));
  for (std::size_t i = 0; i < rows; ++i) {
    std::vector<float> v(flat.begin() + i * cols, flat.begin() + (i + 1) * cols);
    double n = 0;
    for (float x : v) {
      if (!std::isfinite(x)) throw InputError(fmt::format("{}: row {} has a non-finite value", what, i));
      n += static_cast<double>(x) * x;
    }
    if (n == 0) throw InputError(fmt::format("{}: row {} is all zeros", what, i));
    const double s = 1.0 / std::sqrt(n);
    for (float& x : v) x = static_cast<float>(x * s);
    *targets[i] = std::move(v);
  }
}
}  // namespace

void import_embeddings(RagTrace& t, const std::string& path, const std::string& query_npy_path,
                       const std::string& model_name) {
  std::vector<std::vector<float>*> chunk_targets, query_targets;
  for (auto& u : t.users) {
    for (auto& c : u.chunks) chunk_targets.push_back(&c.embedding);
    for (auto& q : u.queries) query_targets.push_back(&q.embedding);
  }
  std::vector<float> cflat, qflat;
  std::size_t cr = 0, cc = 0, qr = 0, qc = 0;
  std::string model = model_name, cwhat, qwhat;
  if (!query_npy_path.empty()) {
    cflat = read_npy_matrix(path, cr, cc);
    qflat = read_npy_matrix(query_npy_path, qr, qc);
    cwhat = path;
    qwhat = query_npy_path;
    if (model.empty()) model = "external:" + path;
  } else {
    h5::Reader r(path);
    cflat = r.matrix("/chunk_embeddings", cr, cc);
    qflat = r.matrix("/query_embeddings", qr, qc);
    cwhat = path + ": /chunk_embeddings";
    qwhat = path + ": /query_embeddings";
    if (model.empty()) model = r.has_attr("/", "model") ? r.attr_string("/", "model") : "external:" + path;
  }
  if (cc != qc)
    throw InputError(fmt::format("{}: chunk embeddings have {} columns but query embeddings {}", path, cc, qc));
  assign_rows(cwhat, cflat, cr, cc, chunk_targets.size(), chunk_targets);
  assign_rows(qwhat, qflat, qr, qc, query_targets.size(), query_targets);
  t.meta.embedder = model;
  t.meta.embedding_dim = static_cast<std::int32_t>(cc);
}

}  // namespace mobisim::traces
