#include "moe/store/store_save_plan.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <system_error>
#include <tuple>

#include <nlohmann/json.hpp>

#include "moe/model/config.h"
#include "moe/store/shard_grouping.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

bool is_two_byte_dtype(const std::string& dtype) { return dtype == "BF16" || dtype == "F16"; }

// The 8 + N header bytes of a safetensors file, read from disk.
StatusOr<std::string> read_safetensors_header(const std::string& path, uint64_t file_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::string bytes(8, '\0');
  if (!in.read(bytes.data(), 8)) return data_loss(path + ": shorter than the 8-byte safetensors header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[static_cast<size_t>(i)])) << (8 * i);
  if (n > file_size - 8) return data_loss(path + ": header length " + std::to_string(n) + " exceeds the file");
  bytes.resize(8 + n);
  if (!in.read(bytes.data() + 8, static_cast<std::streamsize>(n))) return data_loss(path + ": truncated header");
  return bytes;
}

struct Span {
  uint64_t begin = 0;
  uint64_t end = 0;
  std::string name;
};

// The file's tensors in data-offset order; DataLoss naming the file unless they are back
// to back from offset 0 to the end of the file.
StatusOr<std::vector<std::string>> tensors_in_offset_order(const std::string& path, const std::string& header,
                                                           uint64_t file_size) {
  const nlohmann::json json = nlohmann::json::parse(header.begin() + 8, header.end(), nullptr, false);
  if (json.is_discarded() || !json.is_object()) return data_loss(path + ": safetensors header is not a JSON object");
  std::vector<Span> spans;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& offsets = it.value().is_object() && it.value().contains("data_offsets") ? it.value()["data_offsets"]
                                                                                          : nlohmann::json();
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return data_loss(path + ": tensor '" + it.key() + "' has no valid data_offsets");
    }
    spans.push_back({offsets[0].get<uint64_t>(), offsets[1].get<uint64_t>(), it.key()});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  const uint64_t data_size = file_size - header.size();
  uint64_t at = 0;
  std::vector<std::string> names;
  for (const auto& s : spans) {
    if (s.begin != at) {
      return data_loss(path + ": tensor data is not contiguous: tensor '" + s.name + "' starts at data offset " +
                       std::to_string(s.begin) + " where " + std::to_string(at) +
                       " was expected (a hole or overlap; the store rebuilds files from their tensors)");
    }
    at = s.end;
    names.push_back(s.name);
  }
  if (at != data_size) {
    return data_loss(path + ": tensors cover " + std::to_string(at) + " bytes of a " + std::to_string(data_size) +
                     "-byte data section (bytes after the last tensor)");
  }
  return names;
}

// Sort key of the manifest order (see SavePlan::shards).
std::tuple<int, int, int, std::string> order_key(const ShardEntry& e) {
  switch (e.kind) {
    case ShardKind::kModel: return {0, -1, -1, e.id};
    case ShardKind::kLayer: return {1, e.layer, -1, e.id};
    case ShardKind::kExpert: return {1, e.layer, e.expert, e.id};
    case ShardKind::kFile: return {2, 0, 0, e.id};
  }
  return {3, 0, 0, e.id};
}

Status plan_safetensors(const SafetensorsFile& file, const std::string& rel_name, SavePlan& plan,
                        std::map<std::string, std::vector<const StoredTensor*>>& by_shard,
                        std::map<std::string, ShardKey>& keys, std::map<std::string, std::string>& tensor_file,
                        ModelFamily family) {
  std::error_code ec;
  const uint64_t size = fs::file_size(file.path(), ec);
  if (ec) return not_found("cannot stat " + file.path() + ": " + ec.message());
  MOE_ASSIGN_OR_RETURN(std::string header, read_safetensors_header(file.path(), size));
  MOE_ASSIGN_OR_RETURN(auto order, tensors_in_offset_order(file.path(), header, size));

  PlannedShard shard;
  shard.entry.id = "file:" + rel_name + "#header";
  shard.entry.kind = ShardKind::kFile;
  shard.entry.file_name = rel_name + "#header";
  shard.entry.raw_bytes = header.size();
  plan.headers.push_back(std::make_unique<std::string>(std::move(header)));
  shard.pieces.push_back({reinterpret_cast<const uint8_t*>(plan.headers.back()->data()), plan.headers.back()->size()});
  plan.shards.push_back(std::move(shard));
  plan.hf_files.push_back({rel_name, "file:" + rel_name + "#header", order});

  for (const auto& name : order) {
    const StoredTensor* t = file.find(name);
    if (t == nullptr) return data_loss(file.path() + ": tensor '" + name + "' of the header was not loaded");
    auto [it, fresh] = tensor_file.emplace(name, file.path());
    if (!fresh) return data_loss("tensor '" + name + "' is in both " + it->second + " and " + file.path());
    const ShardKey key = shard_key_for(name, family);
    keys[key.id()] = key;
    by_shard[key.id()].push_back(t);
  }
  return ok_status();
}

}  // namespace

