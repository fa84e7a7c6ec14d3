// Fuzz target: the experiment config loader (YAML -> validated experiment, `mobisim validate`).
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>

#include "experiments/experiment.h"
#include "fuzz/fuzz_util.h"
#include "sim/error.h"

using namespace mobisim;
using mobisim::experiments::RunOptions;
using mobisim::experiments::run_experiment;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::seeds_mode([](const std::string& dir) {
    // Every experiment config shipped in the repository (MOBISIM_SOURCE_DIR is set by CMake).
    for (const auto& e : std::filesystem::recursive_directory_iterator(MOBISIM_SOURCE_DIR "/experiments"))
      if (e.path().extension() == ".yaml") {
        std::string name = std::filesystem::relative(e.path(), MOBISIM_SOURCE_DIR).string();
        for (char& c : name)
          if (c == '/') c = '_';
        fuzz::write_seed(dir, name, fuzz::slurp(e.path().string()));
      }
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception&) {
    return 0;  // malformed YAML: the CLI reports it as a config error
  }
  RunOptions opt;
  opt.validate_only = true;
  opt.quiet = true;
  opt.no_plot = true;
  opt.output_override = fuzz::scratch_dir() + "/out.h5";
  try {
    run_experiment(root, "fuzz.yaml", opt);
  } catch (const Error&) {
  } catch (const YAML::Exception&) {
  }
  return 0;
}
