// HDF5 RAG trace round trip and error paths; external embeddings.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "test_traces_util.h"
#include "traces/rag_trace_io.h"

using namespace mobisim;
using namespace mobisim::traces;

namespace {

RagTrace sample_trace() {
  RagTrace t;
  t.meta.source = "test";
  t.meta.tokenizer = "estimate";
  t.meta.tokens_exact = false;
  t.meta.embedder = "unit-test";
  t.meta.embedding_dim = 3;
  t.meta.chunker = "words";
  t.meta.chunk_words = 100;
  t.meta.arrival_model = "fixed";
  t.meta.params_yaml = "a: 1\n";
  t.meta.retrieval = "bm25";
  t.meta.retrieved_k = 2;
  UserTrace u;
  u.user_id = "alice";
  u.topics = {"budget", "rehearsal \xc3\xa9t\xc3\xa9"};
  u.chunks.push_back(Chunk{"chunk zero", 3, {1, 0, 0}});
  u.chunks.push_back(Chunk{"chunk one \xe2\x9c\x93", 4, {0, 1, 0}});
  Query q;
  q.text = "what about zero?";
  q.arrival_s = 10.5;
  q.tokens = 5;
  q.embedding = {0.6f, 0.8f, 0};
  q.answer_text = "zero";
  q.answer_tokens = 2;
  q.retrieved = {0, 1};
  q.relevant = {0};
  q.kind = "general";
  q.topic = 1;
  u.queries.push_back(q);
  q.text = "and one?";
  q.arrival_s = 7200;
  q.retrieved = {1};
  q.relevant = {};
  q.kind = "specific";
  q.topic = -1;
  u.queries.push_back(q);
  u.idle_windows = {{0, 5, true}, {600, 7000, false}};
  t.users.push_back(u);
  UserTrace empty;
  empty.user_id = "bob";
  t.users.push_back(empty);
  return t;
}

void expect_same(const RagTrace& a, const RagTrace& b) {
  EXPECT_EQ(a.meta.source, b.meta.source);
  EXPECT_EQ(a.meta.tokenizer, b.meta.tokenizer);
  EXPECT_EQ(a.meta.tokens_exact, b.meta.tokens_exact);
  EXPECT_EQ(a.meta.embedder, b.meta.embedder);
  EXPECT_EQ(a.meta.embedding_dim, b.meta.embedding_dim);
  EXPECT_EQ(a.meta.chunk_words, b.meta.chunk_words);
  EXPECT_EQ(a.meta.params_yaml, b.meta.params_yaml);
  EXPECT_EQ(a.meta.retrieval, b.meta.retrieval);
  EXPECT_EQ(a.meta.retrieved_k, b.meta.retrieved_k);
  ASSERT_EQ(a.users.size(), b.users.size());
  for (std::size_t u = 0; u < a.users.size(); ++u) {
    const auto &x = a.users[u], &y = b.users[u];
    EXPECT_EQ(x.user_id, y.user_id);
    EXPECT_EQ(x.topics, y.topics);
    ASSERT_EQ(x.chunks.size(), y.chunks.size());
    for (std::size_t c = 0; c < x.chunks.size(); ++c) {
      EXPECT_EQ(x.chunks[c].text, y.chunks[c].text);
      EXPECT_EQ(x.chunks[c].tokens, y.chunks[c].tokens);
      EXPECT_EQ(x.chunks[c].embedding, y.chunks[c].embedding);
    }
    ASSERT_EQ(x.queries.size(), y.queries.size());
    for (std::size_t q = 0; q < x.queries.size(); ++q) {
      const auto &p = x.queries[q], &r = y.queries[q];
      EXPECT_EQ(p.text, r.text);
      EXPECT_EQ(p.arrival_s, r.arrival_s);
      EXPECT_EQ(p.tokens, r.tokens);
      EXPECT_EQ(p.embedding, r.embedding);
      EXPECT_EQ(p.answer_text, r.answer_text);
      EXPECT_EQ(p.answer_tokens, r.answer_tokens);
      EXPECT_EQ(p.retrieved, r.retrieved);
      EXPECT_EQ(p.relevant, r.relevant);
      EXPECT_EQ(p.kind, r.kind);
      EXPECT_EQ(p.topic, r.topic);
    }
    ASSERT_EQ(x.idle_windows.size(), y.idle_windows.size());
    for (std::size_t i = 0; i < x.idle_windows.size(); ++i) {
      EXPECT_EQ(x.idle_windows[i].start_s, y.idle_windows[i].start_s);
      EXPECT_EQ(x.idle_windows[i].end_s, y.idle_windows[i].end_s);
      EXPECT_EQ(x.idle_windows[i].charging, y.idle_windows[i].charging);
    }
  }
}

// Rewrites one root attribute of an existing file.
// (then re-seals the digest, so the reader's checks behind it are reached).
void set_root_attr(const std::string& path, const std::string& name, std::int64_t v) {
  {
    H5::H5File f(path, H5F_ACC_RDWR);
    h5::write_attr(f.openGroup("/"), name, v);
  }
  h5::reseal(path);
}

}  // namespace

