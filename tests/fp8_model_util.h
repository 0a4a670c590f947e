// Test helpers for FP8 (e4m3, block-scaled) checkpoints, written independently of the
// product's conversion code: codes are decoded from the format's definition, and f32 is
// quantised the way DeepSeek-V3's checkpoints are made (per [br, bc] block, scale =
// amax / 448, code = round-to-nearest-even(value / scale), stored as
// `<name>_scale_inv` F32).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "moe/model/weights.h"
#include "moe/ops/linear.h"
#include "moe/tensor/dtype.h"
#include "safetensors_util.h"

namespace moe::testing {

// float8_e4m3fn code -> value, from the definition (NaN for 0x7f / 0xff).
inline double fp8_definition(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// Nearest e4m3 code to v (ties to the even code), saturating at +-448.
inline uint8_t fp8_encode(double v) {
  static const std::vector<double> kPositive = [] {  // codes 0..0x7e, increasing
    std::vector<double> out;
    for (int c = 0; c <= 0x7e; ++c) out.push_back(fp8_definition(static_cast<uint8_t>(c)));
    return out;
  }();
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(v);
  const auto it = std::lower_bound(kPositive.begin(), kPositive.end(), a);
  int best = static_cast<int>(it - kPositive.begin());
  if (best > 0x7e) {
    best = 0x7e;
  } else if (best > 0) {
    const double up = kPositive[static_cast<size_t>(best)] - a, down = a - kPositive[static_cast<size_t>(best - 1)];
    if (down < up || (down == up && ((best - 1) & 1) == 0)) best -= 1;
  }
  return static_cast<uint8_t>(sign | best);
}

struct Fp8Quantized {
  std::string codes;         // [rows, cols] bytes
  std::vector<float> scales; // [ceil(rows/br), ceil(cols/bc)]
};

inline Fp8Quantized quantize_fp8(const std::vector<float>& w, int64_t rows, int64_t cols, int br, int bc) {
  Fp8Quantized q;
  const int64_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
  q.codes.resize(static_cast<size_t>(rows * cols));
  q.scales.resize(static_cast<size_t>(sr * sc));
  for (int64_t i = 0; i < sr; ++i)
    for (int64_t j = 0; j < sc; ++j) {
      const int64_t r1 = std::min(rows, (i + 1) * br), c1 = std::min(cols, (j + 1) * bc);
      float amax = 0;
      for (int64_t r = i * br; r < r1; ++r)
        for (int64_t c = j * bc; c < c1; ++c) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + c)]));
      const float scale = amax > 0 ? amax / 448.0f : 1.0f;
      q.scales[static_cast<size_t>(i * sc + j)] = scale;
      for (int64_t r = i * br; r < r1; ++r)
        for (int64_t c = j * bc; c < c1; ++c)
          q.codes[static_cast<size_t>(r * cols + c)] =
              static_cast<char>(fp8_encode(static_cast<double>(w[static_cast<size_t>(r * cols + c)]) / scale));
    }
  return q;
}

// Whether DeepSeek-V3 would quantise this tensor of a Mixtral-named checkpoint: the
// attention projections and the expert matrices (not embeddings, lm_head, router, norms).
inline bool is_quantised_linear(const std::string& name) {
  return (name.find(".self_attn.") != std::string::npos && name.find("_proj.weight") != std::string::npos) ||
         (name.find(".experts.") != std::string::npos && name.ends_with(".weight"));
}

inline std::vector<float> tensor_to_f32(const StTensor& t) {
  size_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype == "F32") {
      std::memcpy(&out[i], t.bytes.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.bytes.data() + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(h) << 16;  // bf16
      std::memcpy(&out[i], &bits, 4);
    }
  }
  return out;
}

