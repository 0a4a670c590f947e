#include "moe/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

namespace moe {
namespace {

// Element sizes of every dtype the safetensors spec defines (so offsets can be
// validated even for tensors we never compute with).
int64_t safetensors_dtype_size(const std::string& name) {
  static const std::map<std::string, int64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = kSizes.find(name);
  return it == kSizes.end() ? -1 : it->second;
}

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference reader's limit

}  // namespace

int64_t StoredTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string StoredTensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const StoredTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  const size_t size = file.size();
  if (size < 8) {
    return data_loss(path + ": file is " + std::to_string(size) +
                     " bytes, too small for a safetensors header");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);  // little-endian hosts only (x86-64, arm64)
  if (header_len > size - 8) {
    return data_loss(path + ": header length " + std::to_string(header_len) +
                     " exceeds file size " + std::to_string(size) + " (truncated or not safetensors)");
  }
  if (header_len > kMaxHeaderBytes) {
    return data_loss(path + ": header length " + std::to_string(header_len) + " is implausibly large");
  }
  const char* header_begin = reinterpret_cast<const char*>(file.data() + 8);
  nlohmann::json header = nlohmann::json::parse(header_begin, header_begin + header_len, nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return data_loss(path + ": header is not a valid JSON object");
  }
  const uint8_t* data_begin = file.data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  SafetensorsFile out;
  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      if (entry.is_object()) {
        for (auto m = entry.begin(); m != entry.end(); ++m) {
          if (m.value().is_string()) out.metadata_[m.key()] = m.value().get<std::string>();
        }
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return data_loss(where + " has a malformed header entry (needs dtype, shape, data_offsets[2])");
    }
    StoredTensor view;
    view.name = name;
    view.file = path;
    view.dtype_name = entry["dtype"].get<std::string>();
    const int64_t elem = safetensors_dtype_size(view.dtype_name);
    if (elem < 0) return data_loss(where + " has unknown dtype '" + view.dtype_name + "'");
    view.dtype = parse_dtype(view.dtype_name);
    int64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return data_loss(where + " has a negative or non-integer dimension in its shape");
      }
      const int64_t dim = d.get<int64_t>();
      if (dim != 0 && numel > std::numeric_limits<int64_t>::max() / elem / dim) {
        return data_loss(where + " has a shape too large to address");
      }
      numel *= dim;
      view.shape.push_back(dim);
    }
    const auto& offs = entry["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) {
      return data_loss(where + " has negative or non-integer data_offsets");
    }
    const uint64_t begin = offs[0].get<uint64_t>();
    const uint64_t end = offs[1].get<uint64_t>();
    if (end < begin) {
      return data_loss(where + " has data_offsets [" + std::to_string(begin) + ", " +
                       std::to_string(end) + "] with end before begin");
    }
    if (end > data_size) {
      return data_loss(where + " has data_offsets [" + std::to_string(begin) + ", " +
                       std::to_string(end) + "] beyond the data section (" + std::to_string(data_size) +
                       " bytes): file truncated or offsets out of range");
    }
    if (end - begin != static_cast<uint64_t>(numel * elem)) {
      return data_loss(where + " spans " + std::to_string(end - begin) + " bytes but shape " +
                       view.shape_string() + " of " + view.dtype_name + " needs " +
                       std::to_string(numel * elem));
    }
    view.data = data_begin + begin;
    view.nbytes = end - begin;
    auto [pos, inserted] = out.tensors_.emplace(name, std::move(view));
    // Empty spans hold no bytes; left in the list they would hide an overlap between
    // the non-empty spans on either side of them.
    if (end > begin) spans.push_back({begin, end, &pos->first});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end && spans[i].end > spans[i].begin) {
      return data_loss(path + ": tensors '" + *spans[i - 1].name + "' and '" + *spans[i].name +
                       "' have overlapping data_offsets");
    }
  }
  out.file_ = std::move(file);
  return out;
}

}  // namespace moe
