#pragma once
// Inputs an experiment file needs before it can be resolved: the QMSum trace most document
// experiments replay (`experiment.workload.trace`), imported on first use from the shared data
// folder. Used by `mobisim reproduce` and `mobisim fidelity`.
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "sim/params.h"

namespace mobisim::experiments {

// A workload generator's config as an experiment gives it (a RAG workload's `generate:`, a CAG
// workload's `synthetic:`): a mapping, the name of a config in configs/workloads/ (or a YAML path),
// or `{base: NAME, key: V, ...}` (what `-p ...generate.key=V` makes of a name, and what
// `mobisim calibrate` writes for a fitted workload). ConfigError naming `source` for an unknown name.
struct ResolvedWorkload {
  YAML::Node config;    // the mapping, its `base:` chain merged (the later keys win)
  std::string origin;   // the named config's origin ("builtin:workloads/x.yaml" or its path), else the key path
  ConfigSource source;  // where its keys come from, for validating them (the named file, else `source`)
};
ResolvedWorkload resolve_workload_config(const YAML::Node& node, const ConfigSource& source);

// The folder holding data/ and models/: `flag` when given, else $MOBISIM_SHARED_DIR, else
// <source>/../shared.
std::string shared_dir(const std::string& flag);
// A path from an experiment file with a leading "{shared}" replaced by shared_dir(""), so that
// `tokenizer: "{shared}/models/llama2-tokenizer.model"` works from any working directory (the
// commands' --shared reaches child runs through $MOBISIM_SHARED_DIR); other paths unchanged.
std::string expand_shared(const std::string& path);
// Sets $MOBISIM_SHARED_DIR to the absolute form of a command's --shared DIR (when given), before
// the command starts any thread or child, so every run it starts resolves {shared} there.
void export_shared_flag(const std::string& flag);
// experiment.workload.trace of an experiment file, or "" (read without inserting keys).
std::string workload_trace(const YAML::Node& root, const std::string& origin);
// Imports <shared>/data/qmsum (val split, Llama-2 tokenizer when present) into `trace_path` when
// that file is missing; InputError naming both when the data is absent.
void ensure_qmsum_trace(const std::string& trace_path, const std::string& shared);

// The CAG request files CoordGen's `reproduce` replays: {ui,tweet,summary}_stories260K.jsonl in `dir`,
// made by the real transformer from <shared>/models/stories260K.bin when missing (derived from the
// shared checkpoint, so never committed). The options are kExampleRequests'; InputError when the
// checkpoint is absent. `tasks` (empty: all of kExampleRequests) limits it to those tasks' files, for
// callers that replay only some (each file costs a transformer run); a task not in kExampleRequests is
// an InputError.
struct ExampleRequests {
  const char* task;
  int context_tokens, output_tokens;
};
inline constexpr ExampleRequests kExampleRequests[] = {{"ui", 96, 24}, {"tweet", 96, 24}, {"summary", 200, 96}};
inline constexpr int kExampleRequestUsers = 3, kExampleRequestsPerUser = 4;
void ensure_example_requests(const std::string& dir, const std::string& shared,
                             const std::vector<std::string>& tasks = {});

}  // namespace mobisim::experiments
