// Fuzz target: the KV store reader (policies/kvcache/kv_store.h): an entry file of any bytes must
// load as a validated entry or be a miss; it must never be served wrong or crash the reader.
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "policies/kvcache/kv_store.h"
#include "sim/error.h"

using namespace mobisim;
using policies::kvcache::KvStore;

namespace {
constexpr std::uint64_t kKey = 0x1234;

std::string store_dir() { return fuzz::scratch_dir() + "/store"; }
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::seeds_mode([](const std::string& dir) {
    KvStore store(store_dir());
    for (auto [tokens, dtype] : {std::pair{3u, policies::kvcache::StoreDType::kF16},
                                 std::pair{5u, policies::kvcache::StoreDType::kF32}}) {
      policies::kvcache::KvTensorsView kv;
      kv.dtype = dtype;
      kv.layers = 2;
      kv.tokens = tokens;
      kv.width = 4;
      std::vector<std::byte> k(kv.tensor_bytes()), v(kv.tensor_bytes());
      for (std::size_t i = 0; i < k.size(); ++i) k[i] = v[k.size() - 1 - i] = static_cast<std::byte>(i * 7);
      kv.k = k;
      kv.v = v;
      std::vector<std::int32_t> ids(tokens);
      for (std::uint32_t i = 0; i < tokens; ++i) ids[i] = static_cast<std::int32_t>(i + 10);
      store.put(kKey, ids, kv);
      fuzz::write_seed(dir, "entry_" + std::to_string(tokens) + ".kv", fuzz::slurp(store.path_of(kKey)));
    }
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    static const KvStore store(store_dir());
    std::filesystem::create_directories(store_dir());
    fuzz::write_scratch("store/" + std::filesystem::path(store.path_of(kKey)).filename().string(), data, size);
    auto r = store.load(kKey);
    if (r.ok()) {
      // A served entry must be self-consistent: touch every byte it claims.
      unsigned sum = 0;
      for (auto t : r.entry->tokens) sum += static_cast<unsigned>(t);
      for (auto b : r.entry->kv.k) sum += static_cast<unsigned>(b);
      for (auto b : r.entry->kv.v) sum += static_cast<unsigned>(b);
      if (r.entry->kv.k.size() != r.entry->kv.tensor_bytes()) __builtin_trap();
      (void)sum;
    }
  } catch (const Error&) {
  }
  return 0;
}
