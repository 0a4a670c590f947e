// Reader for the safetensors format (Hugging Face), memory-mapped, zero-copy.
//
// Layout: u64 little-endian header length N, N bytes of JSON
//   {name: {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {...}}
// then the raw little-endian data; offsets are relative to the end of the header.
// Spec: https://github.com/huggingface/safetensors (format section).
//
// open() validates everything before any tensor is used: header length within the file,
// JSON well-formed, every dtype known, byte span == numel * element size, every span
// inside the data section, no two spans overlapping. Errors name the file and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "moe/core/mapped_file.h"
#include "moe/status.h"
#include "moe/tensor/dtype.h"

namespace moe {

// A tensor inside a mapped file. `data` stays valid while the owning file lives.
struct StoredTensor {
  std::string name;
  std::string file;           // path of the file that holds it
  std::string dtype_name;     // as written in the header, e.g. "BF16"
  std::optional<DType> dtype; // nullopt for dtypes we do not compute with (I64, F8...)
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
  std::string shape_string() const;  // "[128, 256]"
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. NotFound if missing; DataLoss for truncated or corrupt
  // files (bad header length, bad JSON, spans out of range or overlapping); the
  // message names the file and, where relevant, the tensor.
  static StatusOr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, StoredTensor>& tensors() const { return tensors_; }
  // nullptr if absent.
  const StoredTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // MappedFile::drop_resident_pages of the file.
  void drop_resident_pages() const { file_.drop_resident_pages(); }

 private:
  MappedFile file_;
  std::map<std::string, StoredTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace moe
