#include "moe/engine/expert_loader.h"

#include "moe/model/weight_names.h"
#include "moe/tensor/dtype.h"

namespace moe {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

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
  const WeightNames names = weight_names_for(config.family);
  const int64_t hidden = config.hidden_size, inter = config.moe_intermediate_size;
  struct Want {
    const std::string* suffix;
    int64_t rows, cols;
  };
  const Want wants[3] = {{&names.expert_w1, inter, hidden}, {&names.expert_w2, hidden, inter},
                         {&names.expert_w3, inter, hidden}};
  struct Found {
    uint64_t offset;
    DType dtype;
  };
  Found found[3];
  for (int i = 0; i < 3; ++i) {
    const std::string name = names.expert(layer, expert, *wants[i].suffix);
    const ShardTensor* t = nullptr;
    for (const ShardTensor& c : shard.tensors) {
      if (c.name == name) t = &c;
    }
    if (t == nullptr) return not_found(what + ": tensor '" + name + "' is not in its shard in " + store.location());
    const std::vector<int64_t> expected = {wants[i].rows, wants[i].cols};
    const auto dtype = parse_dtype(t->dtype);
    if (t->shape != expected || !dtype) {
      return invalid_argument(what + ": tensor '" + name + "' in " + store.location() + " is " + t->dtype + " " +
                              shape_str(t->shape) + ", expected F32/BF16/F16 " + shape_str(expected));
    }
    if (t->offset + t->nbytes > shard.bytes.size() ||
        t->nbytes != static_cast<uint64_t>(wants[i].rows * wants[i].cols) * dtype_size(*dtype)) {
      return invalid_argument(what + ": tensor '" + name + "' has a byte span that does not fit its shape");
    }
    found[i] = {t->offset, *dtype};
  }
  // Commit: the buffer moves into the store (its data pointer is stable), the weights point into it.
  std::vector<uint8_t>& buf = (*target.store)[{layer, expert}];
  buf = std::move(shard.bytes);
  ExpertWeights& w = (*target.layers)[static_cast<size_t>(layer)].experts[static_cast<size_t>(expert)];
  w.w1 = Weight2D{buf.data() + found[0].offset, found[0].dtype, inter, hidden};
  w.w2 = Weight2D{buf.data() + found[1].offset, found[1].dtype, hidden, inter};
  w.w3 = Weight2D{buf.data() + found[2].offset, found[2].dtype, inter, hidden};
  w.loaded = true;
  return ok_status();
}

}  // namespace moe