TEST(TraceIo, RoundTripKeepsEveryField) {
  const std::string dir = trace_testing::temp_dir("io");
  const std::string p = dir + "/t.h5";
  const RagTrace t = sample_trace();
  write_rag_trace(p, t);
  expect_same(t, read_rag_trace(p));
  // Deterministic bytes.
  write_rag_trace(dir + "/t2.h5", t);
  EXPECT_EQ(read_file(p), read_file(dir + "/t2.h5"));
}

TEST(TraceIo, TraceWithoutEmbeddingsRoundTrips) {
  RagTrace t = sample_trace();
  t.meta.embedding_dim = 0;
  for (auto& u : t.users) {
    for (auto& c : u.chunks) c.embedding.clear();
    for (auto& q : u.queries) q.embedding.clear();
  }
  const std::string p = trace_testing::temp_dir("io-noemb") + "/t.h5";
  write_rag_trace(p, t);
  expect_same(t, read_rag_trace(p));
}

TEST(TraceIo, WriterRejectsInconsistentTraces) {
  RagTrace t = sample_trace();
  t.users[0].queries[0].retrieved = {7};
  EXPECT_THROW(write_rag_trace(trace_testing::temp_dir("io-bad") + "/t.h5", t), Error);
  t = sample_trace();
  t.users[0].queries[1].arrival_s = 1.0;  // earlier than query 0
  EXPECT_THROW(write_rag_trace(trace_testing::temp_dir("io-bad") + "/t.h5", t), Error);
  t = sample_trace();
  t.users[0].chunks[0].embedding = {1, 0};
  EXPECT_THROW(write_rag_trace(trace_testing::temp_dir("io-bad") + "/t.h5", t), Error);
}

TEST(TraceIo, NewerSchemaVersionIsAnInputError) {
  const std::string p = trace_testing::temp_dir("io-ver") + "/t.h5";
  write_rag_trace(p, sample_trace());
  set_root_attr(p, "schema_version", kRagSchemaVersion + 1);
  try {
    read_rag_trace(p);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  set_root_attr(p, "schema_version", 0);
  EXPECT_THROW(read_rag_trace(p), InputError);
}

TEST(TraceIo, TruncatedFileIsAnInputError) {
  const std::string dir = trace_testing::temp_dir("io-trunc");
  const std::string p = dir + "/t.h5";
  write_rag_trace(p, sample_trace());
  const std::string bytes = read_file(p);
  for (std::size_t keep : {bytes.size() / 2, std::size_t{100}, std::size_t{0}}) {
    const std::string q = dir + "/cut.h5";
    std::ofstream(q, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(keep));
    EXPECT_THROW(read_rag_trace(q), InputError) << "kept " << keep << " bytes";
  }
  EXPECT_THROW(read_rag_trace(dir + "/missing.h5"), InputError);
}

TEST(TraceIo, WrongShapesAndForeignFilesAreInputErrors) {
  const std::string dir = trace_testing::temp_dir("io-shape");
  {
    // An HDF5 file that is not a trace.
    h5::Writer w(dir + "/other.h5");
    h5::write_attr(w.root(), "format", "something-else");
    w.commit();
  }
  EXPECT_THROW(read_rag_trace(dir + "/other.h5"), InputError);
  const std::string p = dir + "/t.h5";
  write_rag_trace(p, sample_trace());
  set_root_attr(p, "embedding_dim", 4);  // matrices are [n, 3]
  try {
    read_rag_trace(p);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("embedding"), std::string::npos) << e.what();
  }
  write_rag_trace(p, sample_trace());
  set_root_attr(p, "num_users", 3);
  EXPECT_THROW(read_rag_trace(p), InputError);
}

