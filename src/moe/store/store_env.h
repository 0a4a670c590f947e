// File-system access of the checkpoint store, injectable (LevelDB's Env): the store
// writes only through a StoreEnv, so tests can make writes fail (faulty_store_env.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe {

// A file being written. Not thread-safe. Errors name the path and the OS reason
// (e.g. "No space left on device").
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status append(const void* data, size_t size) = 0;
  virtual Status sync() = 0;   // fsync
  virtual Status close() = 0;  // idempotent; the destructor closes without syncing
  virtual const std::string& path() const = 0;
};

class StoreEnv {
 public:
  virtual ~StoreEnv() = default;
  // Creates (truncating) `path`. Internal naming the path and errno text.
  virtual StatusOr<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) = 0;
  // rename(2): atomic replace on POSIX.
  virtual Status rename_file(const std::string& from, const std::string& to) = 0;
  virtual Status remove_file(const std::string& path) = 0;
  // mkdir -p. Internal naming the directory if it cannot be created.
  virtual Status create_dirs(const std::string& path) = 0;
  // fsync of a directory, so a rename in it is durable.
  virtual Status sync_dir(const std::string& path) = 0;
  virtual bool file_exists(const std::string& path) = 0;
  // Names (not paths) of the entries of `dir`, sorted. NotFound if `dir` is missing.
  virtual StatusOr<std::vector<std::string>> list_dir(const std::string& dir) = 0;
};

// The real file system. Thread-safe (stateless). Never destroyed.
StoreEnv& default_store_env();

}  // namespace moe
