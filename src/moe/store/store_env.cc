#include "moe/store/store_env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace moe {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

Status os_error(const std::string& what, const std::string& path, int err) {
  return internal_error(what + " " + path + ": " + errno_text(err));
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override { (void)close(); }

  Status append(const void* data, size_t size) override {
    if (fd_ < 0) return failed_precondition("append to closed file " + path_);
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd_, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        return os_error("cannot write", path_, errno);
      }
      if (n == 0) return internal_error("cannot write " + path_ + ": write returned 0");
      p += n;
      size -= static_cast<size_t>(n);
    }
    return ok_status();
  }

  Status sync() override {
    if (fd_ < 0) return failed_precondition("sync of closed file " + path_);
    while (::fsync(fd_) != 0) {
      if (errno != EINTR) return os_error("cannot fsync", path_, errno);
    }
    return ok_status();
  }

  Status close() override {
    if (fd_ < 0) return ok_status();
    int fd = fd_;
    fd_ = -1;
    // close(2) must not be retried on EINTR (Linux releases the fd anyway).
    if (::close(fd) != 0 && errno != EINTR) return os_error("cannot close", path_, errno);
    return ok_status();
  }

  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
};

class PosixStoreEnv final : public StoreEnv {
 public:
  StatusOr<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return os_error("cannot create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  Status rename_file(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return internal_error("cannot rename " + from + " to " + to + ": " + errno_text(errno));
    }
    return ok_status();
  }

  Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) {
      int err = errno;
      if (err == ENOENT) return not_found("cannot remove " + path + ": " + errno_text(err));
      return os_error("cannot remove", path, err);
    }
    return ok_status();
  }

  Status create_dirs(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return internal_error("cannot create directory " + path + ": " + ec.message());
    if (!std::filesystem::is_directory(path, ec)) {
      return internal_error("cannot create directory " + path + ": not a directory");
    }
    return ok_status();
  }

  Status sync_dir(const std::string& path) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return os_error("cannot open directory", path, errno);
    int rc;
    while ((rc = ::fsync(fd)) != 0 && errno == EINTR) {
    }
    int err = errno;
    ::close(fd);
    if (rc != 0) return os_error("cannot fsync directory", path, err);
    return ok_status();
  }

  bool file_exists(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }

  StatusOr<std::vector<std::string>> list_dir(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec);
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory) return not_found("no directory " + dir);
      return internal_error("cannot list " + dir + ": " + ec.message());
    }
    std::vector<std::string> names;
    for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      names.push_back(it->path().filename().string());
    }
    if (ec) return internal_error("cannot list " + dir + ": " + ec.message());
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace

StoreEnv& default_store_env() {
  static PosixStoreEnv* env = new PosixStoreEnv();  // never destroyed
  return *env;
}

}  // namespace moe
