// Decoder::forward_batch (several sequences per pass over a paged KV cache) against
// Decoder::forward (one sequence, contiguous cache): with batch-invariant kernels the
// logits are bitwise equal however the tokens are chunked and batched; without them
// they differ in the last bits only.
#include <gtest/gtest.h>

#include <cmath>

#include "moe/transformer/decoder.h"
#include "moe/model/hf_checkpoint.h"
#include "test_util.h"
#include "transformer/loaded_model.h"

namespace moe {
namespace {

using Model = moe::testing::LoadedModel;
using moe::testing::load_model;

// Max |a - b| over the logits of every sequence's last prompt token and of one decode
// step, batched vs alone, relative to the alone logits' range.
double batched_vs_alone(const std::string& dir, bool batch_invariant) {
  const DecoderOptions options{nullptr, KernelOptions{batch_invariant}};
  auto model = load_model(dir);
  const ModelConfig& c = model->config;
  const int V = c.vocab_size;
  const std::vector<int64_t> lengths = {7, 20, 33};
  std::vector<std::vector<int>> toks;
  for (size_t s = 0; s < lengths.size(); ++s) {
    std::vector<int> t;
    for (int64_t i = 0; i < lengths[s] + 1; ++i) t.push_back(static_cast<int>((s * 131 + i * 37 + 5) % (V - 3)) + 3);
    toks.push_back(t);
  }
  // Alone: prompt, then one decode step (the extra token).
  std::vector<std::vector<float>> alone_prompt, alone_decode;
  {
    Decoder dec(c, model->weights, options);
    for (size_t s = 0; s < toks.size(); ++s) {
      const KvCacheShape shape = kv_cache_shape(c);
      KVCache cache(c.num_hidden_layers, shape.heads, shape.k_dim, 64, shape.v_dim);
      std::vector<float> l1(V), l2(V);
      EXPECT_TRUE(dec.forward(toks[s].data(), lengths[s], 0, &cache, l1.data()).ok());
      EXPECT_TRUE(dec.forward(toks[s].data() + lengths[s], 1, lengths[s], &cache, l2.data()).ok());
      alone_prompt.push_back(l1);
      alone_decode.push_back(l2);
    }
  }
  // Batched: step 1 = chunks [0,5) [0,20) [0,10); step 2 = [5,7) [10,33) + seq 1's
  // decode; step 3 = decodes of seqs 0 and 2 (seq 1 decodes alongside, again).
  Decoder dec(c, model->weights, options);
  dec.reserve(64, 3);
  const int bs = 4;
  PagedKVCache kv(c.num_hidden_layers, kv_cache_shape(c), bs, 64);
  std::vector<std::vector<int32_t>> tables = {{9, 3, 0}, {1, 2, 4, 5, 6, 7}, {8, 10, 11, 12, 13, 14, 15, 16, 17}};
  std::vector<std::vector<float>> bp(3, std::vector<float>(V)), bd(3, std::vector<float>(V));
  using Seg = Decoder::BatchSegment;
  EXPECT_TRUE(dec.forward_batch({Seg{toks[0].data(), 5, 0, tables[0].data(), nullptr},
                                 Seg{toks[1].data(), 20, 0, tables[1].data(), bp[1].data()},
                                 Seg{toks[2].data(), 10, 0, tables[2].data(), nullptr}},
                                &kv).ok());
  EXPECT_TRUE(dec.forward_batch({Seg{toks[0].data() + 5, 2, 5, tables[0].data(), bp[0].data()},
                                 Seg{toks[1].data() + 20, 1, 20, tables[1].data(), bd[1].data()},
                                 Seg{toks[2].data() + 10, 23, 10, tables[2].data(), bp[2].data()}},
                                &kv).ok());
  EXPECT_TRUE(dec.forward_batch({Seg{toks[0].data() + 7, 1, 7, tables[0].data(), bd[0].data()},
                                 Seg{toks[2].data() + 33, 1, 33, tables[2].data(), bd[2].data()}},
                                &kv).ok());
  double worst = 0;
  for (int s = 0; s < 3; ++s) {
    for (const auto& [a, b] : {std::pair{&alone_prompt[s], &bp[s]}, std::pair{&alone_decode[s], &bd[s]}}) {
      const auto [lo, hi] = std::minmax_element(a->begin(), a->end());
      for (int v = 0; v < V; ++v) worst = std::max(worst, std::fabs((*a)[v] - (*b)[v]) / double(*hi - *lo));
    }
  }
  return worst;
}

class ForwardBatch : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardBatch, InvariantKernelsGiveBitwiseEqualLogits) {
  EXPECT_EQ(batched_vs_alone(testing::source_dir() + "/" + GetParam(), true), 0.0);
}

TEST_P(ForwardBatch, DefaultKernelsDifferInTheLastBitsOnly) {
  const double d = batched_vs_alone(testing::source_dir() + "/" + GetParam(), false);
  EXPECT_GT(d, 0.0) << "sgemm vs GEMV should not agree bitwise (else the invariant mode is moot)";
  EXPECT_LT(d, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Models, ForwardBatch,
                         ::testing::Values("models/tiny-mixtral-shakespeare", "tests/data/models/random-qwen2-moe",
                                           "tests/data/models/random-qwen3-moe",
                                           "models/tiny-deepseek-v3-shakespeare"),
                         [](const auto& info) { return std::to_string(info.index); });


// forward_batch beyond the workspaces sized by reserve() is refused, naming the limit,
// before anything runs.
TEST(ForwardBatchLimits, MoreTokensOrSegmentsThanReservedIsInvalidArgument) {
  auto model = load_model(testing::source_dir() + "/models/tiny-mixtral-shakespeare");
  const ModelConfig& c = model->config;
  Decoder dec(c, model->weights);
  dec.reserve(8, 2);
  PagedKVCache kv(c.num_hidden_layers, kv_cache_shape(c), 4, 16);
  const std::vector<int> toks(Decoder::kMaxChunk + 1, 5);
  const std::vector<int32_t> table = {0, 1, 2, 3};
  using Seg = Decoder::BatchSegment;
  const Status too_many_tokens = dec.forward_batch({Seg{toks.data(), Decoder::kMaxChunk + 1, 0, nullptr, nullptr}}, &kv);
  EXPECT_EQ(too_many_tokens.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many_tokens.message().find("513 tokens"), std::string::npos) << too_many_tokens.message();
  const Status too_many_segments = dec.forward_batch(
      {Seg{toks.data(), 1, 0, table.data(), nullptr}, Seg{toks.data(), 1, 0, table.data() + 1, nullptr},
       Seg{toks.data(), 1, 0, table.data() + 2, nullptr}},
      &kv);
  EXPECT_EQ(too_many_segments.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many_segments.message().find("3 segments"), std::string::npos) << too_many_segments.message();
  // Within the reserve it runs.
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  EXPECT_TRUE(dec.forward_batch({Seg{toks.data(), 3, 0, table.data(), logits.data()}}, &kv).ok());
}

}  // namespace
}  // namespace moe
