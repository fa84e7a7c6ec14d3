#include "policies/kvcache/kv_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "policies/kvcache/fingerprint.h"
#include "sim/digest.h"
#include "sim/error.h"

namespace mobisim::policies::kvcache {

namespace {

constexpr char kFileMagic[8] = {'M', 'S', 'K', 'V', 'S', 'T', 'O', 'R'};
constexpr char kFooterMagic[8] = {'M', 'S', 'K', 'V', 'E', 'N', 'D', '1'};
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::uint16_t kTensorMagic = 0x564B;  // bytes 'K', 'V'
constexpr std::uint8_t kTensorVersion = 1;
constexpr std::size_t kFileHeaderBytes = 36;
constexpr std::size_t kTensorHeaderBytes = 12;
constexpr std::size_t kFooterBytes = 16;
constexpr std::size_t kDataAlign = 16;
constexpr std::uint32_t kTensorCount = 3;  // token ids, K, V

// Little-endian encoding, independent of the host's byte order.
template <class T>
void put_le(std::byte* p, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
}
template <class T>
T get_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

// Offset where a tensor header goes so that its data starts kDataAlign-aligned.
std::size_t header_offset(std::size_t pos) {
  const std::size_t data = (pos + kTensorHeaderBytes + kDataAlign - 1) / kDataAlign * kDataAlign;
  return data - kTensorHeaderBytes;
}

bool valid_dtype(std::uint8_t d) { return d <= static_cast<std::uint8_t>(StoreDType::kF8); }

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const std::byte* p, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw InputError(fmt::format("kv store: writing '{}' failed: {}", path, errno_text()));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw InputError(fmt::format("kv store: cannot open directory '{}' to sync it: {}", dir, errno_text()));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw InputError(fmt::format("kv store: fsync of directory '{}' failed: {}", dir, errno_text()));
}

bool parse_entry_name(const std::string& name, std::uint64_t& key) {
  if (name.size() != 19 || name.substr(16) != ".kv") return false;
  key = 0;
  for (int i = 0; i < 16; ++i) {
    const char c = name[static_cast<std::size_t>(i)];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    key = (key << 4) | static_cast<std::uint64_t>(d);
  }
  return true;
}

std::atomic<std::uint64_t> g_tmp_counter{0};

}  // namespace

std::size_t store_dtype_bytes(StoreDType t) {
  switch (t) {
    case StoreDType::kF32: return 4;
    case StoreDType::kF16: return 2;
    case StoreDType::kBF16: return 2;
    case StoreDType::kI32: return 4;
    case StoreDType::kI8: return 1;
    case StoreDType::kF8: return 1;
  }
  return 0;
}

const char* to_string(StoreDType t) {
  switch (t) {
    case StoreDType::kF32: return "f32";
    case StoreDType::kF16: return "f16";
    case StoreDType::kBF16: return "bf16";
    case StoreDType::kI32: return "i32";
    case StoreDType::kI8: return "i8";
    case StoreDType::kF8: return "f8";
  }
  return "?";
}

const char* to_string(LoadStatus s) {
  switch (s) {
    case LoadStatus::kOk: return "ok";
    case LoadStatus::kMissing: return "missing";
    case LoadStatus::kTruncated: return "truncated";
    case LoadStatus::kCorrupt: return "corrupt";
    case LoadStatus::kForeign: return "foreign";
  }
  return "?";
}

MappedEntry::MappedEntry(void* base, std::size_t size) : base_(base), size_(size) {}
MappedEntry::~MappedEntry() {
  if (base_) ::munmap(base_, size_);
}

std::uint64_t KvStore::checksum(std::span<const std::byte> bytes) {
  Digest c;  // the file digest of sim/digest.h (STORE_FORMAT.md describes the same algorithm)
  c.update(bytes.data(), bytes.size());
  return c.finish();
}

std::uint64_t KvStore::file_bytes_for(std::uint32_t tokens, std::uint32_t layers, std::uint32_t width,
                                      StoreDType dtype) {
  std::size_t pos = kFileHeaderBytes;
  const std::size_t sizes[3] = {std::size_t{tokens} * 4,
                                std::size_t{layers} * tokens * width * store_dtype_bytes(dtype),
                                std::size_t{layers} * tokens * width * store_dtype_bytes(dtype)};
  for (std::size_t s : sizes) pos = header_offset(pos) + kTensorHeaderBytes + s;
  return pos + kFooterBytes;
}

