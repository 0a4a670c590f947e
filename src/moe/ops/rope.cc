#include "moe/ops/rope.h"

#include <cmath>

#include "moe/core/check.h"

namespace moe {

RopeTable::RopeTable(int head_dim, double theta, int64_t max_positions)
    : head_dim_(head_dim), max_positions_(max_positions) {
  const int half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  cos_.resize(static_cast<size_t>(max_positions * half));
  sin_.resize(cos_.size());
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      cos_[static_cast<size_t>(p * half + i)] = std::cos(angle);
      sin_[static_cast<size_t>(p * half + i)] = std::sin(angle);
    }
  }
}

void RopeTable::apply(const TensorView& x, int64_t start_pos) const {
  MOE_CHECK(x.dtype() == DType::kF32 && x.ndim() == 3 && x.is_contiguous() && x.dim(2) == head_dim_);
  MOE_CHECK(start_pos >= 0);
  switch (x.device()) {
    case Device::kCpu:
      apply(x.data_as<float>(), x.dim(0), x.dim(1) * x.dim(2), static_cast<int>(x.dim(1)), start_pos);
      return;
  }
  MOE_CHECK(false && "rope: no kernel for this device");
}

void RopeTable::apply(float* x, int64_t m, int64_t row_stride, int num_heads, int64_t start_pos) const {
  MOE_CHECK(start_pos + m <= max_positions_);
  const int half = head_dim_ / 2;
  for (int64_t t = 0; t < m; ++t) {
    const float* c = cos_.data() + (start_pos + t) * half;
    const float* s = sin_.data() + (start_pos + t) * half;
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + t * row_stride + static_cast<int64_t>(h) * head_dim_;
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

}  // namespace moe
