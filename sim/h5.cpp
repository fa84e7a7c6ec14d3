#include "sim/h5.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "sim/error.h"

namespace mobisim::h5 {

namespace {

// HDF5 prints its own error stack unless told not to; we report errors ourselves.
void silence_hdf5() {
  static bool done = [] {
    H5::Exception::dontPrint();
    return true;
  }();
  (void)done;
}

H5::DSetCreatPropList untimed_dcpl() {
  H5::DSetCreatPropList dcpl;
  H5Pset_obj_track_times(dcpl.getId(), 0);
  return dcpl;
}

H5::StrType utf8_string_type() {
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  t.setCset(H5T_CSET_UTF8);
  return t;
}

template <class T>
H5::DataSet write_1d(const H5::Group& g, const std::string& name, const std::vector<T>& v,
                     const H5::PredType& file_type, const H5::PredType& mem_type, const std::string& unit) {
  hsize_t dims[1] = {v.size()};
  H5::DataSpace space(1, dims);
  H5::DataSet ds = g.createDataSet(name, file_type, space, untimed_dcpl());
  if (!v.empty()) ds.write(v.data(), mem_type);
  if (!unit.empty()) write_attr(ds, "unit", unit);
  return ds;
}

}  // namespace

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------
Writer::Writer(std::string path) : path_(std::move(path)) {
  silence_hdf5();
  tmp_path_ = fmt::format("{}.tmp-{}", path_, static_cast<long>(::getpid()));
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  try {
    file_.emplace(tmp_path_, H5F_ACC_TRUNC);
  } catch (const H5::Exception& e) {
    throw Error(fmt::format("{}: cannot create result file ({})", path_, e.getDetailMsg()));
  }
}

Writer::~Writer() {
  if (!committed_) {
    try {
      if (file_) file_->close();
    } catch (...) {
    }
    std::remove(tmp_path_.c_str());
  }
}

H5::Group Writer::root() { return file_->openGroup("/"); }

H5::Group make_group(const H5::Group& parent, const std::string& name) {
  if (H5Lexists(parent.getId(), name.c_str(), H5P_DEFAULT) > 0) return parent.openGroup(name);
  hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
  H5Pset_obj_track_times(gcpl, 0);
  hid_t id = H5Gcreate2(parent.getId(), name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT);
  H5Pclose(gcpl);
  if (id < 0) throw Error(fmt::format("cannot create HDF5 group '{}'", name));
  H5::Group g(id);  // the C++ wrapper takes its own reference to the id...
  H5Gclose(id);     // ...so drop ours, or the file would stay open after close()
  return g;
}

H5::Group Writer::group(const std::string& path) {
  H5::Group g = root();
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/'))
    if (!part.empty()) g = make_group(g, part);
  return g;
}

void Writer::commit() {
  try {
    file_->flush(H5F_SCOPE_GLOBAL);
    file_->close();
  } catch (const H5::Exception& e) {
    throw Error(fmt::format("{}: cannot finish result file ({})", path_, e.getDetailMsg()));
  }
  std::error_code ec;
  std::filesystem::rename(tmp_path_, path_, ec);
  if (ec) throw Error(fmt::format("{}: cannot rename temporary result file: {}", path_, ec.message()));
  committed_ = true;
}

// ---------------------------------------------------------------------------
// Attributes and datasets
// ---------------------------------------------------------------------------
static void replace_attr(const H5::H5Object& obj, const std::string& name) {
  if (obj.attrExists(name)) obj.removeAttr(name);
}

void write_attr(const H5::H5Object& obj, const std::string& name, const std::string& value) {
  replace_attr(obj, name);
  H5::StrType t = utf8_string_type();
  H5::Attribute a = obj.createAttribute(name, t, H5::DataSpace(H5S_SCALAR));
  const char* p = value.c_str();
  a.write(t, &p);
}

void write_attr(const H5::H5Object& obj, const std::string& name, const char* value) {
  write_attr(obj, name, std::string(value));
}

void write_attr(const H5::H5Object& obj, const std::string& name, double value) {
  replace_attr(obj, name);
  H5::Attribute a = obj.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR));
  a.write(H5::PredType::NATIVE_DOUBLE, &value);
}

