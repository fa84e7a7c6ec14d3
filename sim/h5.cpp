#include "sim/h5.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "sim/atomic_file.h"
#include "sim/digest.h"
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

constexpr hsize_t kChunkElements = 1 << 16;  // elements per chunk of a numeric dataset

// Chunked storage with a Fletcher-32 checksum per chunk, so the library itself refuses damaged
// data even in a file without our digest (e.g. one re-packed by h5repack). Empty datasets cannot
// be chunked and carry no data to protect.
H5::DSetCreatPropList checked_dcpl(const std::vector<hsize_t>& dims) {
  H5::DSetCreatPropList dcpl = untimed_dcpl();
  hsize_t elements = 1;
  for (hsize_t d : dims) elements *= d;
  if (elements == 0) return dcpl;
  std::vector<hsize_t> chunk(dims);
  for (std::size_t i = 0; i + 1 < chunk.size(); ++i) {  // keep whole rows; bound the leading dimension
    hsize_t row = 1;
    for (std::size_t j = i + 1; j < chunk.size(); ++j) row *= chunk[j];
    chunk[i] = std::max<hsize_t>(1, std::min<hsize_t>(chunk[i], kChunkElements / std::max<hsize_t>(row, 1)));
  }
  if (chunk.size() == 1) chunk[0] = std::min(chunk[0], kChunkElements);
  dcpl.setChunk(static_cast<int>(chunk.size()), chunk.data());
  dcpl.setFletcher32();
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
  H5::DataSet ds = g.createDataSet(name, file_type, space, checked_dcpl({v.size()}));
  if (!v.empty()) ds.write(v.data(), mem_type);
  if (!unit.empty()) write_attr(ds, "unit", unit);
  return ds;
}

// ---------------------------------------------------------------------------
// Integrity: every file a Writer commits starts with a 512-byte HDF5 user block (which the library
// skips) holding a digest of everything after it. Readers verify it before HDF5 parses anything.
// ---------------------------------------------------------------------------
constexpr hsize_t kUserBlockBytes = 512;
constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
constexpr char kDigestPrefix[] = "MOBISIM-";

std::string digest_header(std::uint64_t bytes, std::uint64_t digest) {
  return fmt::format("MOBISIM-DIGEST\nformat 1\nalgorithm fnv1a64x4\nbytes {}\ndigest {:016x}\n", bytes, digest);
}

// Parses a user block written by seal(); false when it is not exactly such a block.
bool parse_digest_header(const std::string& block, std::uint64_t& bytes, std::uint64_t& digest) {
  if (block.size() != kUserBlockBytes) return false;
  const std::string text(block.c_str());  // up to the first NUL
  if (std::sscanf(text.c_str(), "MOBISIM-DIGEST\nformat 1\nalgorithm fnv1a64x4\nbytes %" SCNu64 "\ndigest %16" SCNx64,
                  &bytes, &digest) != 2)
    return false;
  std::string expected = digest_header(bytes, digest);
  expected.resize(kUserBlockBytes, '\0');
  return expected == block;
}

[[noreturn]] void checksum_mismatch(const std::string& path) {
  throw InputError(fmt::format("{}: checksum mismatch (damaged or modified since written)", path));
}

