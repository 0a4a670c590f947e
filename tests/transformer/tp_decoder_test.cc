// The decoder under tensor parallelism (decoder.h TpOptions, model/tp_shard.h) against
// the single-process decoder on the full weights: TP 2 and TP 4 as threads of one
// InProcessGroup, the driver (rank 0) running a script of forward (contiguous cache:
// a prompt, greedy decode steps, an empty chunk) and forward_batch (paged cache: three
// segments, last-token and all-token logits, an empty batch), the followers replaying it
// through tp_follow. Logits within 1e-4 of each row's range, greedy tokens identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "contains_util.h"
#include "fp8_model_util.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/comm/parallel_groups.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/tp_shard.h"
#include "moe/transformer/decoder.h"
#include "test_util.h"
#include "transformer/loaded_model.h"

namespace moe {
namespace {

using Model = moe::testing::LoadedModel;
using moe::testing::load_model;

// What the driver saw: every logits row it asked for, and its greedy tokens.
struct Run {
  std::vector<std::vector<float>> logits;  // rows of [vocab]
  std::vector<int> tokens;
};

constexpr int kDecodeSteps = 4;
constexpr int kDriverCalls = 1 + kDecodeSteps + 1 + 3;  // forward calls drive() makes
constexpr int kReserveTokens = 64, kReserveSegments = 4, kBlockSize = 4, kNumBlocks = 40;

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

std::vector<int> prompt_tokens(int n, int salt, int vocab) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((salt * 131 + i * 37 + 5) % (vocab - 3) + 3);
  return t;
}

void push_rows(const std::vector<float>& flat, int64_t vocab, Run* run) {
  for (size_t r = 0; r * vocab < flat.size(); ++r) {
    run->logits.emplace_back(flat.begin() + static_cast<int64_t>(r) * vocab,
                             flat.begin() + static_cast<int64_t>(r + 1) * vocab);
  }
}

// The script (exactly kDriverCalls forward calls). `c` is the decoder's config (its KV
// shape; vocab_size is the full vocabulary either way).
Status drive(Decoder& dec, const ModelConfig& c, Run* run) {
  const int64_t V = c.vocab_size;
  const KvCacheShape shape = kv_cache_shape(c);
  KVCache cache(c.num_hidden_layers, shape.heads, shape.k_dim, 64, shape.v_dim);
  const std::vector<int> prompt = prompt_tokens(9, 1, c.vocab_size);
  std::vector<float> l(static_cast<size_t>(V));
  MOE_RETURN_IF_ERROR(dec.forward(prompt.data(), 9, 0, &cache, l.data()));
  run->logits.push_back(l);
  for (int d = 0; d < kDecodeSteps; ++d) {
    const int tok = argmax(l);
    run->tokens.push_back(tok);
    MOE_RETURN_IF_ERROR(dec.forward(&tok, 1, 9 + d, &cache, l.data()));
    run->logits.push_back(l);
  }
  MOE_RETURN_IF_ERROR(dec.forward_chunk(nullptr, 0, 0, nullptr, nullptr));  // an empty step
  // Paged: three sequences; step 1 prefills 7 (all logits), 5 (last) and 3 (none); step
  // 2 decodes A, continues B by 2 and C by 1 (all logits of C's row).
  PagedKVCache kv(c.num_hidden_layers, shape, kBlockSize, kNumBlocks);
  const std::vector<int32_t> ta = {7, 3, 0}, tb = {1, 2, 4}, tc = {9, 8};
  const std::vector<int> a = prompt_tokens(8, 2, c.vocab_size), b = prompt_tokens(7, 3, c.vocab_size),
                         cc = prompt_tokens(4, 4, c.vocab_size);
  std::vector<float> a_all(static_cast<size_t>(7 * V)), b_last(static_cast<size_t>(V));
  using Seg = Decoder::BatchSegment;
  MOE_RETURN_IF_ERROR(dec.forward_batch({Seg{a.data(), 7, 0, ta.data(), nullptr, a_all.data()},
                                         Seg{b.data(), 5, 0, tb.data(), b_last.data(), nullptr},
                                         Seg{cc.data(), 3, 0, tc.data(), nullptr, nullptr}},
                                        &kv));
  push_rows(a_all, V, run);
  run->logits.push_back(b_last);
  std::vector<float> a_last(static_cast<size_t>(V)), b2(static_cast<size_t>(V)), c_all(static_cast<size_t>(V));
  MOE_RETURN_IF_ERROR(dec.forward_batch({Seg{a.data() + 7, 1, 7, ta.data(), a_last.data(), nullptr},
                                         Seg{b.data() + 5, 2, 5, tb.data(), b2.data(), nullptr},
                                         Seg{cc.data() + 3, 1, 3, tc.data(), nullptr, c_all.data()}},
                                        &kv));
  for (const auto* v : {&a_last, &b2, &c_all}) run->logits.push_back(*v);
  run->tokens.push_back(argmax(a_last));
  run->tokens.push_back(argmax(b2));
  return dec.forward_batch({Seg{a.data(), 0, 8, ta.data(), nullptr, nullptr}}, &kv);  // an empty batch
}

Run reference(const Model& model) {
  Decoder dec(model.config, model.weights);
  dec.reserve(kReserveTokens, kReserveSegments);
  Run run;
  const Status st = drive(dec, model.config, &run);
  EXPECT_TRUE(st.ok()) << st.message();
  return run;
}

// Follower: replays kDriverCalls forwards on its own caches.
Status follow(Decoder& dec, const ModelConfig& local) {
  const KvCacheShape shape = kv_cache_shape(local);
  std::unique_ptr<KVCache> kv;
  std::unique_ptr<PagedKVCache> paged;
  TpFollowerCaches caches;
  caches.contiguous = [&](int64_t capacity) {
    if (!kv || kv->capacity() != capacity) {
      kv = std::make_unique<KVCache>(local.num_hidden_layers, shape.heads, shape.k_dim, capacity, shape.v_dim);
    }
    return kv.get();
  };
  caches.paged = [&](int64_t block_size, int64_t num_blocks) {
    if (!paged || paged->block_size() != block_size || paged->num_blocks() != num_blocks) {
      paged = std::make_unique<PagedKVCache>(local.num_hidden_layers, shape, static_cast<int>(block_size), num_blocks);
    }
    return paged.get();
  };
  for (int i = 0; i < kDriverCalls; ++i) MOE_RETURN_IF_ERROR(dec.tp_follow(caches));
  return ok_status();
}

// The script under TP over `tp` threads; the driver's Run.
Run tp_run(const Model& model, int tp) {
  InProcessGroup group(tp);
  Run run;
  const ModelConfig local = tp_local_config(model.config, tp);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    TpWeightStorage storage;
    MOE_ASSIGN_OR_RETURN(ModelWeights w, shard_weights_for_tp(model.config, model.weights, comm.rank(), tp, &storage));
    DecoderOptions options;
    options.tp.comm = &comm;
    options.tp.vocab_begin = vocab_shard(model.config.vocab_size, comm.rank(), tp).begin;
    options.tp.driver_group = true;
    Decoder dec(local, w, options);
    dec.reserve(kReserveTokens, kReserveSegments);
    if (comm.rank() == 0) return drive(dec, local, &run);
    return follow(dec, local);
  });
  EXPECT_TRUE(st.ok()) << st.message();
  return run;
}

