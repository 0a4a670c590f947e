#include "moe/store/shard_grouping.h"

#include <algorithm>
#include <cstdint>

#include "moe/model/weight_names.h"

namespace moe {

namespace {

// Parses the decimal number at `pos` of `s` followed by '.'; advances pos past the dot.
bool parse_index(const std::string& s, size_t& pos, int& out) {
  size_t start = pos;
  int64_t v = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9' && pos - start < 9) {
    v = v * 10 + (s[pos] - '0');
    ++pos;
  }
  if (pos == start || pos >= s.size() || s[pos] != '.') return false;
  ++pos;
  out = static_cast<int>(v);
  return true;
}

bool starts_with_at(const std::string& s, size_t pos, const std::string& prefix) {
  return !prefix.empty() && s.compare(pos, prefix.size(), prefix) == 0;
}

}  // namespace

std::string ShardKey::id() const {
  switch (kind) {
    case ShardKind::kExpert: return "layer." + std::to_string(layer) + ".expert." + std::to_string(expert);
    case ShardKind::kLayer: return "layer." + std::to_string(layer);
    case ShardKind::kModel: return "model";
    case ShardKind::kFile: return "file";
  }
  return "model";
}

ShardKey shard_key_for(const std::string& tensor_name, ModelFamily family) {
  const WeightNames names = weight_names_for(family);
  ShardKey key;
  size_t pos = 0;
  if (!starts_with_at(tensor_name, pos, names.layer_prefix)) return key;
  pos += names.layer_prefix.size();
  int layer = 0;
  if (!parse_index(tensor_name, pos, layer)) return key;
  key.kind = ShardKind::kLayer;
  key.layer = layer;
  if (!starts_with_at(tensor_name, pos, names.expert_prefix)) return key;
  size_t epos = pos + names.expert_prefix.size();
  int expert = 0;
  if (!parse_index(tensor_name, epos, expert)) return key;
  key.kind = ShardKind::kExpert;
  key.expert = expert;
  return key;
}

Hash128 model_structure_fingerprint(const std::string& model_type, const std::vector<TensorInfo>& tensors) {
  std::vector<const TensorInfo*> sorted;
  sorted.reserve(tensors.size());
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  // Length-prefixed fields, so no two different lists serialize alike.
  Hasher128 h;
  auto put_u64 = [&](uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    h.update(b, sizeof(b));
  };
  auto put_str = [&](const std::string& s) {
    put_u64(s.size());
    h.update(s.data(), s.size());
  };
  put_str("moe-structure-v1");
  put_str(model_type);
  put_u64(sorted.size());
  for (const TensorInfo* t : sorted) {
    put_str(t->name);
    put_str(t->dtype_name);
    put_u64(t->shape.size());
    for (int64_t d : t->shape) put_u64(static_cast<uint64_t>(d));
  }
  return h.digest();
}

}  // namespace moe