void write_attr(const H5::H5Object& obj, const std::string& name, std::int64_t value) {
  replace_attr(obj, name);
  H5::Attribute a = obj.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
  a.write(H5::PredType::NATIVE_INT64, &value);
}

void write_attr(const H5::H5Object& obj, const std::string& name, const std::vector<std::string>& values) {
  replace_attr(obj, name);
  H5::StrType t = utf8_string_type();
  hsize_t dims[1] = {values.size()};
  H5::Attribute a = obj.createAttribute(name, t, H5::DataSpace(1, dims));
  std::vector<const char*> ptrs;
  for (const auto& s : values) ptrs.push_back(s.c_str());
  if (!ptrs.empty()) a.write(t, ptrs.data());
}

void write_attr(const H5::H5Object& obj, const std::string& name, const std::vector<double>& values) {
  replace_attr(obj, name);
  hsize_t dims[1] = {values.size()};
  H5::Attribute a = obj.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(1, dims));
  if (!values.empty()) a.write(H5::PredType::NATIVE_DOUBLE, values.data());
}

H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<double>& v,
                          const std::string& unit) {
  return write_1d(g, name, v, H5::PredType::IEEE_F64LE, H5::PredType::NATIVE_DOUBLE, unit);
}
H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<float>& v,
                          const std::string& unit) {
  return write_1d(g, name, v, H5::PredType::IEEE_F32LE, H5::PredType::NATIVE_FLOAT, unit);
}
H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<std::int64_t>& v,
                          const std::string& unit) {
  return write_1d(g, name, v, H5::PredType::STD_I64LE, H5::PredType::NATIVE_INT64, unit);
}
H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<std::int32_t>& v,
                          const std::string& unit) {
  return write_1d(g, name, v, H5::PredType::STD_I32LE, H5::PredType::NATIVE_INT32, unit);
}
H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<std::uint8_t>& v,
                          const std::string& unit) {
  return write_1d(g, name, v, H5::PredType::STD_U8LE, H5::PredType::NATIVE_UINT8, unit);
}

H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<std::string>& v) {
  H5::StrType t = utf8_string_type();
  hsize_t dims[1] = {v.size()};
  H5::DataSet ds = g.createDataSet(name, t, H5::DataSpace(1, dims), untimed_dcpl());
  std::vector<const char*> ptrs;
  for (const auto& s : v) ptrs.push_back(s.c_str());
  if (!ptrs.empty()) ds.write(ptrs.data(), t);
  return ds;
}

H5::DataSet write_matrix(const H5::Group& g, const std::string& name, const std::vector<float>& data,
                         std::size_t rows, std::size_t cols, const std::string& unit) {
  if (data.size() != rows * cols)
    throw Error(fmt::format("internal: matrix '{}' has {} values, expected {}x{}", name, data.size(), rows, cols));
  hsize_t dims[2] = {rows, cols};
  H5::DataSet ds = g.createDataSet(name, H5::PredType::IEEE_F32LE, H5::DataSpace(2, dims), untimed_dcpl());
  if (!data.empty()) ds.write(data.data(), H5::PredType::NATIVE_FLOAT);
  if (!unit.empty()) write_attr(ds, "unit", unit);
  return ds;
}

// ---------------------------------------------------------------------------
// Table
// ---------------------------------------------------------------------------
void Table::check_rows(const std::string& name, std::size_t n) const {
  if (!columns_.empty() && n != rows())
    throw Error(fmt::format("internal: table column '{}' has {} rows, others have {}", name, n, rows()));
}

void Table::add(const std::string& name, std::vector<double> values, const std::string& unit) {
  check_rows(name, values.size());
  names_.push_back(name);
  units_.push_back(unit);
  columns_.emplace_back(std::move(values));
}
void Table::add(const std::string& name, std::vector<std::int64_t> values, const std::string& unit) {
  check_rows(name, values.size());
  names_.push_back(name);
  units_.push_back(unit);
  columns_.emplace_back(std::move(values));
}
void Table::add(const std::string& name, std::vector<std::string> values) {
  check_rows(name, values.size());
  names_.push_back(name);
  units_.push_back("");
  columns_.emplace_back(std::move(values));
}

