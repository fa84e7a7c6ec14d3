#pragma once
// Whole-file writes that never leave a partial file: write `<path>.tmp-<pid>`, fsync, rename.
#include <string>
#include <string_view>

namespace mobisim {

void write_file_atomic(const std::string& path, std::string_view content);
std::string read_file(const std::string& path);  // InputError when unreadable

}  // namespace mobisim
