#include "moe/model/tp_shard.h"

#include <cstring>
#include <new>
#include <string>

#include "moe/core/check.h"
#include "moe/model/weight_names.h"

namespace moe {
namespace {

constexpr std::align_val_t kStorageAlign{64};

std::string str(int64_t v) { return std::to_string(v); }

std::string shape_str(int64_t rows, int64_t cols) { return "[" + str(rows) + ", " + str(cols) + "]"; }

// "--tp T: config.json field F = v is not divisible by T (why)".
Status divisible(int tp, const char* field, int64_t value, const std::string& why) {
  if (value % tp == 0) return ok_status();
  return invalid_argument("--tp " + str(tp) + ": config.json " + field + " = " + str(value) + " is not divisible by " +
                          str(tp) + " (" + why + "); use a --tp that divides " + str(value));
}

// A row-parallel slice of `width` columns of an FP8 model must hold whole blocks.
Status fp8_whole_blocks(const ModelConfig& c, int tp, const std::string& tensor, int64_t width,
                        const std::string& from) {
  if (width % c.fp8.block_cols == 0) return ok_status();
  return invalid_argument("--tp " + str(tp) + ": the row-parallel slice of FP8 tensor " + tensor + " is " + str(width) +
                          " columns (" + from + " / " + str(tp) + "), not a multiple of the FP8 block width " +
                          str(c.fp8.block_cols) +
                          " (config.json quantization_config.weight_block_size); use a --tp whose slices keep whole "
                          "blocks");
}

bool has_dense_layers(const ModelConfig& c) {
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_moe_layer(l)) return true;
  }
  return false;
}

int first_layer(const ModelConfig& c, bool moe) {
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.is_moe_layer(l) == moe) return l;
  }
  return 0;
}

// Slices one rank's part of the full weights (see shard_weights_for_tp).
class Sharder {
 public:
  Sharder(const ModelConfig& full, int tp_rank, int tp, TpWeightStorage* storage)
      : c_(full), names_(weight_names_for(full.family)), rank_(tp_rank), tp_(tp), storage_(storage) {}

  // Rows [rank * rows / tp, ...) of `w`, which must be [rows, cols]: a view.
  StatusOr<Weight2D> column(const Weight2D& w, const std::string& name, int64_t rows, int64_t cols) const {
    MOE_RETURN_IF_ERROR(check_shape(w, name, rows, cols));
    const int64_t n = rows / tp_;
    return row_block(w, rank_ * n, n);
  }