// Writes the digest of bytes [512, end) into the user block, then fsyncs.
void seal(const std::string& tmp_path, const std::string& final_path) {
  const int fd = ::open(tmp_path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot reopen temporary result file: {}", final_path, std::strerror(errno)));
  std::uint64_t digest = 0, bytes = 0;
  bool ok = digest_fd(fd, kUserBlockBytes, digest, bytes);
  std::string header = digest_header(bytes, digest);
  header.resize(kUserBlockBytes, '\0');
  ok = ok && ::pwrite(fd, header.data(), header.size(), 0) == static_cast<ssize_t>(header.size());
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw Error(fmt::format("{}: cannot write the file digest: {}", final_path, std::strerror(errno)));
}

enum class Integrity { kVerified, kNoDigest };

// Checks the digest of a file written by Writer. A file starting with the HDF5 signature has no
// user block, so no digest (written by another tool): kNoDigest. A file starting like our header,
// or with the HDF5 signature right after a 512-byte user block, must carry a valid digest.
Integrity verify_digest(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::string head(kUserBlockBytes + sizeof kHdf5Signature, '\0');
  const ssize_t got = ::pread(fd, head.data(), head.size(), 0);
  const std::size_t n = got > 0 ? static_cast<std::size_t>(got) : 0;
  const bool hdf5_at_0 = n >= 8 && std::memcmp(head.data(), kHdf5Signature, 8) == 0;
  const bool hdf5_after_block = n == head.size() && std::memcmp(head.data() + kUserBlockBytes, kHdf5Signature, 8) == 0;
  const bool our_prefix = n > 0 && std::memcmp(head.data(), kDigestPrefix, std::min<std::size_t>(n, 8)) == 0;
  if (hdf5_at_0 || (!our_prefix && !hdf5_after_block)) {
    ::close(fd);
    return Integrity::kNoDigest;
  }
  std::uint64_t want_bytes = 0, want_digest = 0, digest = 0, bytes = 0;
  const bool header_ok = n >= kUserBlockBytes && parse_digest_header(head.substr(0, kUserBlockBytes), want_bytes, want_digest);
  const bool ok = header_ok && digest_fd(fd, kUserBlockBytes, digest, bytes) && bytes == want_bytes && digest == want_digest;
  ::close(fd);
  if (!ok) checksum_mismatch(path);
  return Integrity::kVerified;
}

// True when the file has our user block (valid digest or not).
bool verify_digest_or_mismatch(const std::string& path) {
  try {
    return verify_digest(path) == Integrity::kVerified;
  } catch (const InputError&) {
    return true;
  }
}

// ---------------------------------------------------------------------------
// Files without a digest are read once in a child process first: a damaged file can crash libhdf5
// itself (bugs in its parsers of heaps and dataspaces), and no check on our side can rule that out.
// The child opens every object and reads every dataset and attribute in full; if it dies, the file
// is refused and this process never runs the code that crashed.
// ---------------------------------------------------------------------------
// Reading a healthy file goes at well over 50 MB/s even through filters; a child that makes no
// progress for longer than this is stuck in a loop on damaged metadata.
// MOBISIM_HDF5_PROBE_SECONDS overrides it (the fuzzer uses 1 s to keep its inputs fast).
unsigned probe_seconds(std::uint64_t file_bytes) {
  if (const char* env = std::getenv("MOBISIM_HDF5_PROBE_SECONDS"); env && std::atoi(env) > 0)
    return static_cast<unsigned>(std::atoi(env));
  return 5 + static_cast<unsigned>(file_bytes / 50'000'000);
}

std::uint64_t max_data_bytes(std::uint64_t file_bytes) {
  // Filters expand data at most ~1032x (deflate); anything larger is a damaged extent.
  return file_bytes * 1100 + (std::uint64_t{1} << 20);
}

struct ProbeState {
  std::uint64_t max_bytes;
};

void probe_read(hid_t obj, hid_t space, hid_t file_type, bool is_attr, const ProbeState& st) {
  if (space < 0 || file_type < 0) return;
  const hssize_t points = H5Sget_simple_extent_npoints(space);
  const hid_t mem_type = H5Tget_native_type(file_type, H5T_DIR_DEFAULT);
  if (mem_type < 0) return;
  const std::size_t elem = H5Tget_size(mem_type);
  if (points > 0 && elem > 0 && static_cast<std::uint64_t>(points) <= st.max_bytes / elem) {
    std::vector<unsigned char> buf(static_cast<std::size_t>(points) * elem);
    const herr_t rc = is_attr ? H5Aread(obj, mem_type, buf.data())
                              : H5Dread(obj, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    if (rc >= 0 && (H5Tdetect_class(mem_type, H5T_VLEN) > 0 || H5Tis_variable_str(mem_type) > 0))
      H5Dvlen_reclaim(mem_type, space, H5P_DEFAULT, buf.data());
  }
  H5Tclose(mem_type);
}

herr_t probe_attribute(hid_t loc, const char* name, const H5A_info_t*, void* data) {
  const hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  if (a < 0) return 0;
  const hid_t space = H5Aget_space(a), type = H5Aget_type(a);
  probe_read(a, space, type, true, *static_cast<ProbeState*>(data));
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  H5Aclose(a);
  return 0;
}

void probe_object(hid_t obj, ProbeState& st) {
  hsize_t idx = 0;
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, probe_attribute, &st);
  if (H5Iget_type(obj) != H5I_DATASET) return;
  const hid_t space = H5Dget_space(obj), type = H5Dget_type(obj);
  probe_read(obj, space, type, false, st);
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
}

herr_t probe_link(hid_t group, const char* name, const H5L_info_t* info, void* data) {
  if (info->type != H5L_TYPE_HARD) return 0;  // soft/external links are never followed by our readers
  const hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) return 0;
  probe_object(obj, *static_cast<ProbeState*>(data));
  H5Oclose(obj);
  return 0;
}

}  // namespace
}  // namespace mobisim::h5

