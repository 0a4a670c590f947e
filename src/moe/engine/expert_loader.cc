#include "moe/engine/expert_loader.h"

#include <map>

#include "moe/model/weights.h"
#include "moe/tensor/dtype.h"

namespace moe {
namespace {

// One expert shard's tensors as a ModelSource, so the shard is bound by bind_expert:
// the same checks (shapes, dtypes, FP8 block scales `<name>_scale_inv`) as a model
// loaded from its files, and whatever tensors the expert has (scales included) travel.
class ShardSource final : public ModelSource {
 public:
  ShardSource(const StoreModel::ExpertShard& shard, std::string where) : where_(std::move(where)) {
    for (const ShardTensor& t : shard.tensors) {
      StoredTensor v;
      v.name = t.name;
      v.file = where_;
      v.dtype_name = t.dtype;
      v.dtype = parse_dtype(t.dtype);
      v.shape = t.shape;
      v.data = shard.bytes.data() + t.offset;
      v.nbytes = t.nbytes;
      tensors_.emplace(t.name, std::move(v));
    }
  }
  std::string location() const override { return where_; }
  StatusOr<std::string> read_file(const std::string& name) const override {
    return not_found("file '" + name + "' is not part of " + where_);
  }
  bool contains(const std::string& name) const override { return tensors_.count(name) > 0; }
  StatusOr<const StoredTensor*> get(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return not_found("tensor '" + name + "' is not in " + where_);
    return &it->second;
  }
  std::vector<TensorInfo> tensor_infos() const override {
    std::vector<TensorInfo> out;
    for (const auto& [name, t] : tensors_) out.push_back({name, t.dtype_name, t.shape, t.nbytes});
    return out;
  }
  size_t total_bytes() const override {
    size_t n = 0;
    for (const auto& [name, t] : tensors_) n += t.nbytes;
    return n;
  }

 private:
  std::string where_;
  std::map<std::string, StoredTensor> tensors_;
};

}  // namespace

Status load_expert_from_store(const StoreModel& store, const ModelConfig& config, int layer, int expert,
                              const MigrationTarget& target) {
  const std::string what = "layer " + std::to_string(layer) + ", expert " + std::to_string(expert);
  if (layer < 0 || layer >= config.num_hidden_layers || !config.is_moe_layer(layer)) {
    return invalid_argument(what + ": layer " + std::to_string(layer) + " is not an MoE layer of the model");
  }
  if (expert < 0 || expert >= config.router.num_experts) {
    return invalid_argument(what + ": the model has " + std::to_string(config.router.num_experts) + " experts");
  }
  if (target.layers == nullptr || target.store == nullptr ||
      static_cast<size_t>(layer) >= target.layers->size() ||
      static_cast<size_t>(expert) >= (*target.layers)[static_cast<size_t>(layer)].experts.size()) {
    return invalid_argument(what + ": the target's layer weights have no slot for it");
  }
  MOE_ASSIGN_OR_RETURN(StoreModel::ExpertShard shard, store.read_expert(layer, expert));
  for (const ShardTensor& t : shard.tensors) {
    if (t.offset + t.nbytes > shard.bytes.size() || t.offset + t.nbytes < t.offset) {
      return invalid_argument(what + ": tensor '" + t.name + "' in " + store.location() +
                              " has a byte span outside its shard");
    }
  }
  ExpertWeights bound;
  {
    const ShardSource source(shard, "the shard of " + what + " in " + store.location());
    MOE_RETURN_IF_ERROR(bind_expert(config, source, layer, expert, &bound).with_context(what));
  }
  // Commit: the buffer moves into the store (a moved vector keeps its data pointer, so
  // the bound weights and scales stay valid), the weights point into it.
  std::vector<uint8_t>& buf = (*target.store)[{layer, expert}];
  buf = std::move(shard.bytes);
  (*target.layers)[static_cast<size_t>(layer)].experts[static_cast<size_t>(expert)] = bound;
  return ok_status();
}

}  // namespace moe