std::size_t Table::rows() const {
  if (columns_.empty()) return 0;
  return std::visit([](const auto& c) { return c.size(); }, columns_.front());
}

const Table::Column& Table::column(const std::string& name) const {
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return columns_[i];
  throw Error(fmt::format("internal: table has no column '{}'", name));
}

void Table::write(const H5::Group& parent, const std::string& name) const {
  H5::Group g = make_group(parent, name);
  for (std::size_t i = 0; i < names_.size(); ++i)
    std::visit(
        [&](const auto& c) {
          using V = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<V, std::vector<std::string>>)
            write_dataset(g, names_[i], c);
          else
            write_dataset(g, names_[i], c, units_[i]);
        },
        columns_[i]);
  write_attr(g, "columns", names_);
  write_attr(g, "n_rows", static_cast<std::int64_t>(rows()));
}

static std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string Table::to_csv() const {
  std::string out;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (i) out += ',';
    out += csv_escape(names_[i]);
  }
  out += '\n';
  for (std::size_t r = 0; r < rows(); ++r) {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (i) out += ',';
      std::visit(
          [&](const auto& c) {
            using V = std::decay_t<decltype(c[0])>;
            if constexpr (std::is_same_v<V, std::string>)
              out += csv_escape(c[r]);
            else
              out += fmt::format("{}", c[r]);
          },
          columns_[i]);
    }
    out += '\n';
  }
  return out;
}

// ---------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------
Reader::Reader(std::string path) : path_(std::move(path)) {
  silence_hdf5();
  if (!std::filesystem::exists(path_)) throw InputError(fmt::format("{}: no such file", path_));
  htri_t is_hdf5 = H5Fis_hdf5(path_.c_str());
  if (is_hdf5 <= 0) throw InputError(fmt::format("{}: not an HDF5 file (or truncated/corrupt header)", path_));
  try {
    file_ = H5::H5File(path_, H5F_ACC_RDONLY);
  } catch (const H5::Exception& e) {
    throw InputError(fmt::format("{}: cannot open HDF5 file (truncated or corrupt?): {}", path_, e.getDetailMsg()));
  }
}

void Reader::fail(const std::string& object, const std::string& what) const {
  throw InputError(fmt::format("{}: {}: {}", path_, object, what));
}

bool Reader::exists(const std::string& object_path) const {
  if (object_path == "/" || object_path.empty()) return true;
  // Check each prefix: H5Lexists fails on a missing intermediate group.
  std::string prefix;
  std::stringstream ss(object_path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    prefix += "/" + part;
    htri_t e = H5Lexists(file_.getId(), prefix.c_str(), H5P_DEFAULT);
    if (e <= 0) return false;
  }
  return true;
}

H5::Group Reader::group(const std::string& path) const {
  if (!exists(path)) fail(path, "missing group");
  try {
    return file_.openGroup(path.empty() ? "/" : path);
  } catch (const H5::Exception& e) {
    fail(path, "not a readable group: " + e.getDetailMsg());
  }
}

H5::DataSet Reader::dataset(const std::string& path, std::size_t rank,
                            std::optional<std::size_t> expected_len) const {
  if (!exists(path)) fail(path, "missing dataset");
  try {
    H5::DataSet ds = file_.openDataSet(path);
    H5::DataSpace sp = ds.getSpace();
    if (static_cast<std::size_t>(sp.getSimpleExtentNdims()) != rank)
      fail(path, fmt::format("expected a {}-D dataset, got {}-D", rank, sp.getSimpleExtentNdims()));
    if (rank == 1 && expected_len) {
      hsize_t n = 0;
      sp.getSimpleExtentDims(&n);
      if (n != *expected_len) fail(path, fmt::format("expected {} elements, got {}", *expected_len, n));
    }
    return ds;
  } catch (const H5::Exception& e) {
    fail(path, "unreadable dataset (truncated or corrupt?): " + e.getDetailMsg());
  }
}

