// Files: whole-file reads and atomic writes (temp file in the same directory + fsync + rename),
// so that a failed write never leaves a partial file or clobbers what the user saved. Only a
// regular file (or a new path) is replaced; a device or pipe such as /dev/null is written into,
// a directory is refused. An empty path is an error everywhere (it would mean the current
// directory).
#pragma once

#include <string>

#include "base/status.h"

namespace loom {

StatusOr<std::string> ReadFile(const std::string& path);
Status WriteFileAtomic(const std::string& path, const std::string& contents);
bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);
// Creates a directory and its parents (like mkdir -p).
Status MakeDirs(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);

}  // namespace loom
