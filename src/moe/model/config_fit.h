// Whether a checkpoint's tensors back the sizes its config.json gives, checked from the
// tensor names and shapes alone (ModelSource::tensor_infos: no tensor data read, so it
// works before a store restores anything) and before anything is sized by the config.
// A config asking for more than the weights hold (num_hidden_layers 1000000000 over a
// two-layer checkpoint) is refused naming the field, its value and what the checkpoint
// has, instead of sizing per-layer or per-expert state by it.
#pragma once

#include "moe/model/config.h"
#include "moe/model/model_source.h"
#include "moe/status.h"

namespace moe {

// Every size of `config` against `source`'s tensors: the layer count against the layers
// present ("model.layers.<l>.*"), the routed experts of each MoE layer against the experts
// present there and the router's rows, vocab_size and hidden_size against the embedding
// (and an untied lm_head), the attention heads (GQA q/k projections; MLA q and kv_b
// projections) and the dense, expert and shared-expert widths against their matrices, on
// every layer. Loops run over the layers and experts the checkpoint holds, never over a
// larger count taken from the config. A checkpoint holding more (DeepSeek's
// multi-token-prediction layer) is fine. Messages begin "<location>/config.json:":
//   InvalidArgument: a size the tensors disagree with, naming the field, its value and
//     what the checkpoint holds, e.g. "num_hidden_layers 1000000000, but the checkpoint
//     has weights for 4 layers (model.layers.0-3)", or for a shape the tensor, its file
//     (when the source can say), its shape and the one the config implies;
//   NotFound: a tensor the config's layers need that the checkpoint lacks, by name.
Status check_config_fits_weights(const ModelConfig& config, const ModelSource& source);

// load_model_config(source), then check_config_fits_weights. num_hidden_layers is
// compared with the layers present before the config is parsed (the parse sizes one
// entry per layer), so an absurd count costs one pass over the tensor names. Errors: those
// of load_model_config and check_config_fits_weights.
StatusOr<ModelConfig> load_model_config_checked(const ModelSource& source);

}  // namespace moe