namespace {
void write_npy(const std::string& path, const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  std::ofstream(path, std::ios::binary) << out;
}
}  // namespace

TEST(TraceIo, ImportsExternalEmbeddingsFromNpyAndHdf5) {
  const std::string dir = trace_testing::temp_dir("io-emb");
  RagTrace t = sample_trace();  // 2 chunks, 2 queries in total
  write_npy(dir + "/c.npy", {3, 4, 0, 0, 0, 2}, 2, 3);
  write_npy(dir + "/q.npy", {1, 0, 0, 0, 0, 5}, 2, 3);
  import_embeddings(t, dir + "/c.npy", dir + "/q.npy", "Qwen3-Embedding-0.6B");
  EXPECT_EQ(t.meta.embedder, "Qwen3-Embedding-0.6B");
  EXPECT_EQ(t.meta.embedding_dim, 3);
  EXPECT_EQ(t.users[0].chunks[0].embedding, (std::vector<float>{0.6f, 0.8f, 0.0f}));  // L2-normalised
  EXPECT_EQ(t.users[0].queries[1].embedding, (std::vector<float>{0, 0, 1}));
  // Row count must match the trace.
  write_npy(dir + "/q3.npy", {1, 0, 0, 0, 1, 0, 0, 0, 1}, 3, 3);
  EXPECT_THROW(import_embeddings(t, dir + "/c.npy", dir + "/q3.npy"), InputError);
  // HDF5 variant with a model attribute, dimension 2.
  {
    h5::Writer w(dir + "/e.h5");
    h5::write_matrix(w.root(), "chunk_embeddings", {1, 0, 0, 1}, 2, 2);
    h5::write_matrix(w.root(), "query_embeddings", {1, 1, 2, 0}, 2, 2);
    h5::write_attr(w.root(), "model", "m2");
    w.commit();
  }
  import_embeddings(t, dir + "/e.h5");
  EXPECT_EQ(t.meta.embedder, "m2");
  EXPECT_EQ(t.meta.embedding_dim, 2);
  write_rag_trace(dir + "/t.h5", t);
  EXPECT_EQ(read_rag_trace(dir + "/t.h5").users[0].queries[1].embedding, (std::vector<float>{1, 0}));
  std::ofstream(dir + "/bad.npy") << "not numpy";
  EXPECT_THROW(import_embeddings(t, dir + "/bad.npy", dir + "/q.npy"), InputError);
}

// Issue 12: a replay reads users one at a time; what it gets must be what the whole-file read gives.
TEST(TraceIo, TraceFileReadsUsersOneAtATimeAsTheWholeFileRead) {
  const std::string dir = trace_testing::temp_dir("io_lazy");
  const std::string p = dir + "/t.h5";
  RagTrace t = sample_trace();
  write_rag_trace(p, t);
  const RagTraceFile f(p);
  ASSERT_EQ(f.num_users(), t.users.size());
  RagTrace rebuilt;
  rebuilt.meta = f.meta();
  for (std::size_t u = 0; u < f.num_users(); ++u) {
    EXPECT_EQ(f.user_id(u), t.users[u].user_id);
    rebuilt.users.push_back(f.read_user(u, UserParts{}));
  }
  expect_same(t, rebuilt);
}

