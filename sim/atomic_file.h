#pragma once
// Whole-file writes that never leave a partial file: write `<path>.tmp-<pid>`, fsync, rename.
// A writer killed before the rename leaves its temporary behind; the next write of the same target
// (any process) removes temporaries whose pid is no longer alive.
#include <string>
#include <string_view>

namespace mobisim {

void write_file_atomic(const std::string& path, std::string_view content);
std::string read_file(const std::string& path);  // InputError when unreadable
// Whether `path` names an existing object / a regular file / a directory. False, never an
// exception, for a name the system refuses (too long, a component that is not a directory): paths
// come from configs and command lines, and such a name then reads as missing, with the caller's
// error naming it.
bool path_exists(const std::string& path);
bool is_file(const std::string& path);
bool is_dir(const std::string& path);
// Creates `dir` and its parents; Error naming it and the system's reason when that fails (a name
// too long, a file in the way, no permission), never std::filesystem's exception.
void create_dirs(const std::string& dir);

// `<path>.tmp-<pid of this process>`.
std::string temp_path_for(const std::string& path);
// Removes `<path>.tmp-<pid>` files whose process is gone; returns how many were removed.
int remove_stale_temps(const std::string& path);
// fsyncs the directory holding `path`, so a rename into it is durable (best effort).
void sync_parent_dir(const std::string& path);

}  // namespace mobisim