template <class T>
static std::vector<T> read_numeric(const H5::DataSet& ds, const H5::PredType& mem, H5T_class_t want_class,
                                   const Reader& r, const std::string& path) {
  if (ds.getTypeClass() != want_class)
    throw InputError(fmt::format("{}: {}: unexpected element type", r.path(), path));
  hsize_t n = 0;
  ds.getSpace().getSimpleExtentDims(&n);
  std::vector<T> out(n);
  if (n) ds.read(out.data(), mem);
  return out;
}

std::vector<double> Reader::doubles(const std::string& path, std::optional<std::size_t> expected_len) const {
  try {
    auto ds = dataset(path, 1, expected_len);
    if (ds.getTypeClass() == H5T_INTEGER) {
      auto v = read_numeric<std::int64_t>(ds, H5::PredType::NATIVE_INT64, H5T_INTEGER, *this, path);
      return std::vector<double>(v.begin(), v.end());
    }
    return read_numeric<double>(ds, H5::PredType::NATIVE_DOUBLE, H5T_FLOAT, *this, path);
  } catch (const H5::Exception& e) {
    fail(path, "read failed (truncated or corrupt?): " + e.getDetailMsg());
  }
}

std::vector<float> Reader::floats(const std::string& path, std::optional<std::size_t> expected_len) const {
  try {
    return read_numeric<float>(dataset(path, 1, expected_len), H5::PredType::NATIVE_FLOAT, H5T_FLOAT, *this, path);
  } catch (const H5::Exception& e) {
    fail(path, "read failed (truncated or corrupt?): " + e.getDetailMsg());
  }
}

std::vector<std::int64_t> Reader::ints(const std::string& path, std::optional<std::size_t> expected_len) const {
  try {
    return read_numeric<std::int64_t>(dataset(path, 1, expected_len), H5::PredType::NATIVE_INT64, H5T_INTEGER,
                                      *this, path);
  } catch (const H5::Exception& e) {
    fail(path, "read failed (truncated or corrupt?): " + e.getDetailMsg());
  }
}

std::vector<std::string> Reader::strings(const std::string& path, std::optional<std::size_t> expected_len) const {
  try {
    H5::DataSet ds = dataset(path, 1, expected_len);
    if (ds.getTypeClass() != H5T_STRING) fail(path, "expected strings");
    hsize_t n = 0;
    ds.getSpace().getSimpleExtentDims(&n);
    std::vector<std::string> out;
    out.reserve(n);
    H5::StrType t = utf8_string_type();
    if (ds.getStrType().isVariableStr()) {
      std::vector<char*> ptrs(n, nullptr);
      if (n) ds.read(ptrs.data(), t);
      for (char* p : ptrs) out.emplace_back(p ? p : "");
      if (n) {
        H5::DataSpace sp = ds.getSpace();
        H5Dvlen_reclaim(t.getId(), sp.getId(), H5P_DEFAULT, ptrs.data());
      }
    } else {
      std::size_t width = ds.getStrType().getSize();
      std::vector<char> buf(n * width);
      if (n) ds.read(buf.data(), ds.getStrType());
      for (hsize_t i = 0; i < n; ++i) {
        std::string s(buf.data() + i * width, width);
        s.erase(s.find_last_not_of('\0') + 1);
        out.push_back(s);
      }
    }
    return out;
  } catch (const H5::Exception& e) {
    fail(path, "read failed (truncated or corrupt?): " + e.getDetailMsg());
  }
}

std::vector<float> Reader::matrix(const std::string& path, std::size_t& rows, std::size_t& cols) const {
  try {
    H5::DataSet ds = dataset(path, 2, std::nullopt);
    if (ds.getTypeClass() != H5T_FLOAT) fail(path, "expected a float matrix");
    hsize_t dims[2] = {0, 0};
    ds.getSpace().getSimpleExtentDims(dims);
    rows = dims[0];
    cols = dims[1];
    std::vector<float> out(rows * cols);
    if (!out.empty()) ds.read(out.data(), H5::PredType::NATIVE_FLOAT);
    return out;
  } catch (const H5::Exception& e) {
    fail(path, "read failed (truncated or corrupt?): " + e.getDetailMsg());
  }
}