TEST(TraceIo, TraceFileSkipsEmbeddingsOnlyWhenEveryQueryHasItsRetrieval) {
  const std::string dir = trace_testing::temp_dir("io_lazy_emb");
  RagTrace t = sample_trace();
  ASSERT_GT(t.meta.embedding_dim, 0);
  for (auto& u : t.users)
    for (auto& q : u.queries)
      if (q.retrieved.empty()) q.retrieved = {0};
  write_rag_trace(dir + "/all.h5", t);
  const RagTraceFile all(dir + "/all.h5");
  for (std::size_t u = 0; u < all.num_users(); ++u) {
    const UserTrace lean = all.read_user(u, UserParts{false});
    for (const auto& c : lean.chunks) EXPECT_TRUE(c.embedding.empty());
    for (const auto& q : lean.queries) EXPECT_TRUE(q.embedding.empty());
    // Everything else is there.
    ASSERT_EQ(lean.queries.size(), t.users[u].queries.size());
    for (std::size_t i = 0; i < lean.queries.size(); ++i) {
      EXPECT_EQ(lean.queries[i].text, t.users[u].queries[i].text);
      EXPECT_EQ(lean.queries[i].retrieved, t.users[u].queries[i].retrieved);
    }
  }
  // A query without precomputed retrieval is retrieved by embedding cosine: its user keeps them.
  t.users[0].queries[0].retrieved.clear();
  write_rag_trace(dir + "/one.h5", t);
  const RagTraceFile one(dir + "/one.h5");
  const UserTrace kept = one.read_user(0, UserParts{false});
  EXPECT_EQ(kept.chunks[0].embedding, t.users[0].chunks[0].embedding);
  EXPECT_EQ(kept.queries[0].embedding, t.users[0].queries[0].embedding);
}

