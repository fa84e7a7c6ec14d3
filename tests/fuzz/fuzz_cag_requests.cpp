// Fuzz target: CAG request files (traces/cag_requests.h), JSONL text and HDF5 files.
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include "sim/error.h"
#include "traces/cag_requests.h"

using namespace mobisim;

namespace {

traces::CagRequestFile seed_file() {
  traces::CagRequestFile f;
  f.source = "fuzz seed";
  f.vocab = 40;
  traces::CagRequestRecord r;
  r.user_id = "u0";
  r.task = "ui";
  r.context = {1, 5, 6, 5, 6};
  r.instruction = {7};
  r.output = {5, 6, 8};
  for (int p = 0; p < 6; ++p) {
    r.top_ids.push_back({p + 2, p + 3});
    r.top_probs.push_back({0.5f, 0.25f});
  }
  f.requests = {r};
  r.top_ids.clear();
  r.top_probs.clear();
  r.user_id = "u1";
  f.requests.push_back(r);
  return f;
}

// The same file without its 512-byte user block (a plain HDF5 file, as h5py writes them).
std::string without_user_block(const std::string& bytes) { return bytes.size() > 512 ? bytes.substr(512) : bytes; }

void make_seeds(const std::string& dir) {
  const auto f = seed_file();
  fuzz::write_seed(dir, "requests.jsonl", "J" + traces::cag_requests_to_jsonl(f));  // 'J' is even: JSONL
  const std::string h5 = fuzz::scratch_dir() + "/seed.h5";
  traces::write_cag_requests(h5, f);
  fuzz::write_seed(dir, "requests.h5", "K" + fuzz::slurp(h5));  // 'K' is odd: HDF5
  fuzz::write_seed(dir, "requests_plain.h5", "K" + without_user_block(fuzz::slurp(h5)));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::seeds_mode(make_seeds);
  return 0;
}

// The first byte picks the encoding (even: JSONL text, odd: an HDF5 file); the rest is the input.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  try {
    if (data[0] % 2 == 0) {
      traces::read_cag_requests_jsonl_text(std::string(reinterpret_cast<const char*>(data + 1), size - 1), "fuzz.jsonl");
    } else {
      traces::read_cag_requests(fuzz::write_scratch("input.h5", data + 1, size - 1));
    }
  } catch (const Error&) {
  }
  return 0;
}
