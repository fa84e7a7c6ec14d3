#pragma once
// Reading and writing RAG traces in the HDF5 layout of traces/SCHEMA.md.
//
// Writing is atomic (temp file + rename) and deterministic: the same trace gives
// the same bytes. Reading checks the format tag, the schema version (a newer
// version is refused, not guessed at), every dataset's shape and every index's
// range; any problem is an InputError naming the file and the object.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/h5.h"
#include "traces/rag_trace.h"


namespace mobisim::traces {

inline constexpr const char* kRagTraceFormat = "mobisim-rag-trace";
// Format tags of the other trace kinds (layouts in traces/SCHEMA.md): chat sessions are read and
// written by traces/chat_trace.h; decode-step traces are reserved for the issues that fill them.
inline constexpr const char* kChatTraceFormat = "mobisim-chat-trace";
inline constexpr const char* kChatSessionsGroup = "/chat_sessions";
inline constexpr const char* kDecodeTraceFormat = "mobisim-decode-trace";
inline constexpr const char* kDecodeStepsGroup = "/decode_steps";

// Throws mobisim::Error when the in-memory trace is inconsistent (a bug in the
// producer): embeddings of the wrong size, retrieved ids out of range, arrival
// times out of order.
void validate_rag_trace(const RagTrace& trace, const std::string& what);

void write_rag_trace(const std::string& path, const RagTrace& trace);
RagTrace read_rag_trace(const std::string& path);

// Writes a trace one user at a time (what write_rag_trace does, and the same bytes), so a
// generator need not hold the whole trace: the root attributes come first, then each user. Each
// user also goes into the replay columns (`/replay`, traces/SCHEMA.md), buffered a chunk at a time.
class RagTraceWriter {
 public:
  RagTraceWriter(const std::string& path, const RagTraceMeta& meta, std::size_t num_users,
                 std::int64_t schema_version);
  ~RagTraceWriter();
  void add_user(const UserTrace& user);  // the caller validates it (validate_rag_trace)
  void commit();                         // after exactly num_users users

 private:
  class ReplayColumns;
  h5::Writer writer_;
  std::size_t dim_;
  bool late_;
  std::size_t num_users_, written_ = 0;
  H5::Group users_;
  std::unique_ptr<ReplayColumns> replay_;
};

// A RAG trace file read one user at a time, so a replay holds one user's working set rather
// than the whole trace. Opening reads (and checks) the metadata and the user ids only; each
// read_user() does every check read_rag_trace() does for that user. `embeddings` = false skips
// the embedding matrices (a policy that never matches by embedding does not need them), unless
// a query of that user lacks precomputed retrieval (it is then retrieved by embedding cosine).
// `UserParts` chooses what else is read: a replay whose policies use only the numbers (naive:
// arrival times, token counts, precomputed retrieval, chunk arrival) skips the texts, labels and
// idle windows (`content` = false); the reference answers are always read (the driver scores them).
// Such a read (no content, no embeddings) comes from the replay columns (`/replay`: one dataset per
// field across all users, read a window of rows at a time) when the file has them and its digest
// matched, so a replay of many short users opens a dozen datasets, not nine per user; otherwise,
// and for a user with a query lacking precomputed retrieval, from the user's own group. Only what
// is read is checked. One HDF5 library underneath: call from one thread at a time.
struct UserParts {
  bool embeddings = true;  // chunk and query embedding matrices (see above)
  bool content = true;     // chunk and query texts, query kinds, topics and relevant ids, the topic list,
                           // idle windows
  // The reference answers. False (a check that the user can be replayed, whose answers are read
  // again later): in a file whose digest matched (every byte as mobisim wrote it, so reading them
  // cannot fail) only their dataset's shape is checked, not inflated; otherwise they are read.
  bool answers = true;
};

class RagTraceFile {
 public:
  explicit RagTraceFile(const std::string& path);
  ~RagTraceFile();
  RagTraceFile(const RagTraceFile&) = delete;
  RagTraceFile& operator=(const RagTraceFile&) = delete;
  const std::string& path() const;
  const RagTraceMeta& meta() const { return meta_; }
  std::size_t num_users() const { return user_ids_.size(); }
  const std::string& user_id(std::size_t u) const { return user_ids_.at(u); }
  UserTrace read_user(std::size_t u, const UserParts& parts) const;
  // True when numbers-only reads come from the replay columns (see above).
  bool has_replay_columns() const { return replay_ != nullptr; }

 private:
  class ReplayColumns;
  UserTrace read_user_group(std::size_t u, const UserParts& parts) const;
  std::unique_ptr<h5::Reader> reader_;
  RagTraceMeta meta_;
  std::vector<std::string> user_ids_;
  std::unique_ptr<ReplayColumns> replay_;  // declared after reader_: closed before the file
};

// Replaces every chunk and query embedding with vectors from an external model
// (e.g. Qwen3-Embedding-0.6B, as PerCache used), L2-normalising each row.
// Rows are in trace order: all chunks of user 0, then of user 1, ...; likewise
// for queries. Accepted inputs (see SCHEMA.md, "External embeddings"):
//   * an HDF5 file with float datasets /chunk_embeddings [C, D] and
//     /query_embeddings [Q, D] and an optional string attribute /model;
//   * a pair of NumPy .npy files (float32 or float64, C order, 2-D): pass the
//     chunk file as `path` and the query file as `query_npy_path`.
// `model_name` overrides the recorded embedder name. Retrieval over such a trace
// needs query embeddings from the same model (the built-in embedder cannot
// produce them).
void import_embeddings(RagTrace& trace, const std::string& path, const std::string& query_npy_path = "",
                       const std::string& model_name = "");

// A 2-D float matrix from a .npy file (descr <f4 or <f8, C order). InputError otherwise.
std::vector<float> read_npy_matrix(const std::string& path, std::size_t& rows, std::size_t& cols);

}  // namespace mobisim::traces