// Max over rows of max |got - want| / range(want).
double worst_relative(const Run& want, const Run& got) {
  EXPECT_EQ(got.logits.size(), want.logits.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.logits.size(), want.logits.size()); ++i) {
    const auto& w = want.logits[i];
    const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
    EXPECT_EQ(got.logits[i].size(), w.size());
    for (size_t v = 0; v < w.size(); ++v) {
      worst = std::max(worst, std::fabs(double(got.logits[i][v]) - w[v]) / double(*hi - *lo));
    }
  }
  return worst;
}

void expect_tp_matches(const std::string& dir, const std::vector<int>& tps) {
  auto model = load_model(dir);
  const Run want = reference(*model);
  for (int tp : tps) {
    SCOPED_TRACE(dir + " --tp " + std::to_string(tp));
    ASSERT_TRUE(check_tp_shardable(model->config, tp).ok());
    const Run got = tp_run(*model, tp);
    EXPECT_EQ(got.tokens, want.tokens);
    const double worst = worst_relative(want, got);
    EXPECT_LT(worst, 1e-4);
    EXPECT_GT(worst, 0.0) << "TP summation order should differ in the last bits (is TP on at all?)";
  }
}

std::string model_path(const std::string& rel) { return testing::source_dir() + "/" + rel; }

