#include "moe/store/manifest.h"

#include <nlohmann/json.hpp>

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace moe {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kFormat = "moe-expert-store";
constexpr int kFormatVersion = 1;

// Field access for one JSON object, with errors naming the origin file, the object
// (e.g. "shard 'layer.3.expert.5'") and the field.
class Fields {
 public:
  Fields(const json& obj, const std::string& origin, std::string where)
      : obj_(obj), origin_(origin), where_(std::move(where)) {}

  Status error(const std::string& field, const std::string& what) const {
    return data_loss("manifest " + origin_ + ": " + where_ + (where_.empty() ? "" : ": ") + "field '" + field +
                     "' " + what);
  }
  bool has(const std::string& field) const { return obj_.contains(field); }

  StatusOr<const json*> get(const std::string& field) const {
    auto it = obj_.find(field);
    if (it == obj_.end()) return error(field, "is missing");
    return &*it;
  }
  StatusOr<std::string> string(const std::string& field) const {
    MOE_ASSIGN_OR_RETURN(const json* v, get(field));
    if (!v->is_string()) return error(field, "is not a string");
    return v->get<std::string>();
  }
  StatusOr<int64_t> integer(const std::string& field) const {
    MOE_ASSIGN_OR_RETURN(const json* v, get(field));
    if (!v->is_number_integer()) return error(field, "is not an integer");
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return error(field, "is out of range");
    }
    return v->get<int64_t>();
  }
  StatusOr<uint64_t> unsigned_integer(const std::string& field) const {
    MOE_ASSIGN_OR_RETURN(const json* v, get(field));
    if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0)) {
      return error(field, "is not a non-negative integer");
    }
    return v->get<uint64_t>();
  }
  StatusOr<Hash128> hash(const std::string& field) const {
    MOE_ASSIGN_OR_RETURN(std::string text, string(field));
    auto h = Hash128::parse(text);
    if (!h.ok()) return error(field, "is not a hash: " + h.status().message());
    return *h;
  }
  StatusOr<const json*> array(const std::string& field) const {
    MOE_ASSIGN_OR_RETURN(const json* v, get(field));
    if (!v->is_array()) return error(field, "is not an array");
    return v;
  }

 private:
  const json& obj_;
  const std::string& origin_;
  std::string where_;
};

StatusOr<ShardKind> parse_kind(const std::string& name) {
  for (ShardKind k : {ShardKind::kExpert, ShardKind::kLayer, ShardKind::kModel, ShardKind::kFile}) {
    if (name == shard_kind_name(k)) return k;
  }
  return invalid_argument("unknown kind '" + name + "' (expected expert, layer, model or file)");
}

StatusOr<ShardTensor> parse_tensor(const json& j, const std::string& origin, const std::string& where) {
  if (!j.is_object()) return data_loss("manifest " + origin + ": " + where + " is not an object");
  Fields f(j, origin, where);
  ShardTensor t;
  MOE_ASSIGN_OR_RETURN(t.name, f.string("name"));
  Fields named(j, origin, where + " ('" + t.name + "')");
  MOE_ASSIGN_OR_RETURN(t.dtype, named.string("dtype"));
  MOE_ASSIGN_OR_RETURN(const json* shape, named.array("shape"));
  for (const auto& d : *shape) {
    if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0)) {
      return named.error("shape", "has an entry that is not a non-negative integer");
    }
    t.shape.push_back(d.get<int64_t>());
  }
  MOE_ASSIGN_OR_RETURN(t.offset, named.unsigned_integer("offset"));
  MOE_ASSIGN_OR_RETURN(t.nbytes, named.unsigned_integer("nbytes"));
  return t;
}

