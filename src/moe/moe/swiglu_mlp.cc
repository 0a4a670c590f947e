#include "moe/moe/swiglu_mlp.h"

#include <cmath>

#include "moe/ops/activation.h"
#include "moe/ops/linear.h"

namespace moe {
namespace {

float* grow(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

}  // namespace

void swiglu_mlp(const ExpertWeights& w, const float* x, int64_t m, MlpWorkspace* ws, float* out) {
  if (m == 0) return;
  const int64_t inter = w.w1.rows;
  float* gate = grow(ws->gate, m * inter);
  float* up = grow(ws->up, m * inter);
  const LinearJob jobs[2] = {{x, m, &w.w1, gate}, {x, m, &w.w3, up}};
  linear_many(jobs, 2, ws->kernel);
  silu_mul(gate, up, m * inter, gate);
  linear(gate, m, w.w2, out, ws->kernel);
}

void add_shared_expert(const LayerWeights& layer, const float* x, int64_t m, MlpWorkspace* ws, float* out) {
  if (!layer.shared_expert.loaded || m == 0) return;
  const int64_t hidden = layer.shared_expert.w2.rows;
  float* y = grow(ws->y, m * hidden);
  swiglu_mlp(layer.shared_expert, x, m, ws, y);
  const bool gated = layer.shared_expert_gate.data != nullptr;
  float* g = grow(ws->gate_logit, m);
  if (gated) linear(x, m, layer.shared_expert_gate, g, ws->kernel);  // [m, 1]
  for (int64_t t = 0; t < m; ++t) {
    const float scale = gated ? 1.0f / (1.0f + std::exp(-g[t])) : 1.0f;
    float* dst = out + t * hidden;
    const float* src = y + t * hidden;
    for (int64_t h = 0; h < hidden; ++h) dst[h] += scale * src[h];
  }
}

}  // namespace moe
