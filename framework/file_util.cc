#include "framework/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

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

}  // namespace loom