StatusOr<ShardEntry> parse_shard(const json& j, size_t index, const std::string& origin) {
  const std::string at = "shards[" + std::to_string(index) + "]";
  if (!j.is_object()) return data_loss("manifest " + origin + ": " + at + " is not an object");
  ShardEntry s;
  MOE_ASSIGN_OR_RETURN(s.id, Fields(j, origin, at).string("id"));
  if (s.id.empty()) return Fields(j, origin, at).error("id", "is empty");
  Fields f(j, origin, "shard '" + s.id + "'");
  MOE_ASSIGN_OR_RETURN(std::string kind, f.string("kind"));
  auto k = parse_kind(kind);
  if (!k.ok()) return f.error("kind", k.status().message());
  s.kind = *k;
  MOE_ASSIGN_OR_RETURN(int64_t layer, f.integer("layer"));
  MOE_ASSIGN_OR_RETURN(int64_t expert, f.integer("expert"));
  if (layer < -1 || layer > INT32_MAX) return f.error("layer", "is out of range: " + std::to_string(layer));
  if (expert < -1 || expert > INT32_MAX) return f.error("expert", "is out of range: " + std::to_string(expert));
  s.layer = static_cast<int>(layer);
  s.expert = static_cast<int>(expert);
  if ((s.kind == ShardKind::kExpert || s.kind == ShardKind::kLayer) && s.layer < 0) {
    return f.error("layer", "must be >= 0 for a shard of kind " + kind);
  }
  if (s.kind == ShardKind::kExpert && s.expert < 0) return f.error("expert", "must be >= 0 for an expert shard");
  if (s.kind == ShardKind::kFile) {
    MOE_ASSIGN_OR_RETURN(s.file_name, f.string("file_name"));
    if (s.file_name.empty()) return f.error("file_name", "is empty");
  }
  MOE_ASSIGN_OR_RETURN(s.hash, f.hash("hash"));
  MOE_ASSIGN_OR_RETURN(std::string codec, f.string("codec"));
  auto c = parse_codec(codec);
  if (!c.ok()) return f.error("codec", c.status().message());
  s.codec = *c;
  MOE_ASSIGN_OR_RETURN(int64_t element_bytes, f.integer("element_bytes"));
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4) {
    return f.error("element_bytes", "is " + std::to_string(element_bytes) + " (expected 1, 2 or 4)");
  }
  s.element_bytes = static_cast<int>(element_bytes);
  MOE_ASSIGN_OR_RETURN(s.raw_bytes, f.unsigned_integer("raw_bytes"));
  MOE_ASSIGN_OR_RETURN(s.stored_bytes, f.unsigned_integer("stored_bytes"));
  if (s.codec == Codec::kRaw && s.stored_bytes != s.raw_bytes) {
    return f.error("stored_bytes", std::to_string(s.stored_bytes) + " != raw_bytes " + std::to_string(s.raw_bytes) +
                                       " for codec raw");
  }
  MOE_ASSIGN_OR_RETURN(const json* tensors, f.array("tensors"));
  uint64_t next = 0;
  for (size_t i = 0; i < tensors->size(); ++i) {
    MOE_ASSIGN_OR_RETURN(ShardTensor t,
                         parse_tensor((*tensors)[i], origin, "shard '" + s.id + "': tensors[" + std::to_string(i) + "]"));
    const std::string span = "[" + std::to_string(t.offset) + ", " + std::to_string(t.offset + t.nbytes) + ")";
    if (t.nbytes > s.raw_bytes || t.offset > s.raw_bytes - t.nbytes) {
      return data_loss("manifest " + origin + ": shard '" + s.id + "': tensor '" + t.name + "' span " + span +
                       " is outside the shard's " + std::to_string(s.raw_bytes) + " raw bytes");
    }
    if (t.offset != next) {
      return data_loss("manifest " + origin + ": shard '" + s.id + "': tensor '" + t.name + "' span " + span +
                       " does not follow the previous tensor (expected offset " + std::to_string(next) + ")");
    }
    next = t.offset + t.nbytes;
    s.tensors.push_back(std::move(t));
  }
  if (s.kind != ShardKind::kFile && next != s.raw_bytes) {
    return data_loss("manifest " + origin + ": shard '" + s.id + "': its tensors cover " + std::to_string(next) +
                     " of its " + std::to_string(s.raw_bytes) + " raw bytes");
  }
  if (s.kind == ShardKind::kFile && !s.tensors.empty()) {
    return f.error("tensors", "must be empty for a file shard");
  }
  return s;
}