TEST(TpDecoder, MixtralTp2) { expect_tp_matches(testing::tiny_model_dir(), {2}); }

TEST(TpDecoder, DeepseekV3MlaTp2AndTp4) {
  expect_tp_matches(model_path("models/tiny-deepseek-v3-shakespeare"), {2, 4});
}

TEST(TpDecoder, Qwen2QkvBiasSharedExpertGateTp2) {
  expect_tp_matches(model_path("tests/data/models/random-qwen2-moe"), {2});
}

TEST(TpDecoder, Qwen3QkNormTp2) { expect_tp_matches(model_path("tests/data/models/random-qwen3-moe"), {2}); }

TEST(TpDecoder, DeepseekV2LiteNoQLoraTp4) {
  expect_tp_matches(model_path("tests/data/models/random-deepseek-v2-lite"), {4});
}

TEST(TpDecoder, Fp8MixtralTp2) {
  testing::ScopedTempDir dir("tp_decoder_fp8");
  testing::make_fp8_model(testing::tiny_model_dir(), dir.file("fp8"), 24, 32);
  expect_tp_matches(dir.file("fp8"), {2});
}

// Hybrid TP x EP: 4 threads as 2 nodes of 2; TP inside a node, EP across
// (make_parallel_groups). Each EP rank holds a contiguous half of every layer's experts,
// TP-split. Non-fused: the driver group's ranks dispatch all their tokens over their EP
// group and all-reduce the partial outputs. Fused (MixServe): MoE layers run
// MoeBlock::forward_fused (RS -> A2A -> AG), with `overlap` two micro-batches. The other
// node's ranks only join the exchanges.
struct HybridMode {
  bool fused = false;
  bool overlap = false;
};