StatusOr<SavePlan> plan_save(const std::string& model_dir, const std::string& store) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) return not_found("model directory " + model_dir + " does not exist");
  SavePlan plan;
  MOE_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(model_dir));
  plan.model_type = config.model_type;
  plan.source_dir = fs::weakly_canonical(fs::absolute(model_dir), ec).string();
  MOE_ASSIGN_OR_RETURN(plan.config_json, read_text_file(model_dir + "/config.json"));
  MOE_ASSIGN_OR_RETURN(HfCheckpoint checkpoint, HfCheckpoint::open(model_dir));
  plan.checkpoint = std::make_unique<HfCheckpoint>(std::move(checkpoint));

  // Tensor shards, and one header shard per safetensors file.
  std::map<std::string, std::vector<const StoredTensor*>> by_shard;
  std::map<std::string, ShardKey> keys;
  std::map<std::string, std::string> tensor_file;
  std::set<std::string> safetensors_names;
  const fs::path root = fs::path(plan.source_dir);
  for (const auto& file : plan.checkpoint->shards()) {
    // HfCheckpoint opens plain file names directly under model_dir.
    const std::string rel = fs::path(file->path()).filename().string();
    safetensors_names.insert(rel);
    MOE_RETURN_IF_ERROR(plan_safetensors(*file, rel, plan, by_shard, keys, tensor_file, config.family));
  }
  std::vector<TensorInfo> infos;
  for (auto& [id, tensors] : by_shard) {
    std::sort(tensors.begin(), tensors.end(),
              [](const StoredTensor* a, const StoredTensor* b) { return a->name < b->name; });
    PlannedShard shard;
    const ShardKey& key = keys[id];
    shard.entry.id = id;
    shard.entry.kind = key.kind;
    shard.entry.layer = key.layer;
    shard.entry.expert = key.expert;
    bool two_byte = true;
    uint64_t offset = 0;
    for (const StoredTensor* t : tensors) {
      shard.entry.tensors.push_back({t->name, t->dtype_name, t->shape, offset, t->nbytes});
      shard.pieces.push_back({t->data, t->nbytes});
      infos.push_back({t->name, t->dtype_name, t->shape, t->nbytes});
      two_byte = two_byte && is_two_byte_dtype(t->dtype_name);
      offset += t->nbytes;
    }
    shard.entry.raw_bytes = offset;
    shard.entry.element_bytes = two_byte ? 2 : 1;
    plan.shards.push_back(std::move(shard));
  }
  plan.fingerprint = model_structure_fingerprint(plan.model_type, infos);

  // Every other regular file, verbatim (the store itself excluded, should it be inside).
  const fs::path store_path = fs::weakly_canonical(fs::absolute(store), ec);
  std::vector<std::pair<std::string, fs::path>> others;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code canon_ec;
    if (fs::weakly_canonical(it->path(), canon_ec) == store_path) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    const std::string rel = it->path().lexically_relative(root).generic_string();
    if (safetensors_names.count(rel)) continue;
    others.push_back({rel, it->path()});
  }
  if (ec) return internal_error("cannot list model directory " + model_dir + ": " + ec.message());
  std::sort(others.begin(), others.end());
  for (const auto& [rel, path] : others) {
    MOE_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path.string()));
    plan.files.push_back(std::make_unique<MappedFile>(std::move(mapped)));
    PlannedShard shard;
    shard.entry.id = "file:" + rel;
    shard.entry.kind = ShardKind::kFile;
    shard.entry.file_name = rel;
    shard.entry.raw_bytes = plan.files.back()->size();
    shard.pieces.push_back({plan.files.back()->data(), plan.files.back()->size()});
    plan.shards.push_back(std::move(shard));
  }
  std::stable_sort(plan.shards.begin(), plan.shards.end(), [](const PlannedShard& a, const PlannedShard& b) {
    return order_key(a.entry) < order_key(b.entry);
  });
  return plan;
}

}  // namespace moe