// Issue 12: a naive replay reads of each user only the numbers and the reference answers
// (UserParts::content = false); what it reads equals the full read, the rest is left empty, and
// only what it reads can fail it (a damaged text it never reads does not; a missing answer does).
TEST(TraceIo, TraceFileWithoutContentReadsTheNumbersAndAnswersOnly) {
  const std::string dir = trace_testing::temp_dir("io_lean");
  RagTrace t = sample_trace();
  t.users[0].chunks[1].added_s = 5.0;  // schema 2: chunks/added_s is read in both modes
  write_rag_trace(dir + "/t.h5", t);
  const RagTraceFile f(dir + "/t.h5");
  for (std::size_t u = 0; u < f.num_users(); ++u) {
    const UserTrace full = f.read_user(u, UserParts{});
    const UserTrace lean = f.read_user(u, UserParts{false, false});
    EXPECT_EQ(lean.user_id, full.user_id);
    EXPECT_TRUE(lean.topics.empty());
    EXPECT_TRUE(lean.idle_windows.empty());
    ASSERT_EQ(lean.chunks.size(), full.chunks.size());
    for (std::size_t c = 0; c < lean.chunks.size(); ++c) {
      EXPECT_EQ(lean.chunks[c].tokens, full.chunks[c].tokens);
      EXPECT_EQ(lean.chunks[c].added_s, full.chunks[c].added_s);
      EXPECT_TRUE(lean.chunks[c].text.empty());
      EXPECT_TRUE(lean.chunks[c].embedding.empty());
    }
    ASSERT_EQ(lean.queries.size(), full.queries.size());
    for (std::size_t q = 0; q < lean.queries.size(); ++q) {
      const Query &a = lean.queries[q], &b = full.queries[q];
      EXPECT_EQ(a.arrival_s, b.arrival_s);
      EXPECT_EQ(a.tokens, b.tokens);
      EXPECT_EQ(a.answer_text, b.answer_text);
      EXPECT_EQ(a.answer_tokens, b.answer_tokens);
      EXPECT_EQ(a.retrieved, b.retrieved);
      EXPECT_TRUE(a.text.empty() && a.kind.empty() && a.relevant.empty() && a.embedding.empty());
      EXPECT_EQ(a.topic, -1);
    }
  }
  EXPECT_EQ(f.read_user(0, UserParts{}).chunks[1].added_s, 5.0);
  EXPECT_EQ(f.read_user(0, UserParts{}).queries[1].kind, "specific");

  // Damage a content dataset and an answer dataset (re-sealed, so the reader's own checks run) in
  // a file without the replay columns (as an older mobisim wrote), whose lean reads come from the
  // users' groups; the replay columns' own checks are TraceIo.ReplayColumns*.
  auto drop = [&](const std::string& name, const std::string& object) -> std::string {
    const std::string p = dir + "/" + name;
    write_rag_trace(p, t);
    {
      H5::H5File h(p, H5F_ACC_RDWR);
      EXPECT_GE(H5Ldelete(h.getId(), "/replay", H5P_DEFAULT), 0);
      EXPECT_GE(H5Ldelete(h.getId(), object.c_str(), H5P_DEFAULT), 0) << object;
    }
    h5::reseal(p);
    return p;
  };
  auto message = [](const RagTraceFile& file, const UserParts& parts) -> std::string {
    try {
      (void)file.read_user(0, parts);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  const std::string no_text = drop("no_text.h5", "/users/u00000/chunks/text");
  const RagTraceFile nt(no_text);
  EXPECT_EQ(message(nt, UserParts{false, false}), "");
  const std::string full_error = message(nt, UserParts{false, true});
  EXPECT_NE(full_error.find(no_text), std::string::npos) << full_error;
  EXPECT_NE(full_error.find("/users/u00000/chunks/text: missing dataset"), std::string::npos) << full_error;
  const std::string no_answer = drop("no_answer.h5", "/users/u00000/queries/answer_text");
  const std::string lean_error = message(RagTraceFile(no_answer), UserParts{false, false});
  EXPECT_NE(lean_error.find(no_answer), std::string::npos) << lean_error;
  EXPECT_NE(lean_error.find("/users/u00000/queries/answer_text: missing dataset"), std::string::npos) << lean_error;
  // A missing group on the way is reported as the dataset missing too.
  const std::string no_queries = drop("no_queries.h5", "/users/u00000/queries");
  const std::string group_error = message(RagTraceFile(no_queries), UserParts{false, false});
  EXPECT_NE(group_error.find("/users/u00000/queries/arrival_s: missing dataset"), std::string::npos) << group_error;
}

// Issue 12: a check read without answers (UserParts::answers = false) skips inflating them only
// where reading them later cannot fail: a file whose digest matched. There their dataset's shape
// is still checked; a file without a digest (written by another tool) has them read and checked.
TEST(TraceIo, TraceFileSkipsAnswerTextsOnlyInADigestCheckedFile) {
  const std::string dir = trace_testing::temp_dir("io_answers");
  const RagTrace t = sample_trace();
  const std::string sealed = dir + "/sealed.h5";
  write_rag_trace(sealed, t);
  UserParts check{false, false};
  check.answers = false;
  const RagTraceFile f(sealed);
  ASSERT_EQ(f.read_user(0, check).queries.size(), 2u);
  for (const auto& q : f.read_user(0, check).queries) EXPECT_TRUE(q.answer_text.empty());
  EXPECT_EQ(f.read_user(0, UserParts{false, false}).queries[0].answer_text, "zero");

  // A shorter answer column (re-sealed: the digest matches again) fails the check read too (from
  // the user's group: the file has no replay columns, as an older mobisim wrote).
  const std::string short_answers = dir + "/short.h5";
  write_rag_trace(short_answers, t);
  {
    H5::H5File h(short_answers, H5F_ACC_RDWR);
    EXPECT_GE(H5Ldelete(h.getId(), "/replay", H5P_DEFAULT), 0);
    H5::Group qg = h.openGroup("/users/u00000/queries");
    qg.unlink("answer_text");
    h5::write_dataset(qg, "answer_text", std::vector<std::string>{"zero"});
  }
  h5::reseal(short_answers);
  try {
    (void)RagTraceFile(short_answers).read_user(0, check);
    ADD_FAILURE() << "a one-answer column for two queries was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/users/u00000/queries/answer_text"), std::string::npos) << e.what();
  }

  // Without the user block (no digest) the answers are read even by a check read.
  const std::string bytes = read_file(sealed);
  const std::string foreign = dir + "/foreign.h5";
  std::ofstream(foreign, std::ios::binary) << bytes.substr(512);
  const RagTraceFile ff(foreign);
  EXPECT_EQ(ff.read_user(0, check).queries[0].answer_text, "zero");
}

