#include "moe/model/int8_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace moe {
namespace {

constexpr int64_t kBlock = 32;

size_t int8_bytes(const Weight2D& w) {
  return static_cast<size_t>(w.rows * w.cols) + static_cast<size_t>(w.rows * (w.cols / kBlock)) * sizeof(float);
}

// Quantises w into codes [rows * cols] and scales [rows * cols / 32] at dst.
void write_int8(const Weight2D& w, uint8_t* dst) {
  const int64_t k = w.cols, nb = k / kBlock;
  int8_t* codes = reinterpret_cast<int8_t*>(dst);
  float* scales = reinterpret_cast<float*>(dst + static_cast<size_t>(w.rows * k));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_rows_f32(w, r, r + 1, row.data());
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = row.data() + b * kBlock;
      float amax = 0.0f;
      for (int64_t c = 0; c < kBlock; ++c) amax = std::max(amax, std::fabs(v[c]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      scales[r * nb + b] = d;
      for (int64_t c = 0; c < kBlock; ++c) {
        const float q = std::nearbyint(v[c] * id);
        codes[r * k + b * kBlock + c] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
      }
    }
  }
}

Weight2D int8_view(const Weight2D& w, const uint8_t* data) {
  Weight2D v{data, DType::kI8, w.rows, w.cols};
  v.scale = data + static_cast<size_t>(w.rows * w.cols);
  v.scale_dtype = DType::kF32;
  v.block_rows = 1;
  v.block_cols = static_cast<int32_t>(kBlock);
  return v;
}

}  // namespace

bool can_quantize_int8(const Weight2D& w) {
  return w.data != nullptr && w.rows > 0 && w.dtype != DType::kI8 && w.cols > 0 && w.cols % kBlock == 0;
}

Weight2D quantize_to_int8(const Weight2D& w, std::vector<uint8_t>* buffer) {
  std::vector<uint8_t> out(int8_bytes(w));
  write_int8(w, out.data());
  *buffer = std::move(out);
  return int8_view(w, buffer->data());
}

bool quantize_expert_to_int8(ExpertWeights* expert, std::vector<uint8_t>* buffer) {
  Weight2D* ms[3] = {&expert->w1, &expert->w2, &expert->w3};
  bool q[3];
  size_t total = 0;
  for (int i = 0; i < 3; ++i) {
    q[i] = can_quantize_int8(*ms[i]);
    total += q[i] ? int8_bytes(*ms[i]) : ms[i]->bytes();
  }
  if (!q[0] && !q[1] && !q[2]) return false;
  std::vector<uint8_t> out(total);
  size_t offsets[3];
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    offsets[i] = at;
    if (q[i]) {
      write_int8(*ms[i], out.data() + at);
      at += int8_bytes(*ms[i]);
    } else {  // kept as it is (copied: *buffer may hold it now), with its scales after it
      std::memcpy(out.data() + at, ms[i]->data, ms[i]->data_bytes());
      if (ms[i]->has_scale()) std::memcpy(out.data() + at + ms[i]->data_bytes(), ms[i]->scale, ms[i]->scale_bytes());
      at += ms[i]->bytes();
    }
  }
  *buffer = std::move(out);
  for (int i = 0; i < 3; ++i) {
    uint8_t* p = buffer->data() + offsets[i];
    if (q[i]) {
      *ms[i] = int8_view(*ms[i], p);
    } else {
      const size_t data_bytes = ms[i]->data_bytes();
      ms[i]->data = p;
      if (ms[i]->has_scale()) ms[i]->scale = p + data_bytes;
    }
  }
  return true;
}

int64_t quantize_weights_to_int8(ModelWeights* weights, std::vector<std::vector<uint8_t>>* owned,
                                 const Int8ExpertBufferFn& expert_buffer) {
  int64_t n = 0;
  auto one = [&](Weight2D* w) {
    if (!can_quantize_int8(*w)) return;
    owned->emplace_back();
    *w = quantize_to_int8(*w, &owned->back());
    ++n;
  };
  for (size_t l = 0; l < weights->layers.size(); ++l) {
    LayerWeights& L = weights->layers[l];
    for (Weight2D* w : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.mla.q_a_proj, &L.mla.q_b_proj, &L.mla.q_proj,
                        &L.mla.kv_a_proj, &L.mla.kv_b_proj, &L.dense_mlp.w1, &L.dense_mlp.w2, &L.dense_mlp.w3,
                        &L.shared_expert.w1, &L.shared_expert.w2, &L.shared_expert.w3}) {
      one(w);
    }
    for (size_t e = 0; e < L.experts.size(); ++e) {
      ExpertWeights& ex = L.experts[e];
      if (!ex.loaded) continue;
      std::vector<uint8_t>* buf = expert_buffer(static_cast<int>(l), static_cast<int>(e));
      for (const Weight2D* w : {&ex.w1, &ex.w2, &ex.w3}) n += can_quantize_int8(*w) ? 1 : 0;
      quantize_expert_to_int8(&ex, buf);
    }
  }
  one(&weights->lm_head);
  return n;
}

}  // namespace moe
