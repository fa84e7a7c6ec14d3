#pragma once
// A real on-disk store of prefix K/V tensors (seed 001), one file per entry:
// `<dir>/<16 hex digits of the key>.kv`, in the TLV format documented in
// policies/kvcache/STORE_FORMAT.md (file header, one 12-byte header per tensor
// followed by its raw bytes, then a checksum footer).
//
// - Writes are atomic and durable: a temporary file in the same directory is
//   written, fsynced and renamed over the final name, then the directory is
//   fsynced. When put() returns, the entry survives a crash (acknowledged).
// - Loads map the file read-only (mmap) and check sizes, magics, versions,
//   shapes and the checksum before anything is served. A missing file is a
//   miss; a truncated, corrupt or foreign file is a miss too and is deleted
//   (evicted): the store never serves wrong K/V.
// - Opening a store removes temporary files left by a writer that died.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mobisim::policies::kvcache {

// Element types of stored tensors (the dtype byte of a tensor header).
enum class StoreDType : std::uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3, kI8 = 4, kF8 = 5 };
std::size_t store_dtype_bytes(StoreDType t);
const char* to_string(StoreDType t);

// K and V of one prefix: each [layers, tokens, width] row-major, `dtype` elements.
struct KvTensorsView {
  StoreDType dtype = StoreDType::kF16;
  std::uint32_t layers = 0, tokens = 0, width = 0;
  std::span<const std::byte> k, v;
  std::size_t tensor_bytes() const { return std::size_t{layers} * tokens * width * store_dtype_bytes(dtype); }
};

enum class LoadStatus { kOk, kMissing, kTruncated, kCorrupt, kForeign };
const char* to_string(LoadStatus s);

// A loaded entry: views into a read-only mapping, valid while this object lives.
class MappedEntry {
 public:
  MappedEntry(void* base, std::size_t size);
  ~MappedEntry();
  MappedEntry(const MappedEntry&) = delete;
  MappedEntry& operator=(const MappedEntry&) = delete;
  std::uint64_t key = 0;
  std::span<const std::int32_t> tokens;
  KvTensorsView kv;
  std::size_t file_bytes() const { return size_; }

 private:
  void* base_;
  std::size_t size_;
};

struct LoadResult {
  LoadStatus status = LoadStatus::kMissing;
  std::string reason;                    // why it is not kOk (file and what was wrong)
  std::unique_ptr<MappedEntry> entry;    // set when kOk
  bool ok() const { return status == LoadStatus::kOk; }
};

struct StoredEntryInfo {
  std::uint64_t key = 0;
  std::uint64_t file_bytes = 0;
  std::uint32_t tokens = 0;
};

class KvStore {
 public:
  // Creates `dir` when needed; an InputError names the directory when it cannot be
  // created or written (checked with a probe file). Removes stale temporary files.
  explicit KvStore(std::string dir);

  // Writes the entry atomically and durably; returns the file size. `tokens` are the
  // prefix's token ids (kv.tokens of them). Throws InputError on I/O failure (the old
  // file, if any, is untouched).
  std::uint64_t put(std::uint64_t key, std::span<const std::int32_t> tokens, const KvTensorsView& kv);
  // Maps and validates the entry; a bad file is deleted and reported as a miss.
  LoadResult load(std::uint64_t key) const;
  bool remove(std::uint64_t key) const;
  bool contains(std::uint64_t key) const;
  // Entries present (headers and sizes checked, not checksums), in key order. Files named
  // like entries whose header is not ours are deleted.
  std::vector<StoredEntryInfo> scan() const;

  const std::string& dir() const { return dir_; }
  std::string path_of(std::uint64_t key) const;
  // Size of the file for an entry of this shape.
  static std::uint64_t file_bytes_for(std::uint32_t tokens, std::uint32_t layers, std::uint32_t width,
                                      StoreDType dtype);
  // The file checksum (STORE_FORMAT.md): four interleaved FNV-1a-64 lanes over 8-byte words.
  static std::uint64_t checksum(std::span<const std::byte> bytes);

 private:
  std::string dir_;
};

}  // namespace mobisim::policies::kvcache
