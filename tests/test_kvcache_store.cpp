// The real on-disk KV store: round trip, the documented header bytes, corrupt / truncated /
// foreign files (miss + evict, never wrong K/V), unwritable directories, and a writer killed
// mid-write (every acknowledged entry loads, no torn entry is served).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "policies/kvcache/fingerprint.h"
#include "policies/kvcache/kv_store.h"
#include "policies/kvcache/prefix_cache.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/rng.h"

namespace mobisim::policies::kvcache {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = (fs::temp_directory_path() /
            (std::string("mobisim_kv_") + info->name() + "_" + std::to_string(::getpid())))
               .string();
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

// Deterministic contents of an entry, derived from its key.
struct Blob {
  std::vector<std::int32_t> tokens;
  std::vector<std::byte> k, v;
  KvTensorsView view() const {
    KvTensorsView w;
    w.dtype = StoreDType::kF16;
    w.layers = 4;
    w.tokens = static_cast<std::uint32_t>(tokens.size());
    w.width = static_cast<std::uint32_t>(k.size() / (4 * tokens.size() * 2));
    w.k = k;
    w.v = v;
    return w;
  }
};
Blob make_blob(std::uint64_t key, std::uint32_t tokens, std::uint32_t width) {
  Blob b;
  sim::Rng rng(key);
  for (std::uint32_t i = 0; i < tokens; ++i) b.tokens.push_back(static_cast<std::int32_t>(rng.uniform_int(50000)));
  const std::size_t n = std::size_t{4} * tokens * width * 2;
  b.k.resize(n);
  b.v.resize(n);
  for (auto& x : b.k) x = static_cast<std::byte>(rng.next_u64());
  for (auto& x : b.v) x = static_cast<std::byte>(rng.next_u64());
  return b;
}
bool same(const MappedEntry& e, const Blob& b) {
  return std::equal(e.tokens.begin(), e.tokens.end(), b.tokens.begin(), b.tokens.end()) &&
         std::equal(e.kv.k.begin(), e.kv.k.end(), b.k.begin(), b.k.end()) &&
         std::equal(e.kv.v.begin(), e.kv.v.end(), b.v.begin(), b.v.end());
}

TEST(KvCacheStore, RoundTripAndDocumentedLayout) {
  TempDir d;
  KvStore store(d.path);
  const Blob b = make_blob(7, 20, 24);
  const auto bytes = store.put(0xabcdef, b.tokens, b.view());
  EXPECT_EQ(bytes, KvStore::file_bytes_for(20, 4, 24, StoreDType::kF16));
  EXPECT_EQ(fs::file_size(store.path_of(0xabcdef)), bytes);
  const auto r = store.load(0xabcdef);
  ASSERT_TRUE(r.ok()) << r.reason;
  EXPECT_TRUE(same(*r.entry, b));
  EXPECT_EQ(r.entry->kv.layers, 4u);
  EXPECT_EQ(r.entry->kv.tokens, 20u);
  EXPECT_EQ(r.entry->kv.width, 24u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r.entry->kv.k.data()) % 16, 0u);  // aligned tensor data
  // STORE_FORMAT.md: file magic, then the first 12-byte tensor header at offset 36:
  // 'K' 'V', version 1, dtype 3 (i32), shape [20, 1, 1, 1] as little-endian u16.
  std::ifstream f(store.path_of(0xabcdef), std::ios::binary);
  std::vector<unsigned char> head(48);
  f.read(reinterpret_cast<char*>(head.data()), 48);
  EXPECT_EQ(std::string(head.begin(), head.begin() + 8), "MSKVSTOR");
  const unsigned char th[12] = {'K', 'V', 1, 3, 20, 0, 1, 0, 1, 0, 1, 0};
  EXPECT_EQ(std::memcmp(head.data() + 36, th, 12), 0);
  // The checksum: four lanes over 8-byte words; a one-byte change anywhere changes it.
  std::vector<std::byte> x(100, std::byte{1});
  const auto c0 = KvStore::checksum(x);
  x[77] = std::byte{2};
  EXPECT_NE(KvStore::checksum(x), c0);
  EXPECT_EQ(store.scan().size(), 1u);
  EXPECT_EQ(store.load(0x1234).status, LoadStatus::kMissing);
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(KvCacheStore, CorruptTruncatedForeignFilesAreMissesAndEvicted) {
  TempDir d;
  KvStore store(d.path);
  const Blob b = make_blob(1, 16, 8);
  // Corrupt: one byte inside V.
  store.put(1, b.tokens, b.view());
  flip_byte(store.path_of(1), fs::file_size(store.path_of(1)) - 40);
  auto r = store.load(1);
  EXPECT_EQ(r.status, LoadStatus::kCorrupt) << r.reason;
  EXPECT_FALSE(r.entry);
  EXPECT_FALSE(fs::exists(store.path_of(1)));  // evicted
  // Truncated: the last 100 bytes lost.
  store.put(2, b.tokens, b.view());
  fs::resize_file(store.path_of(2), fs::file_size(store.path_of(2)) - 100);
  EXPECT_EQ(store.load(2).status, LoadStatus::kTruncated);
  EXPECT_FALSE(fs::exists(store.path_of(2)));
  // Truncated to nothing.
  store.put(3, b.tokens, b.view());
  fs::resize_file(store.path_of(3), 0);
  EXPECT_EQ(store.load(3).status, LoadStatus::kTruncated);
  // Foreign: someone else's file under an entry name, and an entry copied under another key.
  {
    std::ofstream f(store.path_of(4), std::ios::binary);
    f << std::string(4096, 'x');
  }
  EXPECT_EQ(store.load(4).status, LoadStatus::kForeign);
  EXPECT_FALSE(fs::exists(store.path_of(4)));
  store.put(5, b.tokens, b.view());
  fs::copy_file(store.path_of(5), store.path_of(6));
  EXPECT_EQ(store.load(6).status, LoadStatus::kForeign);
  EXPECT_TRUE(store.load(5).ok());
  // Through the prefix cache: a corrupt longest prefix is evicted and the next shorter one serves.
  PrefixCacheConfig c;
  c.granularities = {8, 16};
  c.cap_bytes = 1e9;
  c.bytes_per_token = 1;
  PrefixCache cache(c, Registry<EvictionPolicy>::instance().create(YAML::Node("lru"), ConfigSource{}), &store);
  EXPECT_EQ(cache.size(), 1u);  // the index rebuilt from the files present (entry 5)
  const Blob p = make_blob(9, 16, 8);
  auto provider = [&](std::int64_t g) {
    const Blob sub = make_blob(9, static_cast<std::uint32_t>(g), 8);
    static thread_local Blob keep;
    keep = sub;
    keep.tokens.assign(p.tokens.begin(), p.tokens.begin() + g);
    return keep.view();
  };
  cache.insert(p.tokens, 0, provider);
  const std::uint64_t k16 = fingerprint(p.tokens);
  flip_byte(store.path_of(k16), 60);
  const auto hit = cache.lookup(p.tokens, 1);
  EXPECT_EQ(hit.status, LookupStatus::kHit);
  EXPECT_EQ(hit.matched_tokens, 8);
  EXPECT_EQ(hit.bad_files_evicted, 1);
  ASSERT_TRUE(hit.entry);
  EXPECT_EQ(hit.entry->tokens.size(), 8u);
  EXPECT_TRUE(std::equal(hit.entry->tokens.begin(), hit.entry->tokens.end(), p.tokens.begin()));
  EXPECT_FALSE(fs::exists(store.path_of(k16)));
}

TEST(KvCacheStore, UnwritableDirectoryIsAClearError) {
  TempDir d;
  fs::create_directories(d.path);
  const std::string file = d.path + "/plain_file";
  std::ofstream(file) << "x";
  try {
    KvStore store(file + "/store");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  if (::geteuid() != 0) {
    const std::string ro = d.path + "/readonly";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(KvStore(ro + "/"), InputError);
    fs::permissions(ro, fs::perms::owner_all);
  } else if (fs::exists("/proc/self")) {
    // root ignores permission bits; /proc refuses new files for everyone.
    EXPECT_THROW(KvStore("/proc/self"), InputError);
  }
  EXPECT_THROW(KvStore(""), InputError);
}

TEST(KvCacheStore, WriterKilledMidWriteLosesNoAcknowledgedEntry) {
  TempDir d;
  { KvStore init(d.path); }
  for (int round = 0; round < 3; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      KvStore store(d.path);
      for (std::uint64_t i = 0;; ++i) {
        const std::uint64_t key = (static_cast<std::uint64_t>(round) << 32) | i;
        const Blob b = make_blob(key, 64, 2048);  // 2 MB per entry
        store.put(key, b.tokens, b.view());
        // Acknowledged only once put() returned (renamed and synced).
        if (::write(fds[1], &key, sizeof key) != sizeof key) ::_exit(3);
      }
    }
    ::close(fds[1]);
    std::vector<std::uint64_t> acked;
    std::uint64_t key;
    while (acked.size() < 3 && ::read(fds[0], &key, sizeof key) == sizeof key) acked.push_back(key);
    std::this_thread::sleep_for(std::chrono::microseconds(700 * (round + 1)));  // land inside a write
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status));
    while (::read(fds[0], &key, sizeof key) == sizeof key) acked.push_back(key);
    ::close(fds[0]);
    ASSERT_GE(acked.size(), 3u);
    // Restart: stale temporary files go, every acknowledged entry loads intact.
    KvStore store(d.path);
    for (const auto& e : fs::directory_iterator(d.path))
      EXPECT_EQ(e.path().filename().string().find(".kv.tmp-"), std::string::npos) << e.path();
    for (auto k : acked) {
      const auto r = store.load(k);
      ASSERT_TRUE(r.ok()) << "acknowledged entry " << k << ": " << r.reason;
      EXPECT_TRUE(same(*r.entry, make_blob(k, 64, 2048)));
    }
    // Whatever else is there is either whole and right, or not served.
    for (const auto& info : store.scan()) {
      const auto r = store.load(info.key);
      if (r.ok()) {
        EXPECT_TRUE(same(*r.entry, make_blob(info.key, 64, 2048))) << info.key;
      }
    }
  }
}

}  // namespace
}  // namespace mobisim::policies::kvcache