namespace {

// Many short users with every number varied (late chunks, empty answers, 1-3 retrieved chunks): 6,000
// queries, ~12,000 retrieved ids and ~150 KB of answers, so the replay columns span several written
// chunks (1,024 rows, 16 KiB of text) and the reader's windows (4,096 rows, 64 KiB) turn over.
RagTrace many_users_trace() {
  RagTrace t = sample_trace();
  t.meta.embedding_dim = 0;
  t.users.clear();
  std::uint64_t x = 12345;
  auto next = [&x](std::uint64_t n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (x >> 33) % n;
  };
  for (std::size_t u = 0; u < 300; ++u) {
    UserTrace ut;
    ut.user_id = "user" + std::to_string(u);
    const std::size_t chunks = 1 + next(9);
    for (std::size_t c = 0; c < chunks; ++c)
      ut.chunks.push_back(Chunk{"", static_cast<std::int32_t>(next(600)), {}, c % 3 == 0 ? 0.0 : 10.0 * static_cast<double>(c)});
    double arrival = 100.0;
    for (std::size_t q = 0; q < 20; ++q) {
      Query qq;
      arrival += static_cast<double>(next(1000)) * 0.25;
      qq.arrival_s = arrival;
      qq.tokens = static_cast<std::int32_t>(next(300));
      qq.answer_tokens = static_cast<std::int32_t>(next(200));
      qq.answer_text = q % 5 == 0 ? "" : "answer " + std::to_string(q) + " of " + ut.user_id + " \xc3\xa9t\xc3\xa9";
      for (std::size_t k = 0, n = 1 + next(3); k < n; ++k) qq.retrieved.push_back(static_cast<std::int32_t>(next(chunks)));
      ut.queries.push_back(std::move(qq));
    }
    t.users.push_back(std::move(ut));
  }
  return t;
}

// The numbers a lean read gives (UserParts{false, false}): equal field by field.
void expect_same_numbers(const UserTrace& a, const UserTrace& b, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(a.user_id, b.user_id);
  ASSERT_EQ(a.chunks.size(), b.chunks.size());
  for (std::size_t c = 0; c < a.chunks.size(); ++c) {
    EXPECT_EQ(a.chunks[c].tokens, b.chunks[c].tokens);
    EXPECT_EQ(a.chunks[c].added_s, b.chunks[c].added_s);
  }
  ASSERT_EQ(a.queries.size(), b.queries.size());
  for (std::size_t q = 0; q < a.queries.size(); ++q) {
    EXPECT_EQ(a.queries[q].arrival_s, b.queries[q].arrival_s);
    EXPECT_EQ(a.queries[q].tokens, b.queries[q].tokens);
    EXPECT_EQ(a.queries[q].answer_tokens, b.queries[q].answer_tokens);
    EXPECT_EQ(a.queries[q].answer_text, b.queries[q].answer_text);
    EXPECT_EQ(a.queries[q].retrieved, b.queries[q].retrieved);
  }
}

// A copy of a trace file without its replay columns (as an older mobisim wrote it), re-sealed.
std::string without_replay_columns(const std::string& path, const std::string& copy) {
  std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
  {
    H5::H5File h(copy, H5F_ACC_RDWR);
    EXPECT_GE(H5Ldelete(h.getId(), "/replay", H5P_DEFAULT), 0);
  }
  h5::reseal(copy);
  return copy;
}

}  // namespace

// Issue 12: a lean read (a naive replay's) comes from the replay columns, and gives exactly what
// the users' groups give, in any order of users, with or without the answers; a user with a query
// lacking precomputed retrieval is read from its group (its embeddings are needed).
TEST(TraceIo, ReplayColumnsGiveWhatTheUsersGroupsGive) {
  const std::string dir = trace_testing::temp_dir("io_replay");
  RagTrace t = many_users_trace();
  t.users[7].queries[3].retrieved.clear();
  write_rag_trace(dir + "/t.h5", t);
  const RagTraceFile columns(dir + "/t.h5");
  const RagTraceFile groups(without_replay_columns(dir + "/t.h5", dir + "/old.h5"));
  ASSERT_TRUE(columns.has_replay_columns());
  ASSERT_FALSE(groups.has_replay_columns());
  const UserParts lean{false, false};
  for (std::size_t u = 0; u < t.users.size(); ++u) {
    const UserTrace a = columns.read_user(u, lean);
    expect_same_numbers(a, groups.read_user(u, lean), "user " + std::to_string(u));
    expect_same_numbers(a, t.users[u], "written user " + std::to_string(u));
  }
  UserParts check = lean;
  check.answers = false;
  for (std::size_t u = t.users.size(); u-- > 0;) {  // backwards: every read leaves the window
    UserTrace a = columns.read_user(u, check);
    for (const auto& q : a.queries) EXPECT_TRUE(q.answer_text.empty());
    for (std::size_t q = 0; q < a.queries.size(); ++q) a.queries[q].answer_text = t.users[u].queries[q].answer_text;
    expect_same_numbers(a, t.users[u], "backwards, user " + std::to_string(u));
  }
  // The user with a query lacking precomputed retrieval was read from its group, with embeddings.
  RagTrace small = sample_trace();
  small.users[0].queries[0].retrieved.clear();
  write_rag_trace(dir + "/small.h5", small);
  const UserTrace kept = RagTraceFile(dir + "/small.h5").read_user(0, lean);
  EXPECT_EQ(kept.queries[0].embedding, small.users[0].queries[0].embedding);
  EXPECT_EQ(kept.chunks[1].embedding, small.users[0].chunks[1].embedding);
  // A trace with no late chunks has no chunk_added_s column; reads are unchanged.
  RagTrace early = many_users_trace();
  for (auto& u : early.users)
    for (auto& c : u.chunks) c.added_s = 0;
  write_rag_trace(dir + "/early.h5", early);
  EXPECT_FALSE(h5::Reader(dir + "/early.h5").exists("/replay/chunk_added_s"));
  const RagTraceFile e(dir + "/early.h5");
  for (std::size_t u = 0; u < early.users.size(); u += 37)
    expect_same_numbers(e.read_user(u, lean), early.users[u], "early user " + std::to_string(u));
}

