// Measured save/load throughput of the real prefix KV store (policies/kvcache/kv_store.h) on
// this machine, beside the modelled phone storage times for the same bytes.
//
// The entry is the note's 180-token prefix of the generic 3B model: K and V of
// [32 layers, 180 tokens, 2560] fp16 = 58,982,400 bytes (the note says 74 MB).
//   BM_KvStorePut        write + fsync + rename + directory fsync (an acknowledged entry)
//   BM_KvStoreLoadWarm   mmap + full validation (checksum touches every page), page cache warm
//   BM_KvStoreLoadCold   the same after POSIX_FADV_DONTNEED dropped the file's cached pages
// The label carries the modelled read time of those bytes on UFS 2.1 and on the iPhone's NVMe.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>

#include "devices/device.h"
#include "policies/kvcache/kv_store.h"
#include "sim/rng.h"

namespace {

using namespace mobisim;
using policies::kvcache::KvStore;
using policies::kvcache::KvTensorsView;
using policies::kvcache::StoreDType;

constexpr std::uint32_t kLayers = 32, kTokens = 180, kWidth = 2560;

struct Fixture {
  std::string dir;
  std::vector<std::int32_t> tokens;
  std::vector<std::byte> k, v;
  KvTensorsView view;
  Fixture() {
    dir = (std::filesystem::temp_directory_path() / fmt::format("mobisim_bench_kvstore_{}", ::getpid())).string();
    sim::Rng rng(42);
    for (std::uint32_t i = 0; i < kTokens; ++i) tokens.push_back(static_cast<std::int32_t>(rng.uniform_int(50000)));
    const std::size_t n = std::size_t{kLayers} * kTokens * kWidth * 2;
    k.resize(n);
    v.resize(n);
    for (std::size_t i = 0; i < n; i += 8) {
      const auto x = rng.next_u64();
      for (std::size_t j = 0; j < 8 && i + j < n; ++j) {
        k[i + j] = static_cast<std::byte>(x >> (8 * j));
        v[i + j] = static_cast<std::byte>(~x >> (8 * j));
      }
    }
    view = {StoreDType::kF16, kLayers, kTokens, kWidth, k, v};
  }
  ~Fixture() { std::filesystem::remove_all(dir); }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

std::string modelled_label(double bytes) {
  const auto ufs = devices::load_device_profile("midtier-android-ufs21").require_storage("bench");
  const auto nvme = devices::load_device_profile("iphone-14-pro").require_storage("bench");
  return fmt::format("{:.1f} MB; modelled read: UFS 2.1 {:.1f} ms, iPhone NVMe {:.1f} ms", bytes / 1e6,
                     ufs.read_seconds(bytes) * 1e3, nvme.read_seconds(bytes) * 1e3);
}

void BM_KvStorePut(benchmark::State& state) {
  auto& f = fixture();
  KvStore store(f.dir);
  std::uint64_t bytes = 0, key = 1;
  for (auto _ : state) bytes = store.put(key++ % 4, f.tokens, f.view);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.SetLabel(modelled_label(static_cast<double>(bytes)));
}
BENCHMARK(BM_KvStorePut)->Unit(benchmark::kMillisecond)->UseRealTime();

void load_bench(benchmark::State& state, bool cold) {
  auto& f = fixture();
  KvStore store(f.dir);
  const std::uint64_t bytes = store.put(100, f.tokens, f.view);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      const int fd = ::open(store.path_of(100).c_str(), O_RDONLY);
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
      state.ResumeTiming();
    }
    auto r = store.load(100);
    if (!r.ok()) state.SkipWithError(r.reason.c_str());
    benchmark::DoNotOptimize(r.entry->kv.k.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.SetLabel(modelled_label(static_cast<double>(bytes)));
}
void BM_KvStoreLoadWarm(benchmark::State& state) { load_bench(state, false); }
void BM_KvStoreLoadCold(benchmark::State& state) { load_bench(state, true); }
BENCHMARK(BM_KvStoreLoadWarm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KvStoreLoadCold)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