// Writes an FP8 copy of the single-file bf16/f32 model `src_dir` into `dst_dir`:
// model.safetensors with every quantised Linear as F8_E4M3 + `<name>_scale_inv`, and
// config.json with quantization_config (blocks [br, bc]). With `dequant_f32_dir`
// non-empty, also writes there the same model with those weights dequantised to F32
// (code value * scale, in double then rounded once): the reference model.
inline void make_fp8_model(const std::string& src_dir, const std::string& dst_dir, int br, int bc,
                           const std::string& dequant_f32_dir = "") {
  std::filesystem::create_directories(dst_dir);
  copy_model_dir(src_dir, dst_dir);
  if (!dequant_f32_dir.empty()) {
    std::filesystem::create_directories(dequant_f32_dir);
    copy_model_dir(src_dir, dequant_f32_dir);
  }
  const std::vector<StTensor> tensors = parse_safetensors(src_dir + "/model.safetensors");
  std::vector<StTensor> wide, narrow, deq;  // scales (4-byte) before the 1/2-byte tensors
  for (const StTensor& t : tensors) {
    if (!is_quantised_linear(t.name) || t.shape.size() != 2) {
      (t.dtype == "F32" ? wide : narrow).push_back(t);
      deq.push_back(t);
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const Fp8Quantized q = quantize_fp8(tensor_to_f32(t), rows, cols, br, bc);
    narrow.push_back({t.name, "F8_E4M3", t.shape, q.codes});
    const int64_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
    wide.push_back({t.name + "_scale_inv", "F32", {sr, sc}, to_bytes(q.scales)});
    std::vector<float> d(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        d[static_cast<size_t>(r * cols + c)] = static_cast<float>(
            fp8_definition(static_cast<uint8_t>(q.codes[static_cast<size_t>(r * cols + c)])) *
            q.scales[static_cast<size_t>((r / br) * sc + c / bc)]);
    deq.push_back({t.name, "F32", t.shape, to_bytes(d)});
  }
  std::vector<StTensor> all = wide;
  all.insert(all.end(), narrow.begin(), narrow.end());
  write_file(dst_dir + "/model.safetensors", serialize_safetensors(all, nlohmann::json{{"format", "pt"}}));
  nlohmann::json config = read_json(src_dir + "/config.json");
  config["quantization_config"] = {
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {br, bc}}};
  write_json(dst_dir + "/config.json", config);
  if (!dequant_f32_dir.empty()) {
    std::stable_partition(deq.begin(), deq.end(), [](const StTensor& t) { return t.dtype == "F32"; });
    write_file(dequant_f32_dir + "/model.safetensors", serialize_safetensors(deq, nlohmann::json{{"format", "pt"}}));
  }
}

// Whether two bindings of one expert carry the same bytes (matrices and FP8 block
// scales, with the same block layout) and give bitwise the same projections of a fixed
// input: what an expert that was copied, migrated, stored or re-loaded must satisfy.
inline ::testing::AssertionResult same_expert(const ExpertWeights& got, const ExpertWeights& want) {
  const Weight2D* g[3] = {&got.w1, &got.w2, &got.w3};
  const Weight2D* w[3] = {&want.w1, &want.w2, &want.w3};
  if (!got.loaded) return ::testing::AssertionFailure() << "not loaded";
  for (int i = 0; i < 3; ++i) {
    const std::string m = "w" + std::to_string(i + 1) + ": ";
    if (g[i]->dtype != w[i]->dtype || g[i]->rows != w[i]->rows || g[i]->cols != w[i]->cols) {
      return ::testing::AssertionFailure() << m << "dtype or shape differs";
    }
    if (g[i]->has_scale() != w[i]->has_scale()) {
      return ::testing::AssertionFailure() << m << (g[i]->has_scale() ? "has" : "lacks") << " block scales";
    }
    if (std::memcmp(g[i]->data, w[i]->data, w[i]->data_bytes()) != 0) return ::testing::AssertionFailure() << m << "data differs";
    if (w[i]->has_scale()) {
      if (g[i]->scale_dtype != w[i]->scale_dtype || g[i]->block_rows != w[i]->block_rows ||
          g[i]->block_cols != w[i]->block_cols || std::memcmp(g[i]->scale, w[i]->scale, w[i]->scale_bytes()) != 0) {
        return ::testing::AssertionFailure() << m << "block scales differ";
      }
    }
    std::vector<float> x(static_cast<size_t>(w[i]->cols));
    for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(std::sin(0.37 * static_cast<double>(j) + i));
    std::vector<float> yg(static_cast<size_t>(w[i]->rows)), yw(yg.size());
    linear(x.data(), 1, *g[i], yg.data(), KernelOptions{});
    linear(x.data(), 1, *w[i], yw.data(), KernelOptions{});
    if (std::memcmp(yg.data(), yw.data(), yg.size() * sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << m << "outputs differ";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace moe::testing
