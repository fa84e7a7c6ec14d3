#pragma once
// Thin HDF5 helpers (C++ API) used by every layer that writes or reads files.
//
// Writing is atomic: `h5::Writer` creates `<path>.tmp-<pid>`, and only
// `commit()` renames it over `<path>`; a crash or exception leaves no
// half-written result. Object modification times are not recorded, so the same
// content gives byte-identical files.
//
// Tables are stored column-wise: a group holding one 1-D dataset per column
// (with a `unit` attribute) and a `columns` attribute giving the order, so that
//     pandas.DataFrame({c: g[c][()] for c in g.attrs['columns']})
// rebuilds them with h5py alone. String datasets are fixed-length UTF-8 (NUL-padded; h5py gives
// bytes, `.decode()` them), string attributes variable-length UTF-8.
//
// Reading converts every HDF5 failure (missing file, not HDF5, truncated,
// missing dataset, wrong shape) into an InputError naming the file and object.
//
// Integrity: Writer reserves a 512-byte HDF5 user block and, at commit, writes there a digest of
// every byte after it (sim/digest.h); files use the latest HDF5 format (checksummed metadata) and
// Fletcher-32 on every non-empty numeric dataset. Reader verifies the digest before the HDF5
// library parses anything: a mismatch is "FILE: checksum mismatch (damaged or modified since
// written)". A file without a user block (written by h5py, say) is still read, after a child
// process has read all of it once (a damaged file can crash libhdf5 itself), and every object's
// rank, type class, length and size is checked before use.
#include <H5Cpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace mobisim::h5 {

class Writer {
 public:
  explicit Writer(std::string path);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  H5::Group root();
  // Opens or creates the group at a slash-separated path ("runs/naive/records").
  H5::Group group(const std::string& path);
  void commit();  // flush, close and rename to the final path
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_path_;
  std::optional<H5::H5File> file_;
  bool committed_ = false;
};

// Creates (or opens) a child group with object time tracking disabled.
H5::Group make_group(const H5::Group& parent, const std::string& name);

void write_attr(const H5::H5Object& obj, const std::string& name, const std::string& value);
void write_attr(const H5::H5Object& obj, const std::string& name, const char* value);
void write_attr(const H5::H5Object& obj, const std::string& name, double value);
void write_attr(const H5::H5Object& obj, const std::string& name, std::int64_t value);
void write_attr(const H5::H5Object& obj, const std::string& name, const std::vector<std::string>& values);
void write_attr(const H5::H5Object& obj, const std::string& name, const std::vector<double>& values);

H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<double>& v,
                          const std::string& unit = "");
H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<float>& v,
                          const std::string& unit = "");
H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<std::int64_t>& v,
                          const std::string& unit = "");
H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<std::int32_t>& v,
                          const std::string& unit = "");
H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<std::uint8_t>& v,
                          const std::string& unit = "");
H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<std::string>& v);
// A row-major 2-D float32 matrix [rows, cols] (e.g. embeddings).
H5::DataSet write_matrix(const H5::Group& g, const std::string& name, const std::vector<float>& data,
                         std::size_t rows, std::size_t cols, const std::string& unit = "");

// Recomputes the digest of a file written by Writer and since modified on purpose (tests that
// plant bad values through the HDF5 API use it to reach the checks behind the digest). Files
// without a mobisim user block are left alone.
void reseal(const std::string& path);

// A column-oriented table; columns keep insertion order.
class Table {
 public:
  using Column = std::variant<std::vector<double>, std::vector<std::int64_t>, std::vector<std::string>>;
  void add(const std::string& name, std::vector<double> values, const std::string& unit = "");
  void add(const std::string& name, std::vector<std::int64_t> values, const std::string& unit = "");
  void add(const std::string& name, std::vector<std::string> values);
  std::size_t rows() const;
  std::size_t columns() const { return names_.size(); }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<std::string>& units() const { return units_; }
  const Column& column(const std::string& name) const;
  // Writes the table as group `name` under `parent`.
  void write(const H5::Group& parent, const std::string& name) const;
  // CSV with a header row (units in brackets); numbers printed round-trip exact.
  std::string to_csv() const;

 private:
  void check_rows(const std::string& name, std::size_t n) const;
  std::vector<std::string> names_, units_;
  std::vector<Column> columns_;
};

// ---------------------------------------------------------------------------
// Streaming: rows written as they are produced, with bounded memory
// ---------------------------------------------------------------------------
// A 1-D dataset of unlimited length that grows with each append(): chunked (`chunk_rows` rows a
// chunk), Fletcher-32, and without a chunk cache, so appended rows go to the file and memory does
// not grow with the dataset. T is double, std::int64_t or std::int32_t.
template <class T>
class AppendableDataset {
 public:
  AppendableDataset(const H5::Group& g, const std::string& name, std::size_t chunk_rows);
  void append(const T* values, std::size_t n);
  std::size_t size() const { return size_; }
  // Rows [offset, offset + n) into `out`.
  void read(std::size_t offset, std::size_t n, T* out) const;

 private:
  H5::DataSet ds_;
  std::size_t size_ = 0;
};

// A 1-D numeric dataset of a file being read, kept open for reads of row ranges: a long column
// read a block at a time. T is double (the file's class must be floating point), std::int64_t or
// std::uint8_t (integer; HDF5 converts the stored width). Opening checks the rank and the class.
template <class T>
class ColumnReader {
 public:
  ColumnReader(const class Reader& file, const std::string& path);
  std::size_t size() const { return size_; }
  // Rows [offset, offset + n) into `out` (resized to n); InputError naming the file and column
  // when the range is outside the column or the rows cannot be read.
  void read(std::size_t offset, std::size_t n, std::vector<T>& out) const;