KvStore::KvStore(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) throw InputError("kv store: the store directory is empty (expected a path)");
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw InputError(fmt::format("kv store: cannot create store directory '{}': {}", dir_, ec.message()));
  if (!std::filesystem::is_directory(dir_, ec))
    throw InputError(fmt::format("kv store: '{}' is not a directory (expected a store directory)", dir_));
  // A probe file: access(2) says yes to root even on a read-only file system.
  const std::string probe = fmt::format("{}/.probe-{}", dir_, ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw InputError(fmt::format("kv store: store directory '{}' is not writable: {}", dir_, errno_text()));
  ::close(fd);
  ::unlink(probe.c_str());
  // Temporary files of writers that died mid-write are garbage (never acknowledged).
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      const auto pos = name.find(".kv.tmp-");
      if (pos == std::string::npos) continue;
      const long pid = std::strtol(name.c_str() + pos + 8, nullptr, 10);
      if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) == 0) continue;  // a live writer
      ::unlink((dir_ + "/" + name).c_str());
    }
    ::closedir(d);
  }
}

std::string KvStore::path_of(std::uint64_t key) const { return fmt::format("{}/{:016x}.kv", dir_, key); }

std::uint64_t KvStore::put(std::uint64_t key, std::span<const std::int32_t> tokens, const KvTensorsView& kv) {
  if (kv.tokens != tokens.size())
    throw Error(fmt::format("kv store: entry {:016x} has {} token ids but K/V for {} tokens", key, tokens.size(), kv.tokens));
  if (kv.layers == 0 || kv.tokens == 0 || kv.width == 0)
    throw Error(fmt::format("kv store: entry {:016x} has an empty shape [{}, {}, {}]", key, kv.layers, kv.tokens, kv.width));
  if (kv.layers > 0xffff || kv.tokens > 0xffff || kv.width > 0xffff)
    throw Error(fmt::format("kv store: entry {:016x} shape [{}, {}, {}] exceeds the format's 65535 per dimension", key,
                            kv.layers, kv.tokens, kv.width));
  if (kv.k.size() != kv.tensor_bytes() || kv.v.size() != kv.tensor_bytes())
    throw Error(fmt::format("kv store: entry {:016x}: K/V spans ({} / {} bytes) do not match the shape ({} bytes)", key,
                            kv.k.size(), kv.v.size(), kv.tensor_bytes()));
  const std::uint64_t total = file_bytes_for(kv.tokens, kv.layers, kv.width, kv.dtype);
  const std::string final_path = path_of(key);
  const std::string tmp = fmt::format("{}/.{:016x}.kv.tmp-{}-{}", dir_, key, ::getpid(), g_tmp_counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(fmt::format("kv store: cannot create '{}': {}", tmp, errno_text()));
  try {
    Digest sum;
    std::size_t pos = 0;
    auto emit = [&](const std::byte* p, std::size_t n) {
      write_all(fd, p, n, tmp);
      sum.update(p, n);
      pos += n;
    };
    std::array<std::byte, kFileHeaderBytes> fh{};
    std::memcpy(fh.data(), kFileMagic, 8);
    put_le<std::uint32_t>(fh.data() + 8, kFormatVersion);
    put_le<std::uint32_t>(fh.data() + 12, kTensorCount);
    put_le<std::uint64_t>(fh.data() + 16, key);
    put_le<std::uint64_t>(fh.data() + 24, total - kFileHeaderBytes - kFooterBytes);
    emit(fh.data(), fh.size());
    auto tensor = [&](StoreDType dt, std::array<std::uint16_t, 4> shape, std::span<const std::byte> data) {
      static const std::array<std::byte, kDataAlign> zeros{};
      const std::size_t pad = header_offset(pos) - pos;
      if (pad) emit(zeros.data(), pad);
      std::array<std::byte, kTensorHeaderBytes> th{};
      put_le<std::uint16_t>(th.data(), kTensorMagic);
      th[2] = static_cast<std::byte>(kTensorVersion);
      th[3] = static_cast<std::byte>(dt);
      for (int i = 0; i < 4; ++i) put_le<std::uint16_t>(th.data() + 4 + 2 * i, shape[static_cast<std::size_t>(i)]);
      emit(th.data(), th.size());
      emit(data.data(), data.size());
    };
    const auto n = static_cast<std::uint16_t>(kv.tokens), L = static_cast<std::uint16_t>(kv.layers),
               W = static_cast<std::uint16_t>(kv.width);
    std::vector<std::byte> tok(tokens.size() * 4);
    for (std::size_t i = 0; i < tokens.size(); ++i) put_le<std::uint32_t>(tok.data() + 4 * i, static_cast<std::uint32_t>(tokens[i]));
    tensor(StoreDType::kI32, {n, 1, 1, 1}, tok);
    tensor(kv.dtype, {L, n, W, 1}, kv.k);
    tensor(kv.dtype, {L, n, W, 1}, kv.v);
    std::array<std::byte, kFooterBytes> ft{};
    put_le<std::uint64_t>(ft.data(), sum.finish());
    std::memcpy(ft.data() + 8, kFooterMagic, 8);
    write_all(fd, ft.data(), ft.size(), tmp);
    if (pos + kFooterBytes != total) throw Error(fmt::format("kv store: internal size mismatch writing '{}'", tmp));
    if (::fsync(fd) != 0) throw InputError(fmt::format("kv store: fsync of '{}' failed: {}", tmp, errno_text()));
    if (::close(fd) != 0) throw InputError(fmt::format("kv store: closing '{}' failed: {}", tmp, errno_text()));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw InputError(fmt::format("kv store: renaming '{}' to '{}' failed: {}", tmp, final_path, why));
  }
  fsync_dir(dir_);  // the rename itself is durable: the entry is acknowledged only now
  return total;
}

LoadResult KvStore::load(std::uint64_t key) const {
  LoadResult r;
  const std::string path = path_of(key);
  auto fail = [&](LoadStatus s, const std::string& why) {
    r.status = s;
    r.reason = fmt::format("'{}': {}", path, why);
    r.entry.reset();
    ::unlink(path.c_str());  // evict: a bad file is never served and never retried
    return std::move(r);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    r.status = LoadStatus::kMissing;
    r.reason = fmt::format("'{}': {}", path, errno_text());
    return r;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(LoadStatus::kForeign, "not a regular file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < kFileHeaderBytes + kFooterBytes) {
    ::close(fd);
    return fail(LoadStatus::kTruncated,
                fmt::format("{} bytes, shorter than header + footer ({})", size, kFileHeaderBytes + kFooterBytes));
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    r.status = LoadStatus::kMissing;
    r.reason = fmt::format("'{}': mmap failed: {}", path, errno_text());
    return r;
  }
  ::madvise(base, size, MADV_SEQUENTIAL);
  ::madvise(base, size, MADV_WILLNEED);
  auto entry = std::make_unique<MappedEntry>(base, size);
  const auto* p = static_cast<const std::byte*>(base);
  if (std::memcmp(p, kFileMagic, 8) != 0) return fail(LoadStatus::kForeign, "bad file magic (not a mobisim KV entry)");
  const auto version = get_le<std::uint32_t>(p + 8);
  if (version != kFormatVersion)
    return fail(LoadStatus::kForeign, fmt::format("format version {} (expected {})", version, kFormatVersion));
  if (get_le<std::uint32_t>(p + 12) != kTensorCount)
    return fail(LoadStatus::kCorrupt, fmt::format("{} tensors (expected {})", get_le<std::uint32_t>(p + 12), kTensorCount));
  if (get_le<std::uint64_t>(p + 16) != key)
    return fail(LoadStatus::kForeign,
                fmt::format("holds key {:016x}, not {:016x} (renamed or copied file)", get_le<std::uint64_t>(p + 16), key));
  const auto payload = get_le<std::uint64_t>(p + 24);
  const std::uint64_t expected = kFileHeaderBytes + payload + kFooterBytes;
  if (expected > size) return fail(LoadStatus::kTruncated, fmt::format("{} bytes, header says {}", size, expected));
  if (expected < size) return fail(LoadStatus::kCorrupt, fmt::format("{} bytes, header says {}", size, expected));
  if (std::memcmp(p + size - 8, kFooterMagic, 8) != 0) return fail(LoadStatus::kTruncated, "footer magic missing");
  const auto stored_sum = get_le<std::uint64_t>(p + size - kFooterBytes);
  const auto actual_sum = checksum({p, size - kFooterBytes});
  if (stored_sum != actual_sum)
    return fail(LoadStatus::kCorrupt, fmt::format("checksum {:016x}, stored {:016x}", actual_sum, stored_sum));
  // Tensors: token ids [n], K [L, n, W], V [L, n, W].
  std::size_t pos = kFileHeaderBytes;
  const std::size_t end = size - kFooterBytes;
  struct T {
    StoreDType dtype;
    std::uint16_t shape[4];
    const std::byte* data;
    std::size_t bytes;
  } t[3];
  for (int i = 0; i < 3; ++i) {
    pos = header_offset(pos);
    if (pos + kTensorHeaderBytes > end) return fail(LoadStatus::kCorrupt, fmt::format("tensor {} header past the end", i));
    const std::byte* h = p + pos;
    if (get_le<std::uint16_t>(h) != kTensorMagic) return fail(LoadStatus::kCorrupt, fmt::format("tensor {} magic", i));
    if (static_cast<std::uint8_t>(h[2]) != kTensorVersion)
      return fail(LoadStatus::kForeign, fmt::format("tensor {} version {}", i, static_cast<int>(h[2])));
    if (!valid_dtype(static_cast<std::uint8_t>(h[3])))
      return fail(LoadStatus::kCorrupt, fmt::format("tensor {} dtype code {}", i, static_cast<int>(h[3])));
    t[i].dtype = static_cast<StoreDType>(h[3]);
    std::size_t elems = 1;
    for (int d = 0; d < 4; ++d) elems *= t[i].shape[d] = get_le<std::uint16_t>(h + 4 + 2 * d);
    t[i].bytes = elems * store_dtype_bytes(t[i].dtype);
    t[i].data = h + kTensorHeaderBytes;
    pos += kTensorHeaderBytes + t[i].bytes;
    if (pos > end) return fail(LoadStatus::kCorrupt, fmt::format("tensor {} data past the end", i));
  }
  if (pos != end) return fail(LoadStatus::kCorrupt, "bytes after the last tensor");
  if (t[0].dtype != StoreDType::kI32 || t[0].shape[1] != 1 || t[0].shape[2] != 1 || t[0].shape[3] != 1)
    return fail(LoadStatus::kCorrupt, "token tensor is not i32 [n]");
  for (int i = 1; i < 3; ++i)
    if (t[i].dtype != t[1].dtype || t[i].shape[0] == 0 || t[i].shape[1] != t[0].shape[0] || t[i].shape[2] == 0 ||
        t[i].shape[3] != 1 || t[i].shape[0] != t[1].shape[0] || t[i].shape[2] != t[1].shape[2])
      return fail(LoadStatus::kCorrupt, "K/V shapes disagree with each other or with the token count");
  entry->key = key;
  entry->tokens = {reinterpret_cast<const std::int32_t*>(t[0].data), t[0].shape[0]};
  entry->kv.dtype = t[1].dtype;
  entry->kv.layers = t[1].shape[0];
  entry->kv.tokens = t[1].shape[1];
  entry->kv.width = t[1].shape[2];
  entry->kv.k = {t[1].data, t[1].bytes};
  entry->kv.v = {t[2].data, t[2].bytes};
  r.status = LoadStatus::kOk;
  r.entry = std::move(entry);
  return r;
}

bool KvStore::remove(std::uint64_t key) const { return ::unlink(path_of(key).c_str()) == 0; }

bool KvStore::contains(std::uint64_t key) const {
  struct stat st {};
  return ::stat(path_of(key).c_str(), &st) == 0;
}

std::vector<StoredEntryInfo> KvStore::scan() const {
  std::vector<StoredEntryInfo> out;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) throw InputError(fmt::format("kv store: cannot list '{}': {}", dir_, errno_text()));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());  // deterministic order
  for (const auto& name : names) {
    std::uint64_t key = 0;
    if (!parse_entry_name(name, key)) continue;
    const std::string path = dir_ + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::array<std::byte, kFileHeaderBytes + kTensorHeaderBytes + 4> hdr{};
    const ssize_t n = ::pread(fd, hdr.data(), hdr.size(), 0);
    struct stat st {};
    const bool stat_ok = ::fstat(fd, &st) == 0;
    ::close(fd);
    const bool ok = stat_ok && n == static_cast<ssize_t>(hdr.size()) && std::memcmp(hdr.data(), kFileMagic, 8) == 0 &&
                    get_le<std::uint32_t>(hdr.data() + 8) == kFormatVersion &&
                    get_le<std::uint64_t>(hdr.data() + 16) == key &&
                    kFileHeaderBytes + get_le<std::uint64_t>(hdr.data() + 24) + kFooterBytes ==
                        static_cast<std::uint64_t>(st.st_size);
    if (!ok) {
      ::unlink(path.c_str());  // truncated or foreign: never served
      continue;
    }
    // The first tensor header sits right after the file header (36 + 12 = 48 is aligned).
    out.push_back({key, static_cast<std::uint64_t>(st.st_size), get_le<std::uint16_t>(hdr.data() + kFileHeaderBytes + 4)});
  }
  return out;
}

}  // namespace mobisim::policies::kvcache