Run hybrid_run(const Model& model, int tp, int ep, HybridMode mode) {
  InProcessGroup group(tp * ep, /*ranks_per_node=*/tp);
  Run run;
  const ModelConfig local = tp_local_config(model.config, tp);
  const Status st = run_ranks(group, [&](Communicator& world) -> Status {
    MOE_ASSIGN_OR_RETURN(ParallelGroups groups, make_parallel_groups(world, tp, ep));
    const ExpertPlacement placement = ExpertPlacement::contiguous(model.config.router.num_experts, ep);
    ModelWeights held = model.weights;  // this EP rank's experts only
    for (LayerWeights& L : held.layers) {
      for (size_t e = 0; e < L.experts.size(); ++e) {
        if (!placement.holds(groups.ep_rank, static_cast<int>(e))) L.experts[e] = ExpertWeights{};
      }
    }
    TpWeightStorage storage;
    MOE_ASSIGN_OR_RETURN(ModelWeights w, shard_weights_for_tp(model.config, held, groups.tp_rank, tp, &storage));
    std::vector<EpContext> contexts(static_cast<size_t>(model.config.num_hidden_layers));
    for (size_t l = 0; l < contexts.size(); ++l) {
      contexts[l].comm = groups.ep;
      contexts[l].placement = placement;
      contexts[l].layer_id = static_cast<int>(l);
      contexts[l].options.overlap = mode.overlap;
    }
    DecoderOptions options;
    options.ep = &contexts;
    options.tp = TpOptions{groups.tp, vocab_shard(model.config.vocab_size, groups.tp_rank, tp).begin,
                           groups.ep_rank == 0, mode.fused};
    Decoder dec(local, w, options);
    dec.reserve(kReserveTokens, kReserveSegments);
    if (groups.ep_rank == 0) return groups.tp_rank == 0 ? drive(dec, local, &run) : follow(dec, local);
    for (int i = 0; i < kDriverCalls; ++i) MOE_RETURN_IF_ERROR(dec.forward_chunk(nullptr, 0, 0, nullptr, nullptr));
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.message();
  return run;
}

void expect_hybrid_matches(const std::string& dir) {
  auto model = load_model(dir);
  const Run want = reference(*model);
  for (const HybridMode mode : {HybridMode{false, false}, HybridMode{true, false}, HybridMode{true, true}}) {
    SCOPED_TRACE(std::string("fused ") + (mode.fused ? "on" : "off") + ", overlap " + (mode.overlap ? "on" : "off"));
    const Run got = hybrid_run(*model, 2, 2, mode);
    EXPECT_EQ(got.tokens, want.tokens);
    const double worst = worst_relative(want, got);
    EXPECT_LT(worst, 1e-4);
    EXPECT_GT(worst, 0.0);
  }
}

TEST(TpDecoderHybrid, MixtralTp2Ep2FusedAndNot) { expect_hybrid_matches(testing::tiny_model_dir()); }

TEST(TpDecoderHybrid, DeepseekV3Tp2Ep2FusedAndNot) {
  expect_hybrid_matches(model_path("models/tiny-deepseek-v3-shakespeare"));
}

// --- errors ---

TEST(TpDecoderErrors, TpFollowOnTheDriverOrWithoutTpIsFailedPrecondition) {
  auto model = load_model(testing::tiny_model_dir());
  Decoder plain(model->config, model->weights);
  EXPECT_EQ(plain.tp_follow({}).code(), StatusCode::kFailedPrecondition);
  InProcessGroup group(2, 0, /*timeout_seconds=*/1.0);
  const ModelConfig local = tp_local_config(model->config, 2);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    TpWeightStorage storage;
    MOE_ASSIGN_OR_RETURN(ModelWeights w, shard_weights_for_tp(model->config, model->weights, comm.rank(), 2, &storage));
    DecoderOptions options;
    options.tp = TpOptions{&comm, vocab_shard(model->config.vocab_size, comm.rank(), 2).begin, true, false};
    Decoder dec(local, w, options);
    if (comm.rank() == 0) {
      const Status s = dec.tp_follow({});
      EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
      EXPECT_CONTAINS(s.message(), "TP ranks > 0");
      // A prompt into a contiguous cache the follower cannot provide.
      const KvCacheShape shape = kv_cache_shape(local);
      KVCache cache(local.num_hidden_layers, shape.heads, shape.k_dim, 16, shape.v_dim);
      const int tokens[2] = {5, 6};
      return dec.forward(tokens, 2, 0, &cache, nullptr);  // the follower never joins the all-reduce
    }
    const Status s = dec.tp_follow({});  // no cache callbacks
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_CONTAINS(s.message(), "no contiguous KV cache of capacity 16");
    return ok_status();
  });
  // The driver is left waiting in the embedding's all-reduce: DeadlineExceeded, not a hang.
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.message();
}

// A malformed broadcast (a hand-made driver on rank 0 sends the header, and the body
// when the follower will read it): the follower refuses it by name, never crashes.
struct BadBatch {
  std::vector<int64_t> header;  // kind, a, b, num_segments, num_tokens, body length
  std::vector<int64_t> body;
  bool follower_reads_body;
  const char* message;
};