  // Columns [rank * cols / tp, ...) of `w` ([rows, cols]), copied into the storage; an
  // FP8 slice carries its scale columns and must hold whole blocks.
  StatusOr<Weight2D> row(const Weight2D& w, const std::string& name, int64_t rows, int64_t cols) const {
    MOE_RETURN_IF_ERROR(check_shape(w, name, rows, cols));
    const int64_t width = cols / tp_, c0 = rank_ * width;
    Weight2D out = w;
    out.cols = width;
    const size_t es = dtype_size(w.dtype);
    uint8_t* data = storage_->allocate(static_cast<size_t>(rows * width) * es);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(data + static_cast<size_t>(r * width) * es, w.row(r) + static_cast<size_t>(c0) * es,
                  static_cast<size_t>(width) * es);
    }
    out.data = data;
    if (!w.has_scale()) return out;
    const int64_t bc = w.block_cols;
    if (c0 % bc != 0 || ((c0 + width) % bc != 0 && c0 + width != cols)) {
      return invalid_argument("--tp " + str(tp_) + ": TP rank " + str(rank_) + "'s columns [" + str(c0) + ", " +
                              str(c0 + width) + ") of FP8 tensor '" + name + "' " + shape_str(rows, cols) +
                              " do not start and end on its block columns (block width " + str(bc) +
                              ", config.json quantization_config.weight_block_size)");
    }
    const size_t ss = dtype_size(w.scale_dtype);
    const int64_t scale_rows = w.scale_rows(), src_cols = w.scale_cols(), dst_cols = out.scale_cols();
    uint8_t* scale = storage_->allocate(static_cast<size_t>(scale_rows * dst_cols) * ss);
    const uint8_t* src = static_cast<const uint8_t*>(w.scale);
    for (int64_t r = 0; r < scale_rows; ++r) {
      std::memcpy(scale + static_cast<size_t>(r * dst_cols) * ss,
                  src + static_cast<size_t>(r * src_cols + c0 / bc) * ss, static_cast<size_t>(dst_cols) * ss);
    }
    out.scale = scale;
    return out;
  }

  // Elements [rank * n / tp, ...) of a bias of n elements.
  StatusOr<std::vector<float>> bias(const std::vector<float>& v, const std::string& name, int64_t n) const {
    if (static_cast<int64_t>(v.size()) != n) {
      return invalid_argument("tensor '" + name + "' has " + str(static_cast<int64_t>(v.size())) +
                              " elements but config.json implies " + str(n));
    }
    const int64_t k = n / tp_;
    return std::vector<float>(v.begin() + rank_ * k, v.begin() + (rank_ + 1) * k);
  }

  // A SwiGLU MLP of width `inter`, under "<prefix>" (+ gate/down/up names).
  StatusOr<ExpertWeights> swiglu(const ExpertWeights& e, const std::string& w1, const std::string& w2,
                                 const std::string& w3, int64_t inter) const {
    ExpertWeights out;
    if (!e.loaded) return out;  // another EP rank's expert
    const int64_t hidden = c_.hidden_size;
    MOE_ASSIGN_OR_RETURN(out.w1, column(e.w1, w1, inter, hidden));
    MOE_ASSIGN_OR_RETURN(out.w2, row(e.w2, w2, hidden, inter));
    MOE_ASSIGN_OR_RETURN(out.w3, column(e.w3, w3, inter, hidden));
    out.loaded = true;
    return out;
  }

  Status layer(int l, const LayerWeights& in, LayerWeights* out) const {
    const WeightNames& n = names_;
    const int64_t hidden = c_.hidden_size, heads = c_.num_attention_heads;
    out->input_norm = in.input_norm;
    out->post_attention_norm = in.post_attention_norm;
    if (c_.mla.enabled()) {
      const MlaConfig& m = c_.mla;
      MlaWeights& o = out->mla;
      if (m.q_lora_rank > 0) {
        o.q_a_proj = in.mla.q_a_proj;
        o.q_a_norm = in.mla.q_a_norm;
        MOE_ASSIGN_OR_RETURN(o.q_b_proj,
                             column(in.mla.q_b_proj, n.layer(l, n.q_b_proj), heads * m.qk_head_dim(), m.q_lora_rank));
      } else {
        MOE_ASSIGN_OR_RETURN(o.q_proj, column(in.mla.q_proj, n.layer(l, n.q_proj), heads * m.qk_head_dim(), hidden));
      }
      o.kv_a_proj = in.mla.kv_a_proj;
      o.kv_a_norm = in.mla.kv_a_norm;
      MOE_ASSIGN_OR_RETURN(o.kv_b_proj, column(in.mla.kv_b_proj, n.layer(l, n.kv_b_proj),
                                               heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank));
      MOE_ASSIGN_OR_RETURN(out->o_proj, row(in.o_proj, n.layer(l, n.o_proj), hidden, heads * m.v_head_dim));
    } else {
      const int64_t q_dim = heads * c_.head_dim, kv_dim = static_cast<int64_t>(c_.num_key_value_heads) * c_.head_dim;
      MOE_ASSIGN_OR_RETURN(out->q_proj, column(in.q_proj, n.layer(l, n.q_proj), q_dim, hidden));
      MOE_ASSIGN_OR_RETURN(out->k_proj, column(in.k_proj, n.layer(l, n.k_proj), kv_dim, hidden));
      MOE_ASSIGN_OR_RETURN(out->v_proj, column(in.v_proj, n.layer(l, n.v_proj), kv_dim, hidden));
      MOE_ASSIGN_OR_RETURN(out->o_proj, row(in.o_proj, n.layer(l, n.o_proj), hidden, q_dim));
      if (c_.attention_qkv_bias) {
        MOE_ASSIGN_OR_RETURN(out->q_bias, bias(in.q_bias, n.layer(l, n.q_bias), q_dim));
        MOE_ASSIGN_OR_RETURN(out->k_bias, bias(in.k_bias, n.layer(l, n.k_bias), kv_dim));
        MOE_ASSIGN_OR_RETURN(out->v_bias, bias(in.v_bias, n.layer(l, n.v_bias), kv_dim));
      }
      out->q_norm = in.q_norm;
      out->k_norm = in.k_norm;
    }
    if (!c_.is_moe_layer(l)) {
      const std::string p = n.layer(l, n.dense_mlp_prefix);
      MOE_ASSIGN_OR_RETURN(out->dense_mlp, swiglu(in.dense_mlp, p + n.mlp_gate, p + n.mlp_down, p + n.mlp_up,
                                                  c_.intermediate_size));
      return ok_status();
    }
    out->router = in.router;
    out->score_bias = in.score_bias;
    out->shared_expert_gate = in.shared_expert_gate;
    if (c_.shared_expert_intermediate_size > 0) {
      const std::string p = n.layer(l, n.shared_expert_prefix);
      MOE_ASSIGN_OR_RETURN(out->shared_expert, swiglu(in.shared_expert, p + n.mlp_gate, p + n.mlp_down, p + n.mlp_up,
                                                      c_.shared_expert_intermediate_size));
    }
    out->experts.resize(in.experts.size());
    for (size_t e = 0; e < in.experts.size(); ++e) {
      const int ei = static_cast<int>(e);
      MOE_ASSIGN_OR_RETURN(out->experts[e],
                           swiglu(in.experts[e], n.expert(l, ei, n.expert_w1), n.expert(l, ei, n.expert_w2),
                                  n.expert(l, ei, n.expert_w3), c_.moe_intermediate_size));
    }
    return ok_status();
  }

  StatusOr<Weight2D> vocab_rows(const Weight2D& w, const std::string& name) const {
    MOE_RETURN_IF_ERROR(check_shape(w, name, c_.vocab_size, c_.hidden_size));
    const VocabShard s = vocab_shard(c_.vocab_size, rank_, tp_);
    return row_block(w, s.begin, s.size());
  }

  const WeightNames& names() const { return names_; }

 private:
  Status check_shape(const Weight2D& w, const std::string& name, int64_t rows, int64_t cols) const {
    if (w.data == nullptr || w.rows != rows || w.cols != cols) {
      return invalid_argument("tensor '" + name + "' is " + (w.data ? shape_str(w.rows, w.cols) : "not bound") +
                              " but config.json implies " + shape_str(rows, cols) + " (sharding it for --tp " +
                              str(tp_) + ")");
    }
    return ok_status();
  }

  const ModelConfig& c_;
  WeightNames names_;
  int rank_, tp_;
  TpWeightStorage* storage_;
};

}  // namespace

