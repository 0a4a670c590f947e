#include "moe/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "moe/core/check.h"

namespace moe {
namespace {

bool yarn(const RopeParams& p) { return p.scaling == RopeParams::Scaling::kYarn; }

// YaRN's inverse dimension formula: the (fractional) pair index whose wavelength makes
// `rotations` turns over `max_pos` positions.
double correction_dim(double rotations, int dim, double base, double max_pos) {
  return dim * std::log(max_pos / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

double yarn_get_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

double yarn_attention_factor(const RopeParams& p) {
  if (!yarn(p)) return 1.0;
  if (p.attention_factor > 0.0) return p.attention_factor;
  if (p.mscale != 0.0 && p.mscale_all_dim != 0.0) {
    return yarn_get_mscale(p.factor, p.mscale) / yarn_get_mscale(p.factor, p.mscale_all_dim);
  }
  return yarn_get_mscale(p.factor);
}

double yarn_softmax_scale_multiplier(const RopeParams& p) {
  if (!yarn(p) || p.mscale_all_dim == 0.0) return 1.0;
  const double m = yarn_get_mscale(p.factor, p.mscale_all_dim);
  return m * m;
}

// f32 throughout, in transformers' order of operations (rope_init_fn of
// modeling_rope_utils.py), so the frequencies match torch's to the last bit or so.
std::vector<float> rope_inv_freq(const RopeParams& p) {
  MOE_CHECK(p.dim > 0 && p.dim % 2 == 0 && p.theta > 0.0);
  const int half = p.dim / 2;
  std::vector<float> pos_freq(static_cast<size_t>(half)), inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(p.dim);
    pos_freq[static_cast<size_t>(i)] = std::pow(static_cast<float>(p.theta), exponent);
    inv[static_cast<size_t>(i)] = 1.0f / pos_freq[static_cast<size_t>(i)];
  }
  if (p.scaling == RopeParams::Scaling::kLinear) {
    for (float& f : inv) f /= static_cast<float>(p.factor);
  } else if (yarn(p)) {
    MOE_CHECK(p.factor >= 1.0 && p.original_max_position_embeddings > 0 && p.beta_fast > 0.0 && p.beta_slow > 0.0);
    const double orig = p.original_max_position_embeddings;
    double low = std::floor(correction_dim(p.beta_fast, p.dim, p.theta, orig));
    double high = std::ceil(correction_dim(p.beta_slow, p.dim, p.theta, orig));
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(p.dim - 1));
    if (low == high) high += 0.001;  // as transformers: avoids a zero-width ramp
    const float flow = static_cast<float>(low), width = static_cast<float>(high - low);
    for (int i = 0; i < half; ++i) {
      const size_t k = static_cast<size_t>(i);
      const float ramp = std::clamp((static_cast<float>(i) - flow) / width, 0.0f, 1.0f);
      const float extrapolation = 1.0f - ramp;  // 1: keep the original frequency
      const float interpolated = 1.0f / (static_cast<float>(p.factor) * pos_freq[k]);
      inv[k] = interpolated * (1.0f - extrapolation) + inv[k] * extrapolation;
    }
  }
  return inv;
}

RopeTable::RopeTable(const RopeParams& p)
    : dim_(p.dim),
      layout_(p.layout),
      max_positions_(p.max_positions),
      cached_(std::min(p.max_positions, kMaxCachedPositions)),
      attention_factor_(static_cast<float>(yarn_attention_factor(p))),
      inv_freq_(rope_inv_freq(p)) {
  MOE_CHECK(p.max_positions >= 0);
  const int half = dim_ / 2;
  cos_.resize(static_cast<size_t>(cached_ * half));
  sin_.resize(cos_.size());
  for (int64_t pos = 0; pos < cached_; ++pos) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq_[static_cast<size_t>(i)];
      cos_[static_cast<size_t>(pos * half + i)] = std::cos(angle) * attention_factor_;
      sin_[static_cast<size_t>(pos * half + i)] = std::sin(angle) * attention_factor_;
    }
  }
}

RopeTable::RopeTable(int head_dim, double theta, int64_t max_positions)
    : RopeTable(RopeParams{.dim = head_dim, .theta = theta, .max_positions = max_positions}) {}

void RopeTable::angles(int64_t p, float* c, float* s) const {
  const int half = dim_ / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(p) * inv_freq_[static_cast<size_t>(i)];
    c[i] = std::cos(angle) * attention_factor_;
    s[i] = std::sin(angle) * attention_factor_;
  }
}

void RopeTable::apply(const TensorView& x, int64_t start_pos) const {
  MOE_CHECK(x.dtype() == DType::kF32 && x.ndim() == 3 && x.is_contiguous() && x.dim(2) == dim_);
  switch (x.device()) {
    case Device::kCpu:
      apply(x.data_as<float>(), x.dim(0), x.dim(1) * x.dim(2), static_cast<int>(x.dim(1)), start_pos);
      return;
  }
  MOE_CHECK(false && "rope: no kernel for this device");
}

void RopeTable::apply(const Rows& rows, int64_t start_pos) const {
  const int64_t m = rows.m, row_stride = rows.row_stride, head_stride = rows.head_stride == 0 ? dim_ : rows.head_stride;
  float* const x = rows.x;
  const int num_heads = rows.num_heads;
  MOE_CHECK(start_pos >= 0 && m >= 0 && start_pos + m <= max_positions_);
  const int half = dim_ / 2;
  std::vector<float> computed;  // cos | sin of a position past the table
  for (int64_t t = 0; t < m; ++t) {
    const int64_t pos = start_pos + t;
    const float* c;
    const float* s;
    if (pos < cached_) {
      c = cos_.data() + pos * half;
      s = sin_.data() + pos * half;
    } else {
      computed.resize(static_cast<size_t>(dim_));
      angles(pos, computed.data(), computed.data() + half);
      c = computed.data();
      s = computed.data() + half;
    }
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + t * row_stride + static_cast<int64_t>(h) * head_stride;
      if (layout_ == RopeLayout::kRotateHalf) {
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        }
      } else {
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c[i] - b * s[i];
          v[2 * i + 1] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

}  // namespace moe