TEST(TpDecoderErrors, MalformedBroadcastIsRefused) {
  auto model = load_model(testing::tiny_model_dir());
  const ModelConfig local = tp_local_config(model->config, 2);
  const std::vector<BadBatch> cases = {
      {{7, 0, 0, 0, 0, 0}, {}, false, "malformed batch header"},
      {{1, 16, 0, 2, 2, 10}, {1, 0, 0, 0, 1, 0, 0, 0, 5, 6}, true, "contiguous forward of several segments"},
      {{1, 0, 0, 1, 1, 5}, {1, 0, 0, 0, 5}, true, "without a KV cache that holds them"},
      {{1, 16, 0, 1, 1, 5}, {1, 16, 0, 0, 5}, true, "positions [16, 17) without a KV cache that holds them"},
      {{1, 16, 0, 1, 2, 6}, {1, 0, 0, 0, 5, 6}, true, "contiguous forward whose counts do not add up"},
      {{2, 0, 0, 1, 1, 5}, {1, 0, 0, 0, 5}, true, "tokens without a KV cache"},
      {{2, 4, 8, 1, 5, 10}, {5, 0, 1, 0, 5, 5, 5, 5, 5, 0}, true, "its block table must cover its positions"},
      {{2, 4, 8, 1, 1, 6}, {1, 0, 1, 0, 5, 9}, true, "block id 9 out of range"},
      {{2, 4, 8, 1, 0, 4}, {0, 0, 0, 0}, true, "malformed segment"},
      {{2, 4, 8, 1, 2, 7}, {1, 0, 1, 0, 5, 6, 0}, true, "do not add up"},
  };
  for (const BadBatch& bad : cases) {
    SCOPED_TRACE(bad.message);
    InProcessGroup group(2, 0, 5.0);
    Status follower_status;
    const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
      if (comm.rank() == 0) {
        std::vector<int64_t> header = bad.header, body = bad.body;
        MOE_RETURN_IF_ERROR(comm.broadcast(header.data(), header.size() * sizeof(int64_t), 0));
        if (bad.follower_reads_body) MOE_RETURN_IF_ERROR(comm.broadcast(body.data(), body.size() * sizeof(int64_t), 0));
        return ok_status();
      }
      TpWeightStorage storage;
      MOE_ASSIGN_OR_RETURN(ModelWeights w, shard_weights_for_tp(model->config, model->weights, 1, 2, &storage));
      DecoderOptions options;
      options.tp = TpOptions{&comm, vocab_shard(model->config.vocab_size, 1, 2).begin, true, false};
      Decoder dec(local, w, options);
      const KvCacheShape shape = kv_cache_shape(local);
      KVCache kv(local.num_hidden_layers, shape.heads, shape.k_dim, 16, shape.v_dim);
      PagedKVCache paged(local.num_hidden_layers, shape, 4, 8);
      TpFollowerCaches caches{[&](int64_t) { return &kv; }, [&](int64_t, int64_t) { return &paged; }};
      follower_status = dec.tp_follow(caches);
      return ok_status();
    });
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(follower_status.code(), StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(follower_status.message(), bad.message);
  }
}

TEST(TpDecoderErrors, FollowerWithoutAPagedCacheIsFailedPrecondition) {
  auto model = load_model(testing::tiny_model_dir());
  const ModelConfig local = tp_local_config(model->config, 2);
  InProcessGroup group(2, 0, 5.0);
  Status follower_status;
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    if (comm.rank() == 0) {
      std::vector<int64_t> header = {2, 4, 8, 1, 1, 6}, body = {1, 0, 1, 0, 5, 3};
      MOE_RETURN_IF_ERROR(comm.broadcast(header.data(), header.size() * sizeof(int64_t), 0));
      return comm.broadcast(body.data(), body.size() * sizeof(int64_t), 0);
    }
    TpWeightStorage storage;
    MOE_ASSIGN_OR_RETURN(ModelWeights w, shard_weights_for_tp(model->config, model->weights, 1, 2, &storage));
    DecoderOptions options;
    options.tp = TpOptions{&comm, vocab_shard(model->config.vocab_size, 1, 2).begin, true, false};
    Decoder dec(local, w, options);
    TpFollowerCaches caches;
    caches.paged = [](int64_t, int64_t) -> PagedKVCache* { return nullptr; };
    follower_status = dec.tp_follow(caches);
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(follower_status.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(follower_status.message(), "no paged KV cache of 8 blocks of 4");
}

}  // namespace
}  // namespace moe
