#include "framework/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace loom {

StatusOr<std::string> ReadFile(const std::string& path) {
  if (path.empty()) return InvalidArgument("an empty path names no file to read");
  if (IsDirectory(path)) return IOError("cannot read '", path, "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return IOError("cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IOError("error reading '", path, "'");
  return ss.str();
}

namespace {

Status WriteAll(int fd, const std::string& path, const std::string& contents) {
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IOError("cannot write '", path, "': ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace

Status WriteFileAtomic(const std::string& path, const std::string& contents) {
  if (path.empty()) return InvalidArgument("an empty path names no file to write");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) return IOError("cannot write '", path, "': it is a directory");
    // A device, a pipe or a socket (/dev/null, /dev/stdout, a FIFO) is written into, never
    // replaced by a regular file.
    int fd = ::open(path.c_str(), O_WRONLY);
    if (fd < 0) return IOError("cannot open '", path, "': ", std::strerror(errno));
    Status written = WriteAll(fd, path, contents);
    ::close(fd);
    return written;
  }
  std::string tmp = StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return IOError("cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return IOError("cannot write '", path, "': ", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return IOError("cannot write '", path, "': ", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return IOError("cannot rename '", tmp, "' to '", path, "': ", err);
  }
  return Status::OK();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status MakeDirs(const std::string& path) {
  if (path.empty()) return InvalidArgument("an empty path names no directory");
  if (IsDirectory(path)) return Status::OK();
  auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0)
    LOOM_RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    return IOError("cannot create directory '", path, "': ", std::strerror(errno));
  if (!IsDirectory(path)) return IOError("'", path, "' exists and is not a directory");
  return Status::OK();
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

namespace {

constexpr const char* kStagingInfix = ".saving.";
constexpr const char* kPreviousSuffix = ".loom-previous";

std::string Errno() { return std::strerror(errno); }

StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return IOError("cannot list '", dir, "': ", Errno());
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

Status SyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IOError("cannot open '", path, "' to sync it: ", Errno());
  const int rc = ::fsync(fd);
  const std::string err = rc != 0 ? Errno() : "";
  ::close(fd);
  if (rc != 0 && errno != EINVAL) return IOError("cannot sync '", path, "': ", err);
  return Status::OK();
}

std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Base(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// `dir` without trailing slashes, and through a symbolic link to a directory.
StatusOr<std::string> Resolve(const std::string& dir) {
  if (dir.empty()) return InvalidArgument("an empty directory name");
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  struct stat st;
  if (::lstat(d.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char buf[PATH_MAX];
    if (::realpath(d.c_str(), buf) == nullptr)
      return IOError("'", dir, "' is a symbolic link that does not resolve: ", Errno());
    d = buf;
  }
  if (::stat(d.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    return IOError("'", dir, "' exists and is not a directory");
  return d;
}

// Links (files), recreates (links, directories: recursively) what `from` holds and `to` does
// not: the entries of the old directory that a save did not write itself.
Status CarryOver(const std::string& from, const std::string& to) {
  LOOM_ASSIGN_OR_RETURN(auto names, ListDir(from));
  for (const auto& name : names) {
    const std::string src = JoinPath(from, name), dst = JoinPath(to, name);
    struct stat st, there;
    if (::lstat(src.c_str(), &st) != 0) continue;  // gone meanwhile
    const bool exists = ::lstat(dst.c_str(), &there) == 0;
    if (S_ISDIR(st.st_mode)) {
      if (exists && !S_ISDIR(there.st_mode)) continue;  // the save wrote a file of that name
      if (!exists && ::mkdir(dst.c_str(), st.st_mode & 07777) != 0)
        return IOError("cannot create '", dst, "': ", Errno());
      LOOM_RETURN_IF_ERROR(CarryOver(src, dst));
      continue;
    }
    if (exists) continue;  // the save's own
    if (S_ISLNK(st.st_mode)) {
      std::vector<char> target(static_cast<size_t>(st.st_size > 0 ? st.st_size : PATH_MAX) + 1);
      ssize_t n = ::readlink(src.c_str(), target.data(), target.size() - 1);
      if (n < 0) return IOError("cannot read the link '", src, "': ", Errno());
      target[static_cast<size_t>(n)] = '\0';
      if (::symlink(target.data(), dst.c_str()) != 0)
        return IOError("cannot create the link '", dst, "': ", Errno());
    } else if (::link(src.c_str(), dst.c_str()) != 0) {
      if (!S_ISREG(st.st_mode))
        return IOError("cannot carry '", src, "' into the new directory: ", Errno());
      LOOM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(src));  // no hard links here: a copy
      LOOM_RETURN_IF_ERROR(WriteFileAtomic(dst, bytes));
    }
  }
  return SyncPath(to);
}

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "host";
  std::string h = buf;
  for (char& c : h)
    if (c == '.' || c == '/') c = '_';
  return h;
}

bool ProcessGone(const std::string& pid_text) {
  char* end = nullptr;
  const long pid = std::strtol(pid_text.c_str(), &end, 10);
  if (end == pid_text.c_str() || pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// Exchanges two paths atomically; false (errno set) where the file system cannot.
bool Exchange(const std::string& a, const std::string& b) {
#if defined(SYS_renameat2) && defined(RENAME_EXCHANGE)
  return ::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0;
#else
  errno = ENOSYS;
  return false;
#endif
}

}  // namespace

Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Status::OK();
  if (S_ISDIR(st.st_mode)) {
    LOOM_ASSIGN_OR_RETURN(auto names, ListDir(path));
    for (const auto& name : names) LOOM_RETURN_IF_ERROR(RemoveTree(JoinPath(path, name)));
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT)
      return IOError("cannot remove '", path, "': ", Errno());
    return Status::OK();
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return IOError("cannot remove '", path, "': ", Errno());
  return Status::OK();
}

Status RecoverDirectory(const std::string& dir) {
  LOOM_ASSIGN_OR_RETURN(std::string d, Resolve(dir));
  const std::string previous = d + kPreviousSuffix;
  if (!IsDirectory(d) && IsDirectory(previous)) {
    if (::rename(previous.c_str(), d.c_str()) != 0)
      return IOError("cannot put back '", previous, "' (the contents of '", dir,
                     "' before an interrupted save): ", Errno());
  } else if (IsDirectory(d) && IsDirectory(previous)) {
    LOOM_RETURN_IF_ERROR(RemoveTree(previous));  // the save after it completed
  }
  // Staging directories of this machine's processes that are gone (another machine's, on a
  // shared file system, are left to it).
  const std::string parent = Parent(d), prefix = StrCat(Base(d), kStagingInfix, HostName(), ".");
  auto names = ListDir(parent);
  if (!names.ok()) return Status::OK();  // nothing to clean where nothing can be listed
  for (const auto& name : *names) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    if (ProcessGone(rest.substr(0, rest.find('.'))))
      LOOM_RETURN_IF_ERROR(RemoveTree(JoinPath(parent, name)));
  }
  return Status::OK();
}

StatusOr<std::string> StageDirectory(const std::string& dir) {
  LOOM_ASSIGN_OR_RETURN(std::string d, Resolve(dir));
  LOOM_RETURN_IF_ERROR(MakeDirs(Parent(d)));
  LOOM_RETURN_IF_ERROR(RecoverDirectory(d));
  static std::atomic<uint64_t> counter{0};
  for (;;) {
    std::string staging = StrCat(d, kStagingInfix, HostName(), ".", ::getpid(), ".", counter++);
    if (::mkdir(staging.c_str(), 0755) == 0) return staging;
    if (errno != EEXIST) return IOError("cannot create '", staging, "': ", Errno());
  }
}

void DiscardDirectory(const std::string& staging) { (void)RemoveTree(staging); }

Status CommitDirectory(const std::string& staging, const std::string& dir) {
  LOOM_ASSIGN_OR_RETURN(std::string d, Resolve(dir));
  const std::string parent = Parent(d);
  if (!IsDirectory(d)) {
    LOOM_RETURN_IF_ERROR(SyncPath(staging));
    if (::rename(staging.c_str(), d.c_str()) != 0)
      return IOError("cannot move '", staging, "' to '", dir, "': ", Errno());
    return SyncPath(parent);
  }
  LOOM_RETURN_IF_ERROR(CarryOver(d, staging));
  if (Exchange(staging, d)) {
    LOOM_RETURN_IF_ERROR(SyncPath(parent));
    return RemoveTree(staging);  // the old contents now
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP && errno != EOPNOTSUPP)
    return IOError("cannot swap '", staging, "' in for '", dir, "': ", Errno());
  // No atomic exchange on this file system: two renames; RecoverDirectory undoes a crash
  // between them.
  const std::string previous = d + kPreviousSuffix;
  LOOM_RETURN_IF_ERROR(RemoveTree(previous));
  if (::rename(d.c_str(), previous.c_str()) != 0)
    return IOError("cannot move '", dir, "' aside to '", previous, "': ", Errno());
  if (::rename(staging.c_str(), d.c_str()) != 0) {
    const std::string err = Errno();
    (void)::rename(previous.c_str(), d.c_str());
    return IOError("cannot move '", staging, "' to '", dir, "': ", err);
  }
  LOOM_RETURN_IF_ERROR(SyncPath(parent));
  return RemoveTree(previous);
}

Status ReplaceDirectory(const std::string& dir,
                        const std::function<Status(const std::string& staging)>& fill) {
  LOOM_ASSIGN_OR_RETURN(std::string staging, StageDirectory(dir));
  Status st = fill(staging);
  if (st.ok()) st = CommitDirectory(staging, dir);
  if (!st.ok()) DiscardDirectory(staging);
  return st;
}

}  // namespace loom