// Sanitizer runtimes (ASan, libFuzzer builds) export this; a plain build does not.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace mobisim::h5 {
namespace {

[[noreturn]] void probe_child_died() { ::_exit(70); }

[[noreturn]] void probe_child(const std::string& path, std::uint64_t file_bytes) {
  // The child reports only through its exit status: its stderr would carry libhdf5's or a
  // sanitizer's noise, and a fuzzer's death handler must not treat the child's fault as its own.
  if (const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC); null_fd >= 0) ::dup2(null_fd, STDERR_FILENO);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(probe_child_died);
  // Default actions, so a fault ends the child by its signal even when a sanitizer or fuzzer
  // runtime installed handlers; a hang inside the library ends it with SIGALRM.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) ::signal(sig, SIG_DFL);
  ::alarm(probe_seconds(file_bytes));
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f >= 0) {
    ProbeState st{max_data_bytes(file_bytes)};
    const hid_t root = H5Oopen(f, "/", H5P_DEFAULT);
    if (root >= 0) {
      probe_object(root, st);
      H5Lvisit(root, H5_INDEX_NAME, H5_ITER_NATIVE, probe_link, &st);
    }
  }
  ::_exit(0);  // errors are fine here: the real read reports them precisely
}

void probe_foreign_file(const std::string& path, std::uint64_t file_bytes) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return;  // cannot probe: the checked reads below still run
  if (pid == 0) probe_child(path, file_bytes);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return;
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    throw InputError(fmt::format("{}: damaged HDF5 file: reading it hangs the HDF5 library (stopped after {} s); the "
                                 "file carries no mobisim digest, so it was not written by mobisim or was altered",
                                 path, probe_seconds(file_bytes)));
  if (WIFSIGNALED(status))
    throw InputError(fmt::format("{}: damaged HDF5 file: reading it crashes the HDF5 library (signal {}); the "
                                 "file carries no mobisim digest, so it was not written by mobisim or was altered",
                                 path, WTERMSIG(status)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)  // e.g. a sanitizer report, or out of memory
    throw InputError(fmt::format("{}: damaged HDF5 file: the HDF5 library failed while reading it (status {})", path,
                                 status));
}

}  // namespace

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------
Writer::Writer(std::string path) : path_(std::move(path)) {
  silence_hdf5();
  tmp_path_ = temp_path_for(path_);
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  remove_stale_temps(path_);
  try {
    H5::FileCreatPropList fcpl;
    fcpl.setUserblock(kUserBlockBytes);  // room for the digest (seal)
    H5Pset_obj_track_times(fcpl.getId(), 0);  // the root group's v2 header would store clock times
    H5::FileAccPropList fapl;
    fapl.setLibverBounds(H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);  // v2 object headers: metadata checksums
    // close() must really close: groups and datasets the caller still holds would otherwise keep
    // the file open and write metadata after seal() computed the digest.
    fapl.setFcloseDegree(H5F_CLOSE_STRONG);
    file_.emplace(tmp_path_, H5F_ACC_TRUNC, fcpl, fapl);
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
  file_.reset();
  seal(tmp_path_, path_);
  std::error_code ec;
  std::filesystem::rename(tmp_path_, path_, ec);
  if (ec) throw Error(fmt::format("{}: cannot rename temporary result file: {}", path_, ec.message()));
  sync_parent_dir(path_);
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

// Fixed-length UTF-8 (as wide as the longest string, NUL-padded) in deflated chunks with
// Fletcher-32: the text is then checksummed by HDF5 itself, and reading it never goes through the
// global heap (whose damage libhdf5 does not survive). A column whose padded size would exceed
// 64 MiB (one huge string among many short ones) stays variable-length.
namespace {
constexpr std::size_t kMaxPaddedBytes = std::size_t{64} << 20;  // above it a string column stays variable-length
hsize_t string_chunk_rows(std::size_t rows, std::size_t width) {
  return std::max<hsize_t>(1, std::min<hsize_t>(rows, (1 << 20) / width));
}
}  // namespace

H5::DataSet write_dataset(const H5::Group& g, const std::string& name, const std::vector<std::string>& v) {
  // The whole column is one source of pieces (write_strings_in_pieces has the layout).
  std::size_t width = 1;
  for (const auto& s : v) width = std::max(width, s.size());
  return write_strings_in_pieces(g, name, v.size(), width, [&](std::size_t offset, std::size_t n, const std::string** out) {
    for (std::size_t i = 0; i < n; ++i) out[i] = &v[offset + i];
  });
}

H5::DataSet write_matrix(const H5::Group& g, const std::string& name, const std::vector<float>& data,
                         std::size_t rows, std::size_t cols, const std::string& unit) {
  if (data.size() != rows * cols)
    throw Error(fmt::format("internal: matrix '{}' has {} values, expected {}x{}", name, data.size(), rows, cols));
  hsize_t dims[2] = {rows, cols};
  H5::DataSet ds = g.createDataSet(name, H5::PredType::IEEE_F32LE, H5::DataSpace(2, dims), checked_dcpl({rows, cols}));
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
// Streaming
// ---------------------------------------------------------------------------
namespace {

template <class T>
struct TypesOf;
template <>
struct TypesOf<double> {
  static const H5::PredType& file() { return H5::PredType::IEEE_F64LE; }
  static const H5::PredType& mem() { return H5::PredType::NATIVE_DOUBLE; }
};
template <>
struct TypesOf<std::int64_t> {
  static const H5::PredType& file() { return H5::PredType::STD_I64LE; }
  static const H5::PredType& mem() { return H5::PredType::NATIVE_INT64; }
};
template <>
struct TypesOf<std::int32_t> {
  static const H5::PredType& file() { return H5::PredType::STD_I32LE; }
  static const H5::PredType& mem() { return H5::PredType::NATIVE_INT32; }
};
template <>
struct TypesOf<std::uint8_t> {
  static const H5::PredType& file() { return H5::PredType::STD_U8LE; }
  static const H5::PredType& mem() { return H5::PredType::NATIVE_UINT8; }
};

// Rows [offset, offset + n) of a 1-D dataset, written from or read into `buf`.
H5::DataSpace slab(const H5::DataSet& ds, std::size_t offset, std::size_t n) {
  H5::DataSpace file_space = ds.getSpace();
  const hsize_t start[1] = {offset}, count[1] = {n};
  file_space.selectHyperslab(H5S_SELECT_SET, count, start);
  return file_space;
}
void write_slab(const H5::DataSet& ds, std::size_t offset, std::size_t n, const void* buf, const H5::DataType& mem) {
  const hsize_t count[1] = {n};
  ds.write(buf, mem, H5::DataSpace(1, count), slab(ds, offset, n));
}
// The library's type-conversion buffer defaults to 1 MiB, zeroed on every read: most of the cost
// of reading a short range (a user's 20 query lengths). Sized to the read instead.
H5::DSetMemXferPropList sized_transfer(std::size_t n) {
  H5::DSetMemXferPropList xfer;
  xfer.setBuffer(std::min<std::size_t>(std::size_t{1} << 20, n * 16), nullptr, nullptr);
  return xfer;
}
void read_slab(const H5::DataSet& ds, std::size_t offset, std::size_t n, void* buf, const H5::DataType& mem) {
  const hsize_t count[1] = {n};
  ds.read(buf, mem, H5::DataSpace(1, count), slab(ds, offset, n), sized_transfer(n));
}

}  // namespace

template <class T>
AppendableDataset<T>::AppendableDataset(const H5::Group& g, const std::string& name, std::size_t chunk_rows) {
  if (chunk_rows == 0) throw Error(fmt::format("internal: appendable dataset '{}' needs chunk_rows >= 1", name));
  const hsize_t dims[1] = {0}, max_dims[1] = {H5S_UNLIMITED}, chunk[1] = {chunk_rows};
  H5::DSetCreatPropList dcpl = untimed_dcpl();
  dcpl.setChunk(1, chunk);
  dcpl.setFletcher32();
  H5::DSetAccPropList dapl;
  dapl.setChunkCache(H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT);  // no cache: bounded memory
  ds_ = g.createDataSet(name, TypesOf<T>::file(), H5::DataSpace(1, dims, max_dims), dcpl, dapl);
}

template <class T>
void AppendableDataset<T>::append(const T* values, std::size_t n) {
  if (n == 0) return;
  const hsize_t size[1] = {size_ + n};
  ds_.extend(size);
  write_slab(ds_, size_, n, values, TypesOf<T>::mem());
  size_ += n;
}

template <class T>
void AppendableDataset<T>::read(std::size_t offset, std::size_t n, T* out) const {
  if (offset > size_ || n > size_ - offset)
    throw Error(fmt::format("internal: reading rows [{}, {}) of an appendable dataset of {}", offset, offset + n, size_));
  if (n == 0) return;
  read_slab(ds_, offset, n, out, TypesOf<T>::mem());
}

template class AppendableDataset<double>;
template class AppendableDataset<std::int64_t>;
template class AppendableDataset<std::int32_t>;
template class AppendableDataset<std::uint8_t>;

template <class T>
H5::DataSet write_dataset_in_pieces(const H5::Group& g, const std::string& name, std::size_t rows,
                                    const PieceFill<T>& fill, const std::string& unit) {
  // As write_1d, but chunk by chunk: each write covers whole chunks, in order, as a whole write does.
  const hsize_t dims[1] = {rows};
  H5::DataSet ds = g.createDataSet(name, TypesOf<T>::file(), H5::DataSpace(1, dims), checked_dcpl({rows}));
  const std::size_t piece = std::min<std::size_t>(rows, kChunkElements);
  std::vector<T> buf(piece);
  for (std::size_t offset = 0; offset < rows; offset += piece) {
    const std::size_t n = std::min(piece, rows - offset);
    fill(offset, n, buf.data());
    write_slab(ds, offset, n, buf.data(), TypesOf<T>::mem());
  }
  if (!unit.empty()) write_attr(ds, "unit", unit);
  return ds;
}
template H5::DataSet write_dataset_in_pieces<double>(const H5::Group&, const std::string&, std::size_t,
                                                     const PieceFill<double>&, const std::string&);
template H5::DataSet write_dataset_in_pieces<std::int64_t>(const H5::Group&, const std::string&, std::size_t,
                                                           const PieceFill<std::int64_t>&, const std::string&);

H5::DataSet write_strings_in_pieces(const H5::Group& g, const std::string& name, std::size_t rows, std::size_t width,
                                    const PieceFill<const std::string*>& fill) {
  // As write_dataset(g, name, std::vector<std::string>), chunk by chunk.
  width = std::max<std::size_t>(width, 1);
  const hsize_t dims[1] = {rows};
  std::vector<const std::string*> strings;
  if (rows > kMaxPaddedBytes / width) {
    H5::StrType t = utf8_string_type();
    H5::DataSet ds = g.createDataSet(name, t, H5::DataSpace(1, dims), untimed_dcpl());
    std::vector<const char*> ptrs;
    for (std::size_t offset = 0; offset < rows; offset += kChunkElements) {
      const std::size_t n = std::min<std::size_t>(kChunkElements, rows - offset);
      strings.assign(n, nullptr);
      fill(offset, n, strings.data());
      ptrs.clear();
      for (const std::string* s : strings) ptrs.push_back(s->c_str());
      write_slab(ds, offset, n, ptrs.data(), t);
    }
    return ds;
  }
  H5::StrType t(H5::PredType::C_S1, width);
  t.setCset(H5T_CSET_UTF8);
  t.setStrpad(H5T_STR_NULLPAD);
  H5::DSetCreatPropList dcpl = untimed_dcpl();
  const std::size_t piece = rows == 0 ? 0 : string_chunk_rows(rows, width);
  if (rows > 0) {
    const hsize_t chunk[1] = {piece};
    dcpl.setChunk(1, chunk);
    dcpl.setDeflate(4);
    dcpl.setFletcher32();
  }
  H5::DataSet ds = g.createDataSet(name, t, H5::DataSpace(1, dims), dcpl);
  std::vector<char> buf;
  for (std::size_t offset = 0; offset < rows; offset += piece) {
    const std::size_t n = std::min(piece, rows - offset);
    strings.assign(n, nullptr);
    fill(offset, n, strings.data());
    buf.assign(n * width, '\0');
    for (std::size_t i = 0; i < n; ++i) std::copy(strings[i]->begin(), strings[i]->end(), buf.begin() + i * width);
    write_slab(ds, offset, n, buf.data(), t);
  }
  return ds;
}

struct SpooledTable::Column {
  enum class Kind { kDouble, kInt, kString };
  std::string name, unit;
  Kind kind = Kind::kDouble;
  // Rows not yet in the scratch file (at most buffer_rows); strings as indexes into `values`.
  std::vector<double> doubles;
  std::vector<std::int64_t> ints;
  std::vector<std::int32_t> string_ids;
  std::unique_ptr<AppendableDataset<double>> double_file;
  std::unique_ptr<AppendableDataset<std::int64_t>> int_file;
  std::unique_ptr<AppendableDataset<std::int32_t>> string_id_file;
  std::vector<std::string> values;  // distinct strings, in order of first appearance
  std::unordered_map<std::string, std::int32_t> value_ids;

  static Kind kind_of(const Table::Column& c) {
    if (std::holds_alternative<std::vector<double>>(c)) return Kind::kDouble;
    if (std::holds_alternative<std::vector<std::int64_t>>(c)) return Kind::kInt;
    return Kind::kString;
  }
  // Buffers rows [from, from + n) of `c`.
  void stage(const Table::Column& c, std::size_t from, std::size_t n) {
    if (kind == Kind::kDouble) {
      const auto& v = std::get<std::vector<double>>(c);
      doubles.insert(doubles.end(), v.begin() + static_cast<std::ptrdiff_t>(from),
                     v.begin() + static_cast<std::ptrdiff_t>(from + n));
    } else if (kind == Kind::kInt) {
      const auto& v = std::get<std::vector<std::int64_t>>(c);
      ints.insert(ints.end(), v.begin() + static_cast<std::ptrdiff_t>(from),
                  v.begin() + static_cast<std::ptrdiff_t>(from + n));
    } else {
      const auto& v = std::get<std::vector<std::string>>(c);
      for (std::size_t r = from; r < from + n; ++r) {
        auto [it, fresh] = value_ids.try_emplace(v[r], static_cast<std::int32_t>(values.size()));
        if (fresh) values.push_back(v[r]);
        string_ids.push_back(it->second);
      }
    }
  }
  void flush() {
    if (double_file) double_file->append(doubles.data(), doubles.size());
    if (int_file) int_file->append(ints.data(), ints.size());
    if (string_id_file) string_id_file->append(string_ids.data(), string_ids.size());
    doubles.clear();
    ints.clear();
    string_ids.clear();
  }
};

SpooledTable::SpooledTable(const std::string& scratch_path, std::size_t buffer_rows)
    : SpooledTable(std::make_shared<Writer>(scratch_path), "", buffer_rows) {}

SpooledTable::SpooledTable(std::shared_ptr<Writer> scratch, std::string group, std::size_t buffer_rows)
    : scratch_(std::move(scratch)), group_(std::move(group)), buffer_rows_(std::max<std::size_t>(buffer_rows, 1)) {}

SpooledTable::~SpooledTable() = default;

void SpooledTable::define_columns(const Table& batch) {
  H5::Group root = group_.empty() ? scratch_->root() : scratch_->group(group_);
  for (std::size_t i = 0; i < batch.names().size(); ++i) {
    auto c = std::make_unique<Column>();
    c->name = batch.names()[i];
    c->unit = batch.units()[i];
    c->kind = Column::kind_of(batch.column(c->name));
    const std::string ds = fmt::format("c{}", i);  // column names may hold any character
    if (c->kind == Column::Kind::kDouble) {
      c->double_file = std::make_unique<AppendableDataset<double>>(root, ds, buffer_rows_);
    } else if (c->kind == Column::Kind::kInt) {
      c->int_file = std::make_unique<AppendableDataset<std::int64_t>>(root, ds, buffer_rows_);
    } else {
      c->string_id_file = std::make_unique<AppendableDataset<std::int32_t>>(root, ds, buffer_rows_);
    }
    names_.push_back(c->name);
    columns_.push_back(std::move(c));
  }
}

void SpooledTable::append(const Table& batch) {
  if (finished_) throw Error("internal: SpooledTable::append after finish()");
  if (columns_.empty() && rows_ == 0) define_columns(batch);
  bool same = batch.names() == names_;
  for (std::size_t i = 0; same && i < columns_.size(); ++i)
    same = batch.units()[i] == columns_[i]->unit && Column::kind_of(batch.column(names_[i])) == columns_[i]->kind;
  if (!same) throw Error("internal: SpooledTable::append of a batch with other columns than the first");
  const std::size_t n = batch.rows();
  for (std::size_t from = 0; from < n;) {
    const std::size_t take = std::min(n - from, buffer_rows_ - buffered_);
    for (std::size_t i = 0; i < columns_.size(); ++i) columns_[i]->stage(batch.column(names_[i]), from, take);
    from += take;
    buffered_ += take;
    rows_ += take;
    if (buffered_ == buffer_rows_) flush();
  }
}

void SpooledTable::flush() {
  for (auto& c : columns_) c->flush();
  buffered_ = 0;
}

void SpooledTable::finish() {
  if (finished_) return;
  flush();
  finished_ = true;
}

void SpooledTable::require_finished(const char* what) const {
  if (!finished_) throw Error(fmt::format("internal: SpooledTable::{} before finish()", what));
}

const SpooledTable::Column& SpooledTable::column(const std::string& name) const {
  for (const auto& c : columns_)
    if (c->name == name) return *c;
  throw Error(fmt::format("internal: spooled table has no column '{}'", name));
}

std::vector<double> SpooledTable::doubles(const std::string& name) const {
  require_finished("doubles");
  const Column& c = column(name);
  if (c.kind != Column::Kind::kDouble) throw Error(fmt::format("internal: spooled column '{}' is not double", name));
  std::vector<double> out(rows_);
  c.double_file->read(0, rows_, out.data());
  return out;
}

std::vector<std::int64_t> SpooledTable::ints(const std::string& name) const {
  require_finished("ints");
  const Column& c = column(name);
  if (c.kind != Column::Kind::kInt) throw Error(fmt::format("internal: spooled column '{}' is not integer", name));
  std::vector<std::int64_t> out(rows_);
  c.int_file->read(0, rows_, out.data());
  return out;
}

void SpooledTable::write(const H5::Group& parent, const std::string& name) const {
  require_finished("write");
  H5::Group g = make_group(parent, name);
  for (const auto& c : columns_) {
    if (c->kind == Column::Kind::kDouble) {
      write_dataset_in_pieces<double>(
          g, c->name, rows_, [&](std::size_t off, std::size_t n, double* out) { c->double_file->read(off, n, out); },
          c->unit);
    } else if (c->kind == Column::Kind::kInt) {
      write_dataset_in_pieces<std::int64_t>(
          g, c->name, rows_,
          [&](std::size_t off, std::size_t n, std::int64_t* out) { c->int_file->read(off, n, out); }, c->unit);
    } else {
      std::size_t width = 1;
      for (const auto& s : c->values) width = std::max(width, s.size());
      std::vector<std::int32_t> ids;
      write_strings_in_pieces(g, c->name, rows_, width, [&](std::size_t off, std::size_t n, const std::string** out) {
        ids.resize(n);
        c->string_id_file->read(off, n, ids.data());
        for (std::size_t i = 0; i < n; ++i) out[i] = &c->values[static_cast<std::size_t>(ids[i])];
      });
    }
  }
  write_attr(g, "columns", names_);
  write_attr(g, "n_rows", static_cast<std::int64_t>(rows_));
}

void reseal(const std::string& path) {
  if (verify_digest_or_mismatch(path)) seal(path, path);
}

// ---------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------
Reader::Reader(std::string path) : path_(std::move(path)) {
  silence_hdf5();
  if (!path_exists(path_)) throw InputError(fmt::format("{}: no such file", path_));
  std::error_code ec;
  file_bytes_ = std::filesystem::file_size(path_, ec);
  if (ec) throw InputError(fmt::format("{}: cannot read: {}", path_, ec.message()));
  verified_ = verify_digest(path_) == Integrity::kVerified;
  if (!verified_) probe_foreign_file(path_, file_bytes_);  // before any HDF5 call on the file
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

void Reader::check_extent(const std::string& path, std::uint64_t elements, std::size_t element_bytes) const {
  const std::uint64_t limit = max_data_bytes(file_bytes_);
  if (element_bytes == 0 || elements > limit / element_bytes)
    fail(path, fmt::format("{} elements of {} bytes cannot come from a {}-byte file (damaged extent?)", elements,
                           element_bytes, file_bytes_));
}

bool Reader::exists(const std::string& object_path) const {
  if (object_path == "/" || object_path.empty()) return true;
  // Present: one look-up of the whole path (every prefix then exists too). Otherwise check each
  // prefix: H5Lexists fails on a missing intermediate group.
  if (H5Lexists(file_.getId(), object_path.c_str(), H5P_DEFAULT) > 0) return true;
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
  // Opened first, and looked for only when that fails: one path look-up for a present dataset.
  const hid_t id = H5Dopen2(file_.getId(), path.c_str(), H5P_DEFAULT);
  if (id < 0 && !exists(path)) fail(path, "missing dataset");
  try {
    if (id < 0) throw H5::Exception("H5Dopen2", "cannot open the dataset");
    H5::DataSet ds(id);  // the wrapper takes its own reference to the id...
    H5Dclose(id);        // ...so drop ours
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
    throw InputError(fmt::format("{}: {}: unexpected element type (expected {})", r.path(), path,
                                 want_class == H5T_FLOAT ? "floating point" : "integer"));
  hsize_t n = 0;
  ds.getSpace().getSimpleExtentDims(&n);
  r.check_extent(path, n, sizeof(T));
  std::vector<T> out(n);
  if (n) {
    ds.read(out.data(), mem, H5::DataSpace::ALL, H5::DataSpace::ALL, sized_transfer(n));
  }
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
    const bool variable = ds.getStrType().isVariableStr();
    const std::size_t width = variable ? sizeof(char*) : ds.getStrType().getSize();
    check_extent(path, n, std::max<std::size_t>(width, 1));
    std::vector<std::string> out;
    out.reserve(n);
    H5::StrType t = utf8_string_type();
    if (variable) {
      std::vector<char*> ptrs(n, nullptr);
      if (n) ds.read(ptrs.data(), t);
      for (char* p : ptrs) out.emplace_back(p ? p : "");
      if (n) {
        H5::DataSpace sp = ds.getSpace();
        H5Dvlen_reclaim(t.getId(), sp.getId(), H5P_DEFAULT, ptrs.data());
      }
    } else {
      std::vector<char> buf(n * width);
      if (n) ds.read(buf.data(), ds.getStrType());
      for (hsize_t i = 0; i < n; ++i) {
        // Without the NUL padding, sized to the text (not to the column's widest entry).
        const std::string_view padded(buf.data() + i * width, width);
        out.emplace_back(padded.substr(0, padded.find_last_not_of('\0') + 1));
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
    if (dims[1] != 0 && dims[0] > std::numeric_limits<std::uint64_t>::max() / dims[1])
      fail(path, "matrix extent overflows");
    check_extent(path, dims[0] * dims[1], sizeof(float));
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

// Opens a single-valued attribute; an array attribute would overrun the one value read into.
static H5::Attribute open_any_attr(const H5::H5File& file, const std::string& object_path, const std::string& name) {
  H5O_info_t info;
  if (H5Oget_info_by_name(file.getId(), object_path.c_str(), &info, H5P_DEFAULT) < 0)
    throw H5::Exception("open_attr", "cannot inspect object");
  return info.type == H5O_TYPE_DATASET ? file.openDataSet(object_path).openAttribute(name)
                                       : file.openGroup(object_path).openAttribute(name);
}

// A single-valued attribute.
static H5::Attribute open_attr(const H5::H5File& file, const std::string& object_path, const std::string& name) {
  H5::Attribute a = open_any_attr(file, object_path, name);
  if (a.getSpace().getSimpleExtentNpoints() != 1)
    throw H5::Exception("open_attr", fmt::format("attribute '{}' holds {} values, expected one", name,
                                                 a.getSpace().getSimpleExtentNpoints()));
  return a;
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
    H5::StrType t = a.getStrType();
    if (!t.isVariableStr()) check_extent(object_path + "@" + name, t.getSize(), 1);
    a.read(t, out);
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
    if (a.getTypeClass() != H5T_INTEGER && a.getTypeClass() != H5T_FLOAT)
      fail(object_path, fmt::format("attribute '{}' is not a number", name));
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

// Iterates the links (as the foreign-file probe does) rather than looking names up by index: the
// by-index path of libhdf5 frees memory twice on some damaged dense groups.
static herr_t collect_link_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

std::vector<std::string> Reader::attr_strings(const std::string& object_path, const std::string& name) const {
  if (!has_attr(object_path, name)) fail(object_path, fmt::format("missing attribute '{}'", name));
  try {
    H5::Attribute a = open_any_attr(file_, object_path, name);
    if (a.getTypeClass() != H5T_STRING) fail(object_path, fmt::format("attribute '{}' is not a string list", name));
    H5::DataSpace space = a.getSpace();
    if (space.getSimpleExtentNdims() != 1) fail(object_path, fmt::format("attribute '{}' is not a list", name));
    hsize_t n = 0;
    space.getSimpleExtentDims(&n);
    check_extent(object_path + "@" + name, n, sizeof(char*));
    std::vector<std::string> out;
    if (n == 0) return out;
    H5::StrType t = a.getStrType();
    if (!t.isVariableStr()) fail(object_path, fmt::format("attribute '{}': expected variable-length strings", name));
    std::vector<char*> ptrs(n, nullptr);
    a.read(t, ptrs.data());
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    H5::DataSet::vlenReclaim(ptrs.data(), t, space);
    return out;
  } catch (const H5::Exception& e) {
    fail(object_path, fmt::format("attribute '{}' unreadable: {}", name, e.getDetailMsg()));
  }
}

Table Reader::table(const std::string& group_path) const {
  const std::vector<std::string> names =
      has_attr(group_path, "columns") ? attr_strings(group_path, "columns") : children(group_path);
  Table t;
  for (const auto& name : names) {
    const std::string path = group_path + "/" + name;
    H5T_class_t kind = H5T_NO_CLASS;
    std::string unit;
    try {
      const H5::DataSet ds = dataset(path, 1, std::nullopt);
      kind = ds.getTypeClass();
      if (ds.attrExists("unit")) {
        H5::Attribute a = ds.openAttribute("unit");
        a.read(a.getStrType(), unit);
      }
    } catch (const H5::Exception& e) {
      fail(path, "unreadable (truncated or corrupt?): " + e.getDetailMsg());
    }
    if (kind == H5T_STRING)
      t.add(name, strings(path));
    else if (kind == H5T_INTEGER)
      t.add(name, ints(path), unit);
    else if (kind == H5T_FLOAT)
      t.add(name, doubles(path), unit);
    else
      fail(path, "expected a column of text, integers or reals");
  }
  return t;
}

std::vector<std::string> Reader::children(const std::string& group_path) const {
  H5::Group g = group(group_path);
  std::vector<std::string> out;
  hsize_t idx = 0;
  if (H5Literate(g.getId(), H5_INDEX_NAME, H5_ITER_NATIVE, &idx, collect_link_name, &out) < 0)
    fail(group_path, "cannot list group (truncated or corrupt?)");
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------
// Column reads by row range
// ---------------------------------------------------------------------------
template <class T>
ColumnReader<T>::ColumnReader(const Reader& file, const std::string& path) : file_path_(file.path()), path_(path) {
  ds_ = file.dataset(path, 1, std::nullopt);
  const H5T_class_t want = std::is_floating_point_v<T> ? H5T_FLOAT : H5T_INTEGER;
  if (ds_.getTypeClass() != want)
    file.fail(path, fmt::format("unexpected element type (expected {})", want == H5T_FLOAT ? "floating point" : "integer"));
  hsize_t n = 0;
  ds_.getSpace().getSimpleExtentDims(&n);
  file.check_extent(path, n, sizeof(T));
  size_ = static_cast<std::size_t>(n);
}

template <class T>
void ColumnReader<T>::read(std::size_t offset, std::size_t n, std::vector<T>& out) const {
  if (offset > size_ || n > size_ - offset)
    throw InputError(fmt::format("{}: {}: rows [{}, {}) are outside its {} rows", file_path_, path_, offset,
                                 offset + n, size_));
  out.resize(n);
  if (n == 0) return;
  try {
    read_slab(ds_, offset, n, out.data(), TypesOf<T>::mem());
  } catch (const H5::Exception& e) {
    throw InputError(fmt::format("{}: {}: read failed (truncated or corrupt?): {}", file_path_, path_,
                                 e.getDetailMsg()));
  }
}

template class ColumnReader<double>;
template class ColumnReader<std::int64_t>;
template class ColumnReader<std::uint8_t>;

}  // namespace mobisim::h5
