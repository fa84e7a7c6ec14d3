// `mobisim export RESULT.h5 --csv DIR`: a result file as tidy CSV tables that pandas reads with
// read_csv, strings as text: one row per query (or request, step: whatever the experiment
// records) over every variant, the per-variant summary, and the experiment's extra tables.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "sim/atomic_file.h"
#include "sim/cli.h"
#include "sim/error.h"
#include "sim/h5.h"

namespace mobisim::experiments {
namespace {

namespace fs = std::filesystem;

// `t` with a first column naming the variant each row belongs to.
h5::Table with_variant_column(const h5::Table& t, const std::string& column, const std::string& variant) {
  h5::Table out;
  out.add(column, std::vector<std::string>(t.rows(), variant));
  for (std::size_t i = 0; i < t.names().size(); ++i)
    std::visit([&](const auto& c) {
      using V = std::decay_t<decltype(c)>;
      if constexpr (std::is_same_v<V, std::vector<std::string>>)
        out.add(t.names()[i], c);
      else
        out.add(t.names()[i], c, t.units()[i]);
    }, t.column(t.names()[i]));
  return out;
}

// Appends CSV blocks to `<path>.tmp-<pid>` and renames it to `path` at commit(): a reader never
// sees half a table; an export that fails leaves no file (the temporary is removed).
class CsvOut {
 public:
  explicit CsvOut(std::string path) : path_(std::move(path)), temp_(temp_path_for(path_)), out_(temp_) {
    if (!out_) throw Error(fmt::format("{}: cannot write", temp_));
  }
  ~CsvOut() {
    if (!committed_) std::remove(temp_.c_str());
  }
  // The table's CSV; its header only when it is the first block.
  void append(const h5::Table& t) {
    std::string csv = t.to_csv();
    if (blocks_++ > 0) csv.erase(0, csv.find('\n') + 1);
    out_ << csv;
  }
  void commit() {
    out_.close();
    if (!out_) throw Error(fmt::format("{}: write failed", temp_));
    std::error_code ec;
    fs::rename(temp_, path_, ec);
    if (ec) throw Error(fmt::format("{}: cannot rename to {}: {}", temp_, path_, ec.message()));
    committed_ = true;
  }

 private:
  std::string path_, temp_;
  std::ofstream out_;
  std::size_t blocks_ = 0;
  bool committed_ = false;
};

std::vector<std::string> variant_order(const h5::Reader& r) {
  if (r.has_attr("/runs", "order")) return r.attr_strings("/runs", "order");
  return r.children("/runs");
}

int export_main(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim export RESULT.h5 --csv DIR",
                   "Writes a result file as tidy CSV tables for pandas (pd.read_csv), strings as text:\n"
                   "  DIR/<name>_records.csv   one row per record (a query, request or step) of every variant, its\n"
                   "                           first column the variant (policy, app, ...), then every recorded column\n"
                   "  DIR/<name>_summary.csv   one row per variant: the summary table\n"
                   "  DIR/<name>_<table>.csv   each of the experiment's extra tables (/tables)\n"
                   "Column units are in the HDF5 file (attribute 'unit'); names carry them too (_s, _bytes, _j).");
  a.positional("RESULT", "a result file written by mobisim run / reproduce / sweep")
      .option("csv", "DIR", "directory to write the CSV files into (created if missing)");
  if (!a.parse(args)) return kExitOk;
  const std::string result = a.get("RESULT");
  const std::string dir = a.get("csv");
  const h5::Reader r(result);
  if (!r.exists("/summary") || !r.exists("/runs"))
    throw InputError(fmt::format("{}: not a mobisim result file (no /summary and /runs groups)", result));
  create_dirs(dir);
  const std::string stem = fs::path(result).stem().string();
  std::vector<std::string> written;

  const h5::Table summary = r.table("/summary");
  const std::string variant_column = summary.names().empty() ? "variant" : summary.names().front();
  {
    const std::string path = (fs::path(dir) / (stem + "_summary.csv")).string();
    write_file_atomic(path, summary.to_csv());
    written.push_back(path);
  }
  {
    const std::string path = (fs::path(dir) / (stem + "_records.csv")).string();
    CsvOut out(path);
    std::vector<std::string> columns;
    for (const auto& v : variant_order(r)) {
      const std::string group = "/runs/" + v + "/records";
      if (!r.exists(group)) continue;
      const h5::Table records = r.table(group);
      if (columns.empty()) columns = records.names();
      if (records.names() != columns)
        throw InputError(fmt::format("{}: variant '{}' records other columns than the first variant's; "
                                     "no single tidy table (read /runs/<variant>/records one by one)",
                                     result, v));
      // The variant column takes the summary's key name (policy, app, ...) unless records have it.
      const bool named = std::find(columns.begin(), columns.end(), variant_column) != columns.end();
      out.append(with_variant_column(records, named ? "variant" : variant_column, v));
    }
    out.commit();
    written.push_back(path);
  }
  if (r.exists("/tables"))
    for (const auto& name : r.children("/tables")) {
      const std::string path = (fs::path(dir) / (stem + "_" + name + ".csv")).string();
      write_file_atomic(path, r.table("/tables/" + name).to_csv());
      written.push_back(path);
    }
  for (const auto& w : written) std::cout << w << "\n";
  return kExitOk;
}

}  // namespace
}  // namespace mobisim::experiments

MOBISIM_REGISTER_COMMAND("export", "write a result file as tidy CSV tables (per record, per variant) for pandas",
                         "mobisim export RESULT.h5 --csv DIR", mobisim::experiments::export_main)
