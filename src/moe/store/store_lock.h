// The store's writer lock: one save or gc at a time per store (flock on STORE/LOCK, so
// it is released if the process dies). Readers do not take it: they read whole
// committed versions only.
#pragma once

#include <string>

#include "moe/status.h"

namespace moe {

class StoreLock {
 public:
  // Takes the lock without waiting. FailedPrecondition naming the store and the pid
  // written in LOCK by the holder ("another save or gc (pid N) holds STORE/LOCK") if
  // it is held; Internal naming the path if LOCK cannot be created (e.g. unwritable).
  static StatusOr<StoreLock> acquire(const std::string& store);

  StoreLock() = default;
  StoreLock(StoreLock&& other) noexcept;
  StoreLock& operator=(StoreLock&& other) noexcept;
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;
  ~StoreLock();  // releases

 private:
  int fd_ = -1;
};

}  // namespace moe