StatusOr<HfFileLayout> parse_hf_file(const json& j, size_t index, const std::string& origin) {
  const std::string at = "hf_files[" + std::to_string(index) + "]";
  if (!j.is_object()) return data_loss("manifest " + origin + ": " + at + " is not an object");
  HfFileLayout h;
  MOE_ASSIGN_OR_RETURN(h.name, Fields(j, origin, at).string("name"));
  Fields f(j, origin, "hf file '" + h.name + "'");
  MOE_ASSIGN_OR_RETURN(h.header_shard, f.string("header_shard"));
  MOE_ASSIGN_OR_RETURN(const json* tensors, f.array("tensors"));
  for (const auto& t : *tensors) {
    if (!t.is_string()) return f.error("tensors", "has an entry that is not a string");
    h.tensors.push_back(t.get<std::string>());
  }
  return h;
}

}  // namespace

const char* shard_kind_name(ShardKind kind) {
  switch (kind) {
    case ShardKind::kExpert: return "expert";
    case ShardKind::kLayer: return "layer";
    case ShardKind::kModel: return "model";
    case ShardKind::kFile: return "file";
  }
  return "?";
}

std::string ShardEntry::describe() const {
  switch (kind) {
    case ShardKind::kExpert: return "layer " + std::to_string(layer) + ", expert " + std::to_string(expert);
    case ShardKind::kLayer: return "layer " + std::to_string(layer) + " (non-expert tensors)";
    case ShardKind::kModel: return "model tensors (embeddings, final norm, lm_head)";
    case ShardKind::kFile: return "file " + file_name;
  }
  return id;
}

const ShardEntry* Manifest::find_shard(const std::string& id) const {
  for (const auto& s : shards) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

const ShardEntry* Manifest::find_expert(int layer, int expert) const {
  for (const auto& s : shards) {
    if (s.kind == ShardKind::kExpert && s.layer == layer && s.expert == expert) return &s;
  }
  return nullptr;
}

const ShardEntry* Manifest::find_file(const std::string& file_name) const {
  for (const auto& s : shards) {
    if (s.kind == ShardKind::kFile && s.file_name == file_name) return &s;
  }
  return nullptr;
}

std::pair<const ShardEntry*, const ShardTensor*> Manifest::find_tensor(const std::string& name) const {
  for (const auto& s : shards) {
    for (const auto& t : s.tensors) {
      if (t.name == name) return {&s, &t};
    }
  }
  return {nullptr, nullptr};
}

uint64_t Manifest::total_raw_bytes() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.raw_bytes;
  return n;
}

uint64_t Manifest::total_stored_bytes() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.stored_bytes;
  return n;
}

std::string manifest_to_json(const Manifest& m) {
  ordered_json j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["version"] = m.version;
  j["parent_version"] = m.parent_version;
  j["created_unix_ms"] = m.created_unix_ms;
  j["model_type"] = m.model_type;
  j["fingerprint"] = m.fingerprint.hex();
  j["config_json"] = m.config_json;
  j["source_dir"] = m.source_dir;
  ordered_json shards = ordered_json::array();
  for (const auto& s : m.shards) {
    ordered_json e;
    e["id"] = s.id;
    e["kind"] = shard_kind_name(s.kind);
    e["layer"] = s.layer;
    e["expert"] = s.expert;
    if (s.kind == ShardKind::kFile) e["file_name"] = s.file_name;
    e["hash"] = s.hash.hex();
    e["codec"] = codec_name(s.codec);
    e["element_bytes"] = s.element_bytes;
    e["raw_bytes"] = s.raw_bytes;
    e["stored_bytes"] = s.stored_bytes;
    ordered_json tensors = ordered_json::array();
    for (const auto& t : s.tensors) {
      ordered_json tj;
      tj["name"] = t.name;
      tj["dtype"] = t.dtype;
      tj["shape"] = t.shape;
      tj["offset"] = t.offset;
      tj["nbytes"] = t.nbytes;
      tensors.push_back(std::move(tj));
    }
    e["tensors"] = std::move(tensors);
    shards.push_back(std::move(e));
  }
  j["shards"] = std::move(shards);
  ordered_json files = ordered_json::array();
  for (const auto& h : m.hf_files) {
    ordered_json e;
    e["name"] = h.name;
    e["header_shard"] = h.header_shard;
    e["tensors"] = h.tensors;
    files.push_back(std::move(e));
  }
  j["hf_files"] = std::move(files);
  return j.dump(1) + "\n";
}

