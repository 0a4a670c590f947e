#include "moe/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace moe {
namespace {

std::string os_error(const std::string& what, const std::string& path, int err) {
  return "cannot " + what + " " + path + ": " + std::strerror(err);
}

// The directory part of `path` ("." when there is none), for the fsync after rename.
std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status write_all(int fd, std::string_view bytes, const std::string& tmp) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return internal_error(os_error("write", tmp, errno));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return ok_status();
}

}  // namespace

Status write_file_atomically(const std::string& path, std::string_view contents) {
  if (path.empty()) return invalid_argument("write_file_atomically: empty path");
  static std::atomic<unsigned> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) return internal_error(os_error("create", tmp, errno));
  }
  if (fd < 0) return internal_error(os_error("create", tmp, EEXIST));

  Status st = write_all(fd, contents, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = internal_error(os_error("fsync", tmp, errno));
  if (::close(fd) != 0 && st.ok()) st = internal_error(os_error("close", tmp, errno));
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = internal_error(os_error("rename " + tmp + " over", path, errno));
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // Make the rename itself durable. A directory that cannot be opened or synced (some
  // file systems) leaves the new file in place, so this is best effort.
  const int dir_fd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
  return ok_status();
}

}  // namespace moe