Status check_tp_shardable(const ModelConfig& c, int tp) {
  if (tp < 1) return invalid_argument("--tp must be >= 1 (got " + str(tp) + ")");
  if (tp == 1) return ok_status();
  const bool mla = c.mla.enabled(), dense = has_dense_layers(c), moe = c.num_moe_layers() > 0;
  MOE_RETURN_IF_ERROR(divisible(tp, "num_attention_heads", c.num_attention_heads,
                                "attention heads are split over the TP ranks"));
  if (!mla) {
    MOE_RETURN_IF_ERROR(divisible(tp, "num_key_value_heads", c.num_key_value_heads,
                                  "GQA key/value heads are split over the TP ranks, never replicated"));
  }
  if (dense) {
    MOE_RETURN_IF_ERROR(divisible(tp, "intermediate_size", c.intermediate_size,
                                  "the dense MLP's intermediate dimension is split over the TP ranks"));
  }
  if (moe) {
    MOE_RETURN_IF_ERROR(divisible(tp, "moe_intermediate_size", c.moe_intermediate_size,
                                  "each expert's intermediate dimension is split over the TP ranks"));
    if (c.shared_expert_intermediate_size > 0) {
      MOE_RETURN_IF_ERROR(divisible(tp, "shared_expert_intermediate_size", c.shared_expert_intermediate_size,
                                    "the shared expert's intermediate dimension is split over the TP ranks"));
    }
  }
  if (!c.fp8.enabled) return ok_status();
  const WeightNames n = weight_names_for(c.family);
  const int64_t head_width = mla ? c.mla.v_head_dim : c.head_dim;
  MOE_RETURN_IF_ERROR(fp8_whole_blocks(
      c, tp, "o_proj ('" + n.layer(0, n.o_proj) + "')", c.num_attention_heads * head_width / tp,
      "num_attention_heads " + str(c.num_attention_heads) + (mla ? " x v_head_dim " : " x head_dim ") + str(head_width)));
  if (dense) {
    const int l = first_layer(c, false);
    MOE_RETURN_IF_ERROR(fp8_whole_blocks(c, tp, "'" + n.layer(l, n.dense_mlp_prefix + n.mlp_down) + "'",
                                         c.intermediate_size / tp,
                                         "intermediate_size " + str(c.intermediate_size)));
  }
  if (moe) {
    const int l = first_layer(c, true);
    MOE_RETURN_IF_ERROR(fp8_whole_blocks(c, tp, "'" + n.expert(l, 0, n.expert_w2) + "'", c.moe_intermediate_size / tp,
                                         "moe_intermediate_size " + str(c.moe_intermediate_size)));
    if (c.shared_expert_intermediate_size > 0) {
      MOE_RETURN_IF_ERROR(fp8_whole_blocks(c, tp, "'" + n.layer(l, n.shared_expert_prefix + n.mlp_down) + "'",
                                           c.shared_expert_intermediate_size / tp,
                                           "shared_expert_intermediate_size " +
                                               str(c.shared_expert_intermediate_size)));
    }
  }
  return ok_status();
}

