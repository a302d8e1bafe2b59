// Files: whole-file reads and atomic writes (temp file in the same directory + fsync + rename),
// so that a failed write never leaves a partial file or clobbers what the user saved. Only a
// regular file (or a new path) is replaced; a device or pipe such as /dev/null is written into,
// a directory is refused. An empty path is an error everywhere (it would mean the current
// directory).
#pragma once

#include <functional>
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

// Directories written as a whole (a checkpoint, an inference model): the previous contents
// stay readable until the new ones are complete. `fill` writes the new contents into a fresh
// staging directory beside `dir` (DIR.saving.HOST.PID.N); every entry of the old `dir` that `fill`
// did not write (a parameter server's pserver_<id>, a file of the user's) is carried over as
// a hard link; the staging directory is synced and swapped in with one atomic exchange
// (renameat2 RENAME_EXCHANGE; where the file system lacks it, two renames through
// DIR.loom-previous, which RecoverDirectory undoes after a crash between them); then the old
// contents are removed. A failed `fill` removes the staging directory and leaves `dir` as it
// was. `dir`'s parents are created; a symbolic link to a directory is followed.
Status ReplaceDirectory(const std::string& dir,
                        const std::function<Status(const std::string& staging)>& fill);

// The two halves of ReplaceDirectory, for writers that fill the staging directory themselves
// (Python's save_inference_model): StageDirectory makes it, CommitDirectory swaps it in (it is
// gone afterwards, as is the old contents), DiscardDirectory removes it.
StatusOr<std::string> StageDirectory(const std::string& dir);
Status CommitDirectory(const std::string& staging, const std::string& dir);
void DiscardDirectory(const std::string& staging);

// Puts back DIR.loom-previous when `dir` is missing (a crash between the two renames of the
// fallback), and removes the staging directories of this machine's processes that are gone.
Status RecoverDirectory(const std::string& dir);

// Removes a file or a directory tree (no error when it does not exist).
Status RemoveTree(const std::string& path);

}  // namespace loom