StatusOr<Manifest> parse_manifest(const std::string& text, const std::string& origin) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return data_loss("manifest " + origin + " is not valid JSON (truncated or corrupt)");
  if (!j.is_object()) return data_loss("manifest " + origin + " is not a JSON object");
  Fields f(j, origin, "");
  MOE_ASSIGN_OR_RETURN(std::string format, f.string("format"));
  if (format != kFormat) return f.error("format", "is '" + format + "', expected '" + kFormat + "'");
  MOE_ASSIGN_OR_RETURN(int64_t format_version, f.integer("format_version"));
  if (format_version != kFormatVersion) {
    return f.error("format_version", "is " + std::to_string(format_version) + ", this build reads " +
                                         std::to_string(kFormatVersion));
  }
  Manifest m;
  MOE_ASSIGN_OR_RETURN(m.version, f.integer("version"));
  MOE_ASSIGN_OR_RETURN(m.parent_version, f.integer("parent_version"));
  MOE_ASSIGN_OR_RETURN(m.created_unix_ms, f.integer("created_unix_ms"));
  if (m.version < 1) return f.error("version", "must be >= 1, is " + std::to_string(m.version));
  if (m.parent_version < 0 || m.parent_version >= m.version) {
    return f.error("parent_version", "must be in [0, version), is " + std::to_string(m.parent_version));
  }
  MOE_ASSIGN_OR_RETURN(m.model_type, f.string("model_type"));
  MOE_ASSIGN_OR_RETURN(m.fingerprint, f.hash("fingerprint"));
  MOE_ASSIGN_OR_RETURN(m.config_json, f.string("config_json"));
  MOE_ASSIGN_OR_RETURN(m.source_dir, f.string("source_dir"));

  MOE_ASSIGN_OR_RETURN(const json* shards, f.array("shards"));
  std::unordered_set<std::string> ids;
  std::unordered_map<std::string, std::string> tensor_shard;  // tensor name -> shard id
  for (size_t i = 0; i < shards->size(); ++i) {
    MOE_ASSIGN_OR_RETURN(ShardEntry s, parse_shard((*shards)[i], i, origin));
    if (!ids.insert(s.id).second) return data_loss("manifest " + origin + ": duplicate shard id '" + s.id + "'");
    for (const auto& t : s.tensors) {
      auto [it, inserted] = tensor_shard.emplace(t.name, s.id);
      if (!inserted) {
        return data_loss("manifest " + origin + ": tensor '" + t.name + "' is in both shard '" + it->second +
                         "' and shard '" + s.id + "'");
      }
    }
    m.shards.push_back(std::move(s));
  }

  MOE_ASSIGN_OR_RETURN(const json* files, f.array("hf_files"));
  std::set<std::string> file_names;
  for (size_t i = 0; i < files->size(); ++i) {
    MOE_ASSIGN_OR_RETURN(HfFileLayout h, parse_hf_file((*files)[i], i, origin));
    const std::string where = "manifest " + origin + ": hf file '" + h.name + "'";
    if (!file_names.insert(h.name).second) return data_loss(where + " is listed twice");
    const ShardEntry* header = m.find_shard(h.header_shard);
    if (header == nullptr) return data_loss(where + ": header_shard '" + h.header_shard + "' is not a shard");
    if (header->kind != ShardKind::kFile) {
      return data_loss(where + ": header_shard '" + h.header_shard + "' is not a file shard");
    }
    for (const auto& t : h.tensors) {
      if (tensor_shard.find(t) == tensor_shard.end()) {
        return data_loss(where + ": tensor '" + t + "' is in no shard");
      }
    }
    m.hf_files.push_back(std::move(h));
  }
  return m;
}

}  // namespace moe
