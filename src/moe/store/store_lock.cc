#include "moe/store/store_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "moe/store/store_layout.h"

namespace moe {

namespace {

// The pid written in LOCK by its holder, or "unknown" if none can be read.
std::string read_holder_pid(int fd) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return "unknown";
  return text;
}

}  // namespace

StatusOr<StoreLock> StoreLock::acquire(const std::string& store) {
  const std::string path = store_lock_path(store);
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return internal_error("cannot create the store lock " + path + ": " + std::strerror(errno));
  int rc;
  while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    int err = errno;
    std::string pid = err == EWOULDBLOCK ? read_holder_pid(fd) : "";
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return failed_precondition("store " + store + " is busy: another save or gc (pid " + pid + ") holds " + path);
    }
    return internal_error("cannot lock " + path + ": " + std::strerror(err));
  }
  // We hold it: record our pid for whoever finds it held.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    int err = errno;
    ::close(fd);
    return internal_error("cannot write the pid into " + path + ": " + std::strerror(err));
  }
  StoreLock lock;
  lock.fd_ = fd;
  return lock;
}

StoreLock::StoreLock(StoreLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

StoreLock& StoreLock::operator=(StoreLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

StoreLock::~StoreLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace moe
