// Tensor and TensorView: shapes, strides, rows, alignment, descriptions (hand-computed).
#include "moe/tensor/tensor.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(Tensor, RowMajorStridesAndRows) {
  Tensor t = Tensor::zeros(DType::kF32, {3, 4});
  TensorView v = t.view();
  EXPECT_EQ(v.ndim(), 2);
  EXPECT_EQ(v.numel(), 12);
  EXPECT_EQ(v.bytes(), 48u);
  EXPECT_EQ(v.stride(0), 4);
  EXPECT_EQ(v.stride(1), 1);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  for (int i = 0; i < 12; ++i) t.data_as<float>()[i] = static_cast<float>(i);
  EXPECT_EQ(v.row<float>(2)[1], 9.0f);
  TensorView tail = v.rows(1, 2);
  EXPECT_EQ(tail.dim(0), 2);
  EXPECT_EQ(tail.row<float>(0)[0], 4.0f);
  EXPECT_EQ(tail.describe(), "[2, 4] F32 cpu");
}

TEST(Tensor, Bf16RowsAdvanceByTwoBytes) {
  Tensor t = Tensor::empty(DType::kBF16, {2, 3});
  EXPECT_EQ(t.bytes(), 12u);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(t.view().row<uint16_t>(1)) - static_cast<uint8_t*>(t.data()), 6);
}

TEST(Tensor, EmptyShapeAllocatesNothing) {
  Tensor t = Tensor::empty(DType::kF32, {0, 8});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.data(), nullptr);
  EXPECT_TRUE(t.view().empty());
}

TEST(Tensor, ViewOfCallerData) {
  const float data[6] = {1, 2, 3, 4, 5, 6};
  TensorView v = TensorView::f32(data, {2, 3});
  EXPECT_EQ(v.row<const float>(1)[2], 6.0f);
  EXPECT_EQ(v.describe(), "[2, 3] F32 cpu");
}

}  // namespace
}  // namespace moe
