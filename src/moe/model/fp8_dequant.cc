#include "moe/model/fp8_dequant.h"

#include <algorithm>
#include <cstring>

namespace moe {
namespace {

// rows [r0, r1) of w as bf16 into out.
void rows_to_bf16(const Weight2D& w, int64_t r0, int64_t r1, uint16_t* out, std::vector<float>* scratch) {
  const size_t n = static_cast<size_t>((r1 - r0) * w.cols);
  scratch->resize(n);
  dequantize_rows_f32(w, r0, r1, scratch->data());
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16((*scratch)[i]);
}

void write_bf16(const Weight2D& w, uint8_t* dst) {
  std::vector<float> scratch;
  constexpr int64_t kRows = 64;  // f32 scratch of 64 rows at a time
  for (int64_t r0 = 0; r0 < w.rows; r0 += kRows) {
    const int64_t r1 = std::min(w.rows, r0 + kRows);
    std::vector<uint16_t> block(static_cast<size_t>((r1 - r0) * w.cols));
    rows_to_bf16(w, r0, r1, block.data(), &scratch);
    std::memcpy(dst + static_cast<size_t>(r0 * w.cols) * 2, block.data(), block.size() * 2);
  }
}

Weight2D bf16_view(const Weight2D& w, const uint8_t* data) { return Weight2D{data, DType::kBF16, w.rows, w.cols}; }

bool is_fp8(const Weight2D& w) { return w.data != nullptr && w.dtype == DType::kF8E4M3; }

}  // namespace

Weight2D dequantize_to_bf16(const Weight2D& w, std::vector<uint8_t>* buffer) {
  std::vector<uint8_t> out(static_cast<size_t>(w.rows * w.cols) * 2);
  write_bf16(w, out.data());
  *buffer = std::move(out);
  return bf16_view(w, buffer->data());
}

bool dequantize_expert_to_bf16(ExpertWeights* expert, std::vector<uint8_t>* buffer) {
  Weight2D* ms[3] = {&expert->w1, &expert->w2, &expert->w3};
  if (!is_fp8(*ms[0]) && !is_fp8(*ms[1]) && !is_fp8(*ms[2])) return false;
  size_t total = 0;
  for (const Weight2D* m : ms) total += static_cast<size_t>(m->rows * m->cols) * 2;
  std::vector<uint8_t> out(total);
  size_t offsets[3];
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    offsets[i] = at;
    write_bf16(*ms[i], out.data() + at);
    at += static_cast<size_t>(ms[i]->rows * ms[i]->cols) * 2;
  }
  *buffer = std::move(out);  // the old bytes (perhaps what *ms pointed to) are gone from here on
  for (int i = 0; i < 3; ++i) *ms[i] = bf16_view(*ms[i], buffer->data() + offsets[i]);
  return true;
}

int64_t dequantize_weights_to_bf16(ModelWeights* weights, std::vector<std::vector<uint8_t>>* owned,
                                   const ExpertBufferFn& expert_buffer) {
  int64_t n = 0;
  auto one = [&](Weight2D* w) {
    if (!is_fp8(*w)) return;
    owned->emplace_back();
    *w = dequantize_to_bf16(*w, &owned->back());
    ++n;
  };
  auto mlp = [&](ExpertWeights* e) {
    for (Weight2D* w : {&e->w1, &e->w2, &e->w3}) one(w);
  };
  for (size_t l = 0; l < weights->layers.size(); ++l) {
    LayerWeights& L = weights->layers[l];
    for (Weight2D* w : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.mla.q_a_proj, &L.mla.q_b_proj, &L.mla.q_proj,
                        &L.mla.kv_a_proj, &L.mla.kv_b_proj}) {
      one(w);
    }
    mlp(&L.dense_mlp);
    mlp(&L.shared_expert);
    for (size_t e = 0; e < L.experts.size(); ++e) {
      ExpertWeights& ex = L.experts[e];
      if (!ex.loaded || !(is_fp8(ex.w1) || is_fp8(ex.w2) || is_fp8(ex.w3))) continue;
      dequantize_expert_to_bf16(&ex, expert_buffer(static_cast<int>(l), static_cast<int>(e)));
      n += 3;
    }
  }
  return n;
}

}  // namespace moe