// Hostile replay columns in a file whose digest matches (re-sealed) are refused, naming the
// column: at open when the columns disagree with each other, at the read of the user they damage.
TEST(TraceIo, ReplayColumnsDamageIsAnErrorNamingTheColumn) {
  const std::string dir = trace_testing::temp_dir("io_replay_damage");
  const RagTrace t = many_users_trace();
  write_rag_trace(dir + "/t.h5", t);
  auto replaced = [&](const std::string& name, const std::string& column, auto values) {
    const std::string p = dir + "/" + name;
    std::filesystem::copy_file(dir + "/t.h5", p, std::filesystem::copy_options::overwrite_existing);
    {
      H5::H5File h(p, H5F_ACC_RDWR);
      H5::Group g = h.openGroup("/replay");
      g.unlink(column);
      h5::write_dataset(g, column, values);
    }
    h5::reseal(p);
    return p;
  };
  auto error_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  const UserParts lean{false, false};
  // A user ending beyond the columns' rows: refused at open.
  std::vector<std::int64_t> ends;
  for (std::size_t u = 0, end = 0; u < t.users.size(); ++u) ends.push_back(static_cast<std::int64_t>(end += t.users[u].queries.size()));
  ends.back() += 1;
  const std::string long_user = replaced("ends.h5", "user_query_end", ends);
  std::string e = error_of([&] { RagTraceFile f(long_user); });
  EXPECT_NE(e.find("/replay/user_query_end"), std::string::npos) << e;
  // A retrieved id beyond its user's chunks: refused when that user is read.
  std::vector<std::int32_t> ids;
  for (const auto& u : t.users)
    for (const auto& q : u.queries) ids.insert(ids.end(), q.retrieved.begin(), q.retrieved.end());
  ids[ids.size() - 1] = 99;
  const std::string bad_id = replaced("ids.h5", "retrieved_ids", ids);
  const RagTraceFile f(bad_id);
  EXPECT_NO_THROW((void)f.read_user(0, lean));
  e = error_of([&] { (void)f.read_user(t.users.size() - 1, lean); });
  EXPECT_NE(e.find("/replay/retrieved_ids"), std::string::npos) << e;
  EXPECT_NE(e.find("is not a chunk id"), std::string::npos) << e;
  // A token count stored as floating point: refused at open.
  const std::string floats = replaced("floats.h5", "query_tokens", std::vector<double>(6000, 1.0));
  e = error_of([&] { RagTraceFile g(floats); });
  EXPECT_NE(e.find("/replay/query_tokens: unexpected element type"), std::string::npos) << e;
  // An answer ending before the previous one: refused when read.
  std::vector<std::int64_t> answer_ends(6000, 0);
  answer_ends[0] = 5;
  const std::string back = replaced("answers.h5", "answer_text_end", answer_ends);
  e = error_of([&] { (void)RagTraceFile(back).read_user(0, lean); });
  EXPECT_NE(e.find("/replay/answer_text_end[1]"), std::string::npos) << e;
}

