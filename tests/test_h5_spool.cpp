// Streaming result rows: extendible datasets, spooled tables written byte-identically to in-memory
// tables with a bounded buffer, and RAG runs that stream their records (same file at any --threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>

#include "sim/error.h"
#include "sim/h5.h"
#include "sim/stats.h"
#include "test_util.h"

namespace mobisim {
namespace {

using testing::TempDir;

TEST(H5Spool, AppendableDatasetGrowsAndReadsBackInAnyPieces) {
  TempDir dir;
  const std::string path = dir.file("grow.h5");
  std::vector<double> all;
  {
    h5::Writer w(path);
    h5::AppendableDataset<double> ds(w.root(), "x", 100);
    // Pieces smaller than, equal to and larger than a chunk, and an empty one.
    for (std::size_t n : {1u, 99u, 100u, 0u, 257u, 43u}) {
      std::vector<double> piece(n);
      for (std::size_t i = 0; i < n; ++i) piece[i] = 0.5 * static_cast<double>(all.size() + i) - 7.0;
      ds.append(piece.data(), piece.size());
      all.insert(all.end(), piece.begin(), piece.end());
      EXPECT_EQ(ds.size(), all.size());
    }
    std::vector<double> middle(150);
    ds.read(90, 150, middle.data());  // spans three chunks
    EXPECT_EQ(middle, std::vector<double>(all.begin() + 90, all.begin() + 240));
    EXPECT_THROW(ds.read(450, 100, middle.data()), Error);  // past the end (500 rows)
    w.commit();
  }
  h5::Reader r(path);
  EXPECT_EQ(r.doubles("/x", all.size()), all);
}

// A table of `rows` rows whose values depend on the row index only.
h5::Table make_rows(std::size_t first, std::size_t rows) {
  const std::vector<std::string> users{"u", "alice", "bob-the-longest-user-name", "carol"};
  std::vector<std::string> user;
  std::vector<std::int64_t> query;
  std::vector<double> latency;
  for (std::size_t r = first; r < first + rows; ++r) {
    user.push_back(users[(r / 7) % users.size()]);
    query.push_back(static_cast<std::int64_t>(r % 13) - 3);
    latency.push_back(1.0 / static_cast<double>(r + 3) + static_cast<double>(r));
  }
  h5::Table t;
  t.add("user", std::move(user));
  t.add("query", std::move(query));
  t.add("latency_s", std::move(latency), "s");
  return t;
}

void write_committed(const std::string& path, const std::function<void(const H5::Group&)>& fill) {
  h5::Writer w(path);
  {
    H5::Group root = w.root();
    fill(root);
  }
  w.commit();
}

TEST(H5Spool, SpooledTableWritesTheBytesOfTheWholeTableWithABoundedBuffer) {
  TempDir dir;
  // More rows than two of the result file's 65,536-row chunks, appended in uneven batches
  // through a 1,000-row buffer.
  const std::vector<std::size_t> batches{1, 999, 1000, 0, 37, 60000, 2500, 77777, 3};
  std::size_t total = 0;
  for (std::size_t b : batches) total += b;
  h5::SpooledTable spool(dir.file("scratch.h5"), 1000);
  std::size_t appended = 0;
  for (std::size_t b : batches) {
    spool.append(make_rows(appended, b));
    appended += b;
    EXPECT_EQ(spool.rows(), appended);
    EXPECT_LT(spool.buffered_rows(), spool.buffer_rows()) << "the buffer must stay bounded";
  }
  EXPECT_THROW(spool.doubles("latency_s"), Error);  // not finished
  spool.finish();
  EXPECT_EQ(spool.buffered_rows(), 0u);
  EXPECT_THROW(spool.append(make_rows(0, 1)), Error);

  const h5::Table whole = make_rows(0, total);
  EXPECT_EQ(spool.doubles("latency_s"), std::get<std::vector<double>>(whole.column("latency_s")));
  EXPECT_EQ(spool.ints("query"), std::get<std::vector<std::int64_t>>(whole.column("query")));
  write_committed(dir.file("memory.h5"), [&](const H5::Group& root) { whole.write(root, "records"); });
  write_committed(dir.file("spooled.h5"), [&](const H5::Group& root) { spool.write(root, "records"); });
  EXPECT_EQ(testing::read_bytes(dir.file("memory.h5")), testing::read_bytes(dir.file("spooled.h5")));
  h5::Reader r(dir.file("spooled.h5"));
  EXPECT_EQ(r.strings("/records/user", total), std::get<std::vector<std::string>>(whole.column("user")));
  EXPECT_EQ(r.attr_int("/records", "n_rows"), static_cast<std::int64_t>(total));
}

// A string column whose padded size would pass 64 MiB is variable-length (one long string among
// many short ones); written in pieces it must still equal the whole column.
TEST(H5Spool, VariableLengthStringColumnInPiecesMatchesTheWholeColumn) {
  TempDir dir;
  const std::size_t rows = 70'000;  // two 65,536-row pieces; 70,000 x 1,000 bytes > 64 MiB padded
  std::vector<std::string> text(rows);
  for (std::size_t r = 0; r < rows; ++r) text[r] = std::string("row").append(std::to_string(r % 97));  // not "x" + string: GCC 12 -Wrestrict
  text[12'345] = std::string(1000, 'x');
  h5::Table whole;
  whole.add("text", text);
  h5::SpooledTable spool(dir.file("scratch.h5"), 4096);
  for (std::size_t from = 0; from < rows; from += 10'000) {
    h5::Table part;
    part.add("text", std::vector<std::string>(text.begin() + static_cast<std::ptrdiff_t>(from),
                                              text.begin() + static_cast<std::ptrdiff_t>(std::min(rows, from + 10'000))));
    spool.append(part);
  }
  spool.finish();
  write_committed(dir.file("memory.h5"), [&](const H5::Group& root) { whole.write(root, "records"); });
  write_committed(dir.file("spooled.h5"), [&](const H5::Group& root) { spool.write(root, "records"); });
  EXPECT_EQ(h5::Reader(dir.file("spooled.h5")).strings("/records/text", rows), text);
  EXPECT_EQ(testing::read_bytes(dir.file("memory.h5")), testing::read_bytes(dir.file("spooled.h5")));
}

TEST(H5Spool, EmptySpooledTableMatchesEmptyTableAndScratchFileGoesAway) {
  TempDir dir;
  {
    h5::SpooledTable spool(dir.file("scratch.h5"), 10);
    spool.append(make_rows(0, 0));
    spool.finish();
    write_committed(dir.file("spooled.h5"), [&](const H5::Group& root) { spool.write(root, "records"); });
  }
  write_committed(dir.file("memory.h5"), [&](const H5::Group& root) { make_rows(0, 0).write(root, "records"); });
  EXPECT_EQ(testing::read_bytes(dir.file("memory.h5")), testing::read_bytes(dir.file("spooled.h5")));
  // Only the two result files: the scratch file went with the table.
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2u);
}

TEST(H5Spool, TablesSharingOneScratchFileKeepTheirOwnRows) {
  TempDir dir;
  {
    auto scratch = std::make_shared<h5::Writer>(dir.file("scratch.h5"));
    h5::SpooledTable a(scratch, "a", 64), b(scratch, "b", 64);
    scratch.reset();  // the tables keep the file
    for (std::size_t i = 0; i < 10; ++i) {  // interleaved, as policies of one block
      a.append(make_rows(i * 50, 50));
      b.append(make_rows(1000 + i * 30, 30));
    }
    a.finish();
    b.finish();
    write_committed(dir.file("a.h5"), [&](const H5::Group& root) { a.write(root, "records"); });
    write_committed(dir.file("b.h5"), [&](const H5::Group& root) { b.write(root, "records"); });
  }
  write_committed(dir.file("a0.h5"), [&](const H5::Group& root) { make_rows(0, 500).write(root, "records"); });
  write_committed(dir.file("b0.h5"), [&](const H5::Group& root) { make_rows(1000, 300).write(root, "records"); });
  EXPECT_EQ(testing::read_bytes(dir.file("a.h5")), testing::read_bytes(dir.file("a0.h5")));
  EXPECT_EQ(testing::read_bytes(dir.file("b.h5")), testing::read_bytes(dir.file("b0.h5")));
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 4u) << "the scratch file goes with the last table";
}

TEST(H5Spool, SpooledTableRefusesABatchWithOtherColumns) {
  TempDir dir;
  h5::SpooledTable spool(dir.file("scratch.h5"));
  spool.append(make_rows(0, 3));
  h5::Table other;
  other.add("user", std::vector<std::string>{"a"});
  EXPECT_THROW(spool.append(other), Error);
}

// A RAG run streams each policy's records through a spool: the result file is the same at any
// --threads (users replayed in blocks of 4 x threads, so 1 and 2 threads cut blocks differently),
// every record is there, and no scratch file is left beside the output.
TEST(H5Spool, RagRunStreamsRecordsIdenticallyForAnyThreadCount) {
  TempDir dir;
  auto gen = testing::run_mobisim("trace generate '" + testing::source_dir() +
                                  "/configs/workloads/rag_default.yaml' --out " + dir.file("trace.h5") +
                                  " -p users=9 -p queries.per_user=6 --seed 5");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  testing::write_text(dir.file("run.yaml"), "name: stream\nseed: 2\nexperiment:\n  impl: rag_qa\n  device: pixel7\n"
                                            "  model: {base: llama-3.2-1b, weight_dtype: int4}\n"
                                            "  workload: {trace: " + dir.file("trace.h5") + "}\n"
                                            "  policies:\n    - impl: naive\n    - impl: meancache\n");
  std::filesystem::create_directories(dir.file("out1"));
  std::filesystem::create_directories(dir.file("out2"));
  ASSERT_EQ(testing::same_bytes_at_one_and_two_threads(dir.file("run.yaml"), dir.file("out1/r.h5"), dir.file("out2/r.h5")), "");
  h5::Reader r(dir.file("out1/r.h5"));
  EXPECT_EQ(r.ints("/summary/queries"), (std::vector<std::int64_t>{54, 54}));
  // The summary, built from running sums and the latency column read back from the spool, equals
  // the same statistics computed from the written records, to the bit.
  const auto mean_latency = r.doubles("/summary/mean_latency_s"), p50 = r.doubles("/summary/p50_latency_s"),
             p90 = r.doubles("/summary/p90_latency_s"), mean_prefill = r.doubles("/summary/mean_prefill_s");
  for (std::size_t p = 0; p < 2; ++p) {
    const std::string records = p == 0 ? "/runs/naive/records/" : "/runs/meancache/records/";
    sim::Histogram latency;
    for (double x : r.doubles(records + "latency_s")) latency.add(x);
    double prefill = 0;
    for (double x : r.doubles(records + "prefill_s")) prefill += x;
    EXPECT_EQ(mean_latency[p], latency.mean());
    EXPECT_EQ(p50[p], latency.percentile(50));
    EXPECT_EQ(p90[p], latency.percentile(90));
    EXPECT_EQ(mean_prefill[p], prefill / 54.0);
  }
  for (const std::string& policy : std::vector<std::string>{"naive", "meancache"}) {
    const auto users = r.strings("/runs/" + policy + "/records/user", 54);
    const auto queries = r.ints("/runs/" + policy + "/records/query", 54);
    for (std::size_t i = 0; i < 54; ++i) EXPECT_EQ(queries[i], static_cast<std::int64_t>(i % 6)) << policy << i;
    for (std::size_t i = 6; i < 54; i += 6) EXPECT_NE(users[i], users[i - 1]) << "users in order, one after another";
  }
  for (const std::string& sub : std::vector<std::string>{"out1", "out2"}) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.file(sub))) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"r.h5", "r_summary.csv"})) << "no scratch file left in " << sub;
  }
}

}  // namespace
}  // namespace mobisim
