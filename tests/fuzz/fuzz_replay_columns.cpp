// Fuzz target: the replay columns of a RAG trace (`/replay`, traces/SCHEMA.md) in a file whose
// digest matches, read as a naive replay reads them (RagTraceFile::read_user without content or
// embeddings). A digest is no authentication (anyone can re-seal a file), so hostile values there
// must end in an InputError, never in a read outside a column or a user's chunks. The `trace`
// target mutates file bytes, which stops at the digest or at libhdf5; this one keeps the HDF5
// structure intact and edits the columns' values and lengths.
//
// Input: a sequence of 12-byte edits (column, operation, row: 2 bytes, value: 8 bytes).
#include <H5Cpp.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "traces/generator.h"
#include "traces/rag_trace_io.h"

using namespace mobisim;

namespace {

struct Column {
  const char* name;
  enum Kind { kInt64, kInt32, kDouble, kBytes } kind;
};
constexpr Column kColumns[] = {
    {"user_chunk_end", Column::kInt64}, {"user_query_end", Column::kInt64}, {"chunk_tokens", Column::kInt32},
    {"chunk_added_s", Column::kDouble}, {"query_arrival_s", Column::kDouble}, {"query_tokens", Column::kInt32},
    {"answer_tokens", Column::kInt32},  {"retrieved_end", Column::kInt64},  {"retrieved_ids", Column::kInt32},
    {"answer_text_end", Column::kInt64}, {"answer_text", Column::kBytes}};
constexpr std::size_t kNumColumns = sizeof(kColumns) / sizeof(kColumns[0]);
constexpr std::size_t kEditBytes = 12;

// A small valid trace with late chunks (so every column exists), and its columns' values.
struct Base {
  std::string path;
  std::vector<std::vector<double>> values;  // per column, as doubles (exact for these ranges)
};

const Base& base() {
  static const Base b = [] {
    Base out;
    out.path = fuzz::scratch_dir() + "/replay_base.h5";
    traces::RagTrace t = traces::generate_rag_trace_from_yaml(YAML::Load(R"(
users: 3
knowledge: {chunks_per_user: 5, chunk_words: 10, topics: 2, topic_vocab: 10}
queries: {per_user: 4, hot_chunks: 2}
embedder: {dim: 4}
retrieval: {k: 2}
)"),
                                                              "seed", 1);
    for (auto& u : t.users)
      for (std::size_t c = 0; c < u.chunks.size(); ++c) u.chunks[c].added_s = c == 4 ? 1.0 : 0.0;
    for (auto& u : t.users)
      for (auto& q : u.queries)
        std::erase_if(q.retrieved, [&](std::int32_t id) { return u.chunks[static_cast<std::size_t>(id)].added_s > q.arrival_s; });
    traces::write_rag_trace(out.path, t);
    const h5::Reader r(out.path);
    for (const auto& c : kColumns) {
      const std::string p = std::string("/replay/") + c.name;
      out.values.push_back(c.kind == Column::kDouble ? r.doubles(p) : [&] {
        const auto v = r.ints(p);
        return std::vector<double>(v.begin(), v.end());
      }());
    }
    return out;
  }();
  return b;
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  std::vector<T> out;
  out.reserve(v.size());
  for (double x : v) out.push_back(static_cast<T>(x));
  return out;
}

void write_column(const H5::Group& g, const Column& c, const std::vector<double>& v) {
  g.unlink(c.name);
  switch (c.kind) {
    case Column::kInt64: h5::write_dataset(g, c.name, as<std::int64_t>(v)); break;
    case Column::kInt32: h5::write_dataset(g, c.name, as<std::int32_t>(v)); break;
    case Column::kDouble: h5::write_dataset(g, c.name, v); break;
    case Column::kBytes: h5::write_dataset(g, c.name, as<std::uint8_t>(v)); break;
  }
}

// A value of the column's type from 8 input bytes: any double for floating columns (NaN and
// infinities included), else an integer clamped to the stored width.
double value_for(const Column& c, const std::uint8_t* bytes) {
  std::int64_t i = 0;
  std::memcpy(&i, bytes, sizeof(i));
  switch (c.kind) {
    case Column::kDouble: {
      double d = 0;
      std::memcpy(&d, bytes, sizeof(d));
      return d;
    }
    case Column::kInt32: return static_cast<double>(static_cast<std::int32_t>(i));
    case Column::kBytes: return static_cast<double>(static_cast<std::uint8_t>(i));
    case Column::kInt64: return static_cast<double>(i % (std::int64_t{1} << 40));
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::seeds_mode([](const std::string& dir) {
    fuzz::write_seed(dir, "none.bin", "");
    // One edit each: a retrieved id beyond the chunks, a user ending past the rows, a NaN arrival.
    auto edit = [](std::uint8_t column, std::uint8_t op, std::uint16_t row, std::int64_t v) {
      std::string e(kEditBytes, '\0');
      e[0] = static_cast<char>(column);
      e[1] = static_cast<char>(op);
      std::memcpy(e.data() + 2, &row, 2);
      std::memcpy(e.data() + 4, &v, 8);
      return e;
    };
    fuzz::write_seed(dir, "id.bin", edit(8, 0, 3, 99));
    fuzz::write_seed(dir, "end.bin", edit(1, 0, 2, 1000) + edit(10, 1, 5, 0));
    fuzz::write_seed(dir, "grow.bin", edit(7, 2, 0, 40) + edit(4, 0, 1, -1));
  });
  (void)base();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Base& b = base();
  std::map<std::size_t, std::vector<double>> edited;
  for (std::size_t at = 0; at + kEditBytes <= size && at < 64 * kEditBytes; at += kEditBytes) {
    const std::size_t col = data[at] % kNumColumns;
    auto it = edited.try_emplace(col, b.values[col]).first;
    std::vector<double>& v = it->second;
    std::uint16_t row = 0;
    std::memcpy(&row, data + at + 2, 2);
    const double value = value_for(kColumns[col], data + at + 4);
    switch (data[at + 1] % 3) {
      case 0:  // set a row
        if (!v.empty()) v[row % v.size()] = value;
        break;
      case 1:  // truncate
        v.resize(std::min<std::size_t>(v.size(), row % 64));
        break;
      default:  // append
        if (v.size() < 4096) v.push_back(value);
    }
  }
  const std::string path = fuzz::scratch_dir() + "/replay_input.h5";
  std::filesystem::copy_file(b.path, path, std::filesystem::copy_options::overwrite_existing);
  {
    H5::H5File f(path, H5F_ACC_RDWR);
    const H5::Group g = f.openGroup("/replay");
    for (const auto& [col, v] : edited) write_column(g, kColumns[col], v);
  }
  h5::reseal(path);
  try {
    const traces::RagTraceFile file(path);
    traces::UserParts lean{false, false};
    for (bool answers : {true, false}) {
      lean.answers = answers;
      for (std::size_t u = file.num_users(); u-- > 0;) (void)file.read_user(u, lean);
      for (std::size_t u = 0; u < file.num_users(); ++u) (void)file.read_user(u, lean);
    }
  } catch (const Error&) {
  }
  return 0;
}
