// A read-only memory-mapped file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "moe/status.h"

namespace moe {

class MappedFile {
 public:
  // Maps `path` read-only. NotFound if it does not exist, InvalidArgument if it is a
  // directory, Internal for other OS errors; the message names the path.
  static StatusOr<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Takes the mapping's pages out of this process's resident set (madvise MADV_DONTNEED):
  // they stay in the page cache, and a later read faults them back in with the same
  // bytes (the mapping is private and never written). For a file whose bytes were copied
  // elsewhere (model/weights_relocate.h), so they are not counted twice in RSS.
  void drop_resident_pages() const;
  const std::string& path() const { return path_; }

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) text file. NotFound / Internal naming the path.
StatusOr<std::string> read_text_file(const std::string& path);

}  // namespace moe