 private:
  std::string file_path_, path_;
  H5::DataSet ds_;
  std::size_t size_ = 0;
};

// Writes a 1-D dataset of `rows` values with exactly the layout, chunks, filters and bytes of
// write_dataset(g, name, std::vector<T>, unit), taking the values one chunk at a time from
// `fill(offset, n, out)` (rows [offset, offset + n)), so the column is never whole in memory.
// T is double or std::int64_t.
template <class T>
using PieceFill = std::function<void(std::size_t offset, std::size_t n, T* out)>;
template <class T>
H5::DataSet write_dataset_in_pieces(const H5::Group& g, const std::string& name, std::size_t rows,
                                    const PieceFill<T>& fill, const std::string& unit = "");
// The same for a string column as write_dataset(g, name, std::vector<std::string>): `width` is the
// longest string's size (at least 1); fill sets out[i] to row offset + i.
H5::DataSet write_strings_in_pieces(const H5::Group& g, const std::string& name, std::size_t rows, std::size_t width,
                                    const PieceFill<const std::string*>& fill);

// A table whose rows arrive in batches during a run (one block of users' records, say) and are
// written to a result file at its end, holding at most `buffer_rows` rows in memory however many
// it receives. Full buffers go to extendible datasets in a scratch HDF5 file (a Writer that is
// never committed, so the scratch file goes away with its last table, also after an exception).
// write() gives the group Table::write would give for all rows appended in order, byte for byte.
// String columns are stored as indexes into the distinct values seen.
class SpooledTable {
 public:
  static constexpr std::size_t kDefaultBufferRows = 2048;
  // A scratch file of its own (`scratch_path` names it as a Writer's path)...
  explicit SpooledTable(const std::string& scratch_path, std::size_t buffer_rows = kDefaultBufferRows);
  // ...or group `group` of a scratch file shared with other tables (one file, one metadata cache).
  SpooledTable(std::shared_ptr<Writer> scratch, std::string group, std::size_t buffer_rows = kDefaultBufferRows);
  ~SpooledTable();
  SpooledTable(const SpooledTable&) = delete;
  SpooledTable& operator=(const SpooledTable&) = delete;

  // Appends the rows of `batch`; the first batch fixes the columns (names, kinds, units), every
  // later one must have the same.
  void append(const Table& batch);
  // Flushes the buffer; required before reading or writing, and no append may follow.
  void finish();
  std::size_t rows() const { return rows_; }
  std::size_t buffered_rows() const { return buffered_; }
  std::size_t buffer_rows() const { return buffer_rows_; }
  const std::vector<std::string>& names() const { return names_; }
  // A whole numeric column, in row order.
  std::vector<double> doubles(const std::string& column) const;
  std::vector<std::int64_t> ints(const std::string& column) const;
  void write(const H5::Group& parent, const std::string& name) const;

 private:
  struct Column;
  void define_columns(const Table& batch);
  void flush();
  const Column& column(const std::string& name) const;
  void require_finished(const char* what) const;
  std::shared_ptr<Writer> scratch_;
  std::string group_;  // of the scratch file; empty: its root
  std::size_t buffer_rows_, buffered_ = 0, rows_ = 0;
  bool finished_ = false;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Column>> columns_;
};

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------
class Reader {
 public:
  // InputError when missing, not HDF5, unreadable, or when its digest does not match.
  explicit Reader(std::string path);
  const std::string& path() const { return path_; }
  // True when the file carried a mobisim digest and it matched (the bytes are what mobisim wrote).
  bool verified() const { return verified_; }
  // Refuses a dataset whose element count would need more memory than the file can encode.
  void check_extent(const std::string& path, std::uint64_t elements, std::size_t element_bytes) const;
  bool exists(const std::string& object_path) const;
  H5::Group group(const std::string& path) const;  // InputError when missing
  // 1-D datasets; `expected_len` checks the length when given.
  std::vector<double> doubles(const std::string& path, std::optional<std::size_t> expected_len = {}) const;
  std::vector<float> floats(const std::string& path, std::optional<std::size_t> expected_len = {}) const;
  std::vector<std::int64_t> ints(const std::string& path, std::optional<std::size_t> expected_len = {}) const;
  std::vector<std::string> strings(const std::string& path, std::optional<std::size_t> expected_len = {}) const;
  // 2-D float matrix; returns data row-major and sets rows/cols.
  std::vector<float> matrix(const std::string& path, std::size_t& rows, std::size_t& cols) const;
  std::vector<std::size_t> shape(const std::string& path) const;
  // Attributes on a group or dataset at `object_path` ("/" for the root).
  std::string attr_string(const std::string& object_path, const std::string& name) const;
  std::int64_t attr_int(const std::string& object_path, const std::string& name) const;
  double attr_double(const std::string& object_path, const std::string& name) const;
  bool has_attr(const std::string& object_path, const std::string& name) const;
  // A string-list attribute (such as a table's "columns").
  std::vector<std::string> attr_strings(const std::string& object_path, const std::string& name) const;
  std::vector<std::string> children(const std::string& group_path) const;  // sorted names
  // A group written by Table::write, columns in their written order (the group's "columns"
  // attribute; sorted names without it), each column as its stored kind (text, integer, real).
  Table table(const std::string& group_path) const;

 private:
  [[noreturn]] void fail(const std::string& object, const std::string& what) const;
  H5::DataSet dataset(const std::string& path, std::size_t rank, std::optional<std::size_t> expected_len) const;
  template <class T>
  friend class ColumnReader;
  std::string path_;
  std::uint64_t file_bytes_ = 0;
  bool verified_ = false;
  H5::H5File file_;
};

}  // namespace mobisim::h5