ModelConfig tp_local_config(const ModelConfig& c, int tp) {
  ModelConfig local = c;
  auto split = [tp](int* v) {
    if (*v % tp == 0) *v /= tp;
  };
  split(&local.num_attention_heads);
  split(&local.num_key_value_heads);
  split(&local.intermediate_size);
  split(&local.moe_intermediate_size);
  split(&local.shared_expert_intermediate_size);
  return local;
}

VocabShard vocab_shard(int64_t vocab, int tp_rank, int tp) {
  const int64_t per = (vocab + tp - 1) / tp;
  VocabShard s;
  s.begin = std::min<int64_t>(vocab, tp_rank * per);
  s.end = std::min<int64_t>(vocab, s.begin + per);
  return s;
}

void TpWeightStorage::Free::operator()(uint8_t* p) const { ::operator delete[](p, kStorageAlign); }

uint8_t* TpWeightStorage::allocate(size_t n) {
  const size_t size = n == 0 ? 64 : n;
  auto* p = static_cast<uint8_t*>(::operator new[](size, kStorageAlign));
  std::memset(p, 0, size);
  buffers.emplace_back(p);
  bytes += size;
  return p;
}

StatusOr<ModelWeights> shard_weights_for_tp(const ModelConfig& full, const ModelWeights& w, int tp_rank, int tp,
                                            TpWeightStorage* storage) {
  MOE_CHECK(storage != nullptr);
  MOE_RETURN_IF_ERROR(check_tp_shardable(full, tp));
  if (tp_rank < 0 || tp_rank >= tp) {
    return invalid_argument("TP rank " + str(tp_rank) + " is out of range for --tp " + str(tp));
  }
  if (w.layers.size() != static_cast<size_t>(full.num_hidden_layers)) {
    return invalid_argument("the weights have " + str(static_cast<int64_t>(w.layers.size())) +
                            " layers but config.json num_hidden_layers is " + str(full.num_hidden_layers));
  }
  const Sharder s(full, tp_rank, tp, storage);
  ModelWeights out;
  MOE_ASSIGN_OR_RETURN(out.embed_tokens, s.vocab_rows(w.embed_tokens, s.names().embed_tokens));
  MOE_ASSIGN_OR_RETURN(out.lm_head, s.vocab_rows(w.lm_head, s.names().lm_head));
  out.final_norm = w.final_norm;
  out.layers.resize(w.layers.size());
  for (int l = 0; l < full.num_hidden_layers; ++l) {
    MOE_RETURN_IF_ERROR(s.layer(l, w.layers[static_cast<size_t>(l)], &out.layers[static_cast<size_t>(l)]));
  }
  return out;
}

}  // namespace moe