std::vector<std::size_t> Reader::shape(const std::string& path) const {
  if (!exists(path)) fail(path, "missing dataset");
  try {
    H5::DataSet ds = file_.openDataSet(path);
    H5::DataSpace sp = ds.getSpace();
    int rank = sp.getSimpleExtentNdims();
    std::vector<hsize_t> dims(rank);
    sp.getSimpleExtentDims(dims.data());
    return std::vector<std::size_t>(dims.begin(), dims.end());
  } catch (const H5::Exception& e) {
    fail(path, "unreadable dataset: " + e.getDetailMsg());
  }
}

static H5::Attribute open_attr(const H5::H5File& file, const std::string& object_path, const std::string& name) {
  H5O_info_t info;
  H5Oget_info_by_name(file.getId(), object_path.c_str(), &info, H5P_DEFAULT);
  if (info.type == H5O_TYPE_DATASET) return file.openDataSet(object_path).openAttribute(name);
  return file.openGroup(object_path).openAttribute(name);
}

bool Reader::has_attr(const std::string& object_path, const std::string& name) const {
  if (!exists(object_path)) return false;
  return H5Aexists_by_name(file_.getId(), object_path.c_str(), name.c_str(), H5P_DEFAULT) > 0;
}

std::string Reader::attr_string(const std::string& object_path, const std::string& name) const {
  if (!has_attr(object_path, name)) fail(object_path, fmt::format("missing attribute '{}'", name));
  try {
    H5::Attribute a = open_attr(file_, object_path, name);
    if (a.getTypeClass() != H5T_STRING) fail(object_path, fmt::format("attribute '{}' is not a string", name));
    std::string out;
    a.read(a.getStrType(), out);
    return out;
  } catch (const H5::Exception& e) {
    fail(object_path, fmt::format("attribute '{}' unreadable: {}", name, e.getDetailMsg()));
  }
}

std::int64_t Reader::attr_int(const std::string& object_path, const std::string& name) const {
  if (!has_attr(object_path, name)) fail(object_path, fmt::format("missing attribute '{}'", name));
  try {
    H5::Attribute a = open_attr(file_, object_path, name);
    if (a.getTypeClass() != H5T_INTEGER) fail(object_path, fmt::format("attribute '{}' is not an integer", name));
    std::int64_t v = 0;
    a.read(H5::PredType::NATIVE_INT64, &v);
    return v;
  } catch (const H5::Exception& e) {
    fail(object_path, fmt::format("attribute '{}' unreadable: {}", name, e.getDetailMsg()));
  }
}

double Reader::attr_double(const std::string& object_path, const std::string& name) const {
  if (!has_attr(object_path, name)) fail(object_path, fmt::format("missing attribute '{}'", name));
  try {
    H5::Attribute a = open_attr(file_, object_path, name);
    double v = 0;
    if (a.getTypeClass() == H5T_INTEGER) {
      std::int64_t i = 0;
      a.read(H5::PredType::NATIVE_INT64, &i);
      return static_cast<double>(i);
    }
    a.read(H5::PredType::NATIVE_DOUBLE, &v);
    return v;
  } catch (const H5::Exception& e) {
    fail(object_path, fmt::format("attribute '{}' unreadable: {}", name, e.getDetailMsg()));
  }
}

std::vector<std::string> Reader::children(const std::string& group_path) const {
  H5::Group g = group(group_path);
  std::vector<std::string> out;
  try {
    for (hsize_t i = 0; i < g.getNumObjs(); ++i) out.push_back(g.getObjnameByIdx(i));
  } catch (const H5::Exception& e) {
    fail(group_path, "cannot list group: " + e.getDetailMsg());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace mobisim::h5
