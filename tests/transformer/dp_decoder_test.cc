// DP-attention in the decoder (decoder.h DpOptions) against the single-process decoder on
// the full weights: the world as tp x ep threads of one InProcessGroup (nodes of tp
// ranks), every TP group an attention replica, the MoE layers expert-parallel across
// them. World rank 0 drives a script whose paged batches put sequences on different DP
// groups (prefill with all-token and last-token logits, decode, a chunk continuing, an
// empty batch) plus a contiguous prompt and decode (the driver's group alone); the
// other groups' leaders replay it through dp_follow, their TP followers through
// tp_follow. Logits within 1e-4 of each row's range, greedy tokens identical. Then the
// errors: dp_follow on the driver, a dp_group out of range, a malformed plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "contains_util.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/comm/parallel_groups.h"
#include "moe/model/tp_shard.h"
#include "moe/transformer/decoder.h"
#include "test_util.h"
#include "transformer/loaded_model.h"

namespace moe {
namespace {

using Model = moe::testing::LoadedModel;
using moe::testing::load_model;

struct Run {
  std::vector<std::vector<float>> logits;  // rows of [vocab]
  std::vector<int> tokens;
};

constexpr int kCalls = 2 + 3;  // forward calls the script makes (a contiguous prompt + decode, 3 batches)
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

// The script: sequence A on group 0, B on group 1, C on the last group (dp_group is
// ignored by a decoder without DP, the reference).
Status drive(Decoder& dec, const ModelConfig& c, int groups, Run* run) {
  const int64_t V = c.vocab_size;
  const KvCacheShape shape = kv_cache_shape(c);
  KVCache cache(c.num_hidden_layers, shape.heads, shape.k_dim, 16, shape.v_dim);
  const std::vector<int> p = prompt_tokens(6, 5, c.vocab_size);
  std::vector<float> l(static_cast<size_t>(V));
  MOE_RETURN_IF_ERROR(dec.forward(p.data(), 6, 0, &cache, l.data()));
  run->logits.push_back(l);
  const int tok = argmax(l);
  run->tokens.push_back(tok);
  MOE_RETURN_IF_ERROR(dec.forward(&tok, 1, 6, &cache, l.data()));
  run->logits.push_back(l);
  PagedKVCache kv(c.num_hidden_layers, shape, kBlockSize, kNumBlocks);
  const std::vector<int32_t> ta = {7, 3, 0}, tb = {1, 2, 4}, tc = {9, 8};
  const std::vector<int> a = prompt_tokens(8, 2, c.vocab_size), b = prompt_tokens(7, 3, c.vocab_size),
                         cc = prompt_tokens(4, 4, c.vocab_size);
  const int ga = 0, gb = 1, gc = groups - 1;
  std::vector<float> a_all(static_cast<size_t>(7 * V)), b_last(static_cast<size_t>(V)),
      c_all(static_cast<size_t>(3 * V));
  using Seg = Decoder::BatchSegment;
  MOE_RETURN_IF_ERROR(dec.forward_batch({Seg{a.data(), 7, 0, ta.data(), nullptr, a_all.data(), ga},
                                         Seg{b.data(), 5, 0, tb.data(), b_last.data(), nullptr, gb},
                                         Seg{cc.data(), 3, 0, tc.data(), nullptr, c_all.data(), gc}},
                                        &kv));
  push_rows(a_all, V, run);
  run->logits.push_back(b_last);
  push_rows(c_all, V, run);
  std::vector<float> a_last(static_cast<size_t>(V)), b2(static_cast<size_t>(V)), c_last(static_cast<size_t>(V)),
      b_all(static_cast<size_t>(2 * V));
  MOE_RETURN_IF_ERROR(dec.forward_batch({Seg{cc.data() + 3, 1, 3, tc.data(), c_last.data(), nullptr, gc},
                                         Seg{a.data() + 7, 1, 7, ta.data(), a_last.data(), nullptr, ga},
                                         Seg{b.data() + 5, 2, 5, tb.data(), b2.data(), b_all.data(), gb}},
                                        &kv));
  for (const auto* v : {&c_last, &a_last, &b2}) run->logits.push_back(*v);
  push_rows(b_all, V, run);
  for (const auto* v : {&c_last, &a_last, &b2}) run->tokens.push_back(argmax(*v));
  return dec.forward_batch({Seg{a.data(), 0, 8, ta.data(), nullptr, nullptr, gb}}, &kv);  // an empty batch
}

Run reference(const Model& model, int groups) {
  Decoder dec(model.config, model.weights);
  dec.reserve(kReserveTokens, kReserveSegments);
  Run run;
  const Status st = drive(dec, model.config, groups, &run);
  EXPECT_TRUE(st.ok()) << st.message();
  return run;
}

// Caches made on demand with the local config's KV shape (a follower's or a DP leader's).
struct Caches {
  std::unique_ptr<KVCache> kv;
  std::unique_ptr<PagedKVCache> paged;
  TpFollowerCaches make(const ModelConfig& local) {
    const KvCacheShape shape = kv_cache_shape(local);
    TpFollowerCaches c;
    c.contiguous = [this, shape, &local](int64_t capacity) {
      if (!kv || kv->capacity() != capacity) {
        kv = std::make_unique<KVCache>(local.num_hidden_layers, shape.heads, shape.k_dim, capacity, shape.v_dim);
      }
      return kv.get();
    };
    c.paged = [this, shape, &local](int64_t block_size, int64_t num_blocks) {
      if (!paged) {
        paged = std::make_unique<PagedKVCache>(local.num_hidden_layers, shape, static_cast<int>(block_size), num_blocks);
      }
      return paged.get();
    };
    return c;
  }
};

Run dp_run(const Model& model, int tp, int ep, bool fused) {
  InProcessGroup group(tp * ep, /*ranks_per_node=*/tp);
  Run run;
  const ModelConfig local = tp > 1 ? tp_local_config(model.config, tp) : model.config;
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
    ModelWeights w = held;
    if (tp > 1) {
      MOE_ASSIGN_OR_RETURN(w, shard_weights_for_tp(model.config, held, groups.tp_rank, tp, &storage));
    }
    std::vector<EpContext> contexts(static_cast<size_t>(model.config.num_hidden_layers));
    for (size_t l = 0; l < contexts.size(); ++l) {
      contexts[l].comm = groups.ep;
      contexts[l].placement = placement;
      contexts[l].layer_id = static_cast<int>(l);
    }
    DecoderOptions options;
    options.ep = &contexts;
    if (tp > 1) {
      options.tp = TpOptions{groups.tp, vocab_shard(model.config.vocab_size, groups.tp_rank, tp).begin, true, fused};
    }
    if (groups.tp_rank == 0) options.dp.comm = groups.ep;
    Decoder dec(local, w, options);
    dec.reserve(kReserveTokens, kReserveSegments);
    if (world.rank() == 0) return drive(dec, local, ep, &run);
    Caches caches;
    const TpFollowerCaches c = caches.make(local);
    for (int i = 0; i < kCalls; ++i) {
      MOE_RETURN_IF_ERROR(groups.tp_rank > 0 ? dec.tp_follow(c) : dec.dp_follow(c));
    }
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.message();
  return run;
}

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

struct Layout {
  int tp, ep;
  bool fused;
};

void expect_dp_matches(const std::string& dir, const std::vector<Layout>& layouts) {
  auto model = load_model(dir);
  for (const Layout& L : layouts) {
    SCOPED_TRACE(dir + ": tp " + std::to_string(L.tp) + " x ep " + std::to_string(L.ep) +
                 (L.fused ? ", fused" : ""));
    const Run want = reference(*model, L.ep);
    const Run got = dp_run(*model, L.tp, L.ep, L.fused);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_LT(worst_relative(want, got), 1e-4);
  }
}

std::string model_path(const std::string& rel) { return testing::source_dir() + "/" + rel; }

TEST(DpDecoder, MixtralTp1Ep2Ep4AndTp2Ep2) {
  expect_dp_matches(testing::tiny_model_dir(), {{1, 2, false}, {1, 4, false}, {2, 2, false}, {2, 2, true}});
}

TEST(DpDecoder, DeepseekV3MlaTp1Ep4AndTp2Ep2) {
  expect_dp_matches(model_path("models/tiny-deepseek-v3-shakespeare"), {{1, 4, false}, {2, 2, false}, {2, 2, true}});
}

// --- errors ---

TEST(DpDecoderErrors, DpFollowOnTheDriverOrWithoutDpIsFailedPrecondition) {
  auto model = load_model(testing::tiny_model_dir());
  Decoder plain(model->config, model->weights);
  const Status s = plain.dp_follow({});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(s.message(), "DP-attention groups > 0");
  EXPECT_EQ(plain.dp_groups(), 1);
}

// A segment's dp_group outside [0, groups): InvalidArgument before anything runs (the
// other rank is never called).
TEST(DpDecoderErrors, SegmentGroupOutOfRangeIsInvalidArgument) {
  auto model = load_model(testing::tiny_model_dir());
  InProcessGroup group(2, 0, 5.0);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    if (comm.rank() != 0) return ok_status();
    DecoderOptions options;
    options.dp.comm = &comm;
    Decoder dec(model->config, model->weights, options);
    EXPECT_EQ(dec.dp_groups(), 2);
    const KvCacheShape shape = kv_cache_shape(model->config);
    PagedKVCache kv(model->config.num_hidden_layers, shape, 4, 8);
    const int tokens[2] = {5, 6};
    const int32_t table[1] = {0};
    for (int bad : {2, -1}) {
      const Status s = dec.forward_batch({Decoder::BatchSegment{tokens, 2, 0, table, nullptr, nullptr, bad}}, &kv);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_CONTAINS(s.message(), "dp_group " + std::to_string(bad) + " is not one of the 2 DP-attention groups");
    }
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.message();
}

// A malformed plan (a hand-made driver on rank 0): the leader of group 1 refuses it by
// name, never crashes.
struct BadPlan {
  std::vector<int64_t> header;  // kind, block_size, num_blocks, num_segments, num_tokens, body length
  std::vector<int64_t> body;
  bool leader_reads_body;
  const char* message;
};

TEST(DpDecoderErrors, MalformedPlanIsRefused) {
  auto model = load_model(testing::tiny_model_dir());
  const std::vector<BadPlan> cases = {
      {{9, 0, 0, 0, 0, 0}, {}, false, "malformed plan header"},
      {{2, 4, 8, 1, 1, 3}, {}, false, "malformed plan header"},
      {{2, 4, 8, 1, 1, 6}, {5, 1, 0, 1, 0, 7}, true, "malformed segment"},
      {{2, 4, 8, 1, 5, 11}, {1, 5, 0, 1, 0, 5, 5, 5, 5, 5, 0}, true, "block table covering its positions"},
      {{2, 4, 8, 1, 1, 7}, {1, 1, 0, 1, 0, 5, 9}, true, "block id 9 out of range"},
      {{2, 4, 8, 1, 2, 8}, {1, 1, 0, 1, 0, 5, 6, 0}, true, "do not add up"},
  };
  for (const BadPlan& bad : cases) {
    SCOPED_TRACE(bad.message);
    InProcessGroup group(2, 0, 5.0);
    Status leader_status;
    const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
      if (comm.rank() == 0) {
        std::vector<int64_t> header = bad.header, body = bad.body;
        MOE_RETURN_IF_ERROR(comm.broadcast(header.data(), header.size() * sizeof(int64_t), 0));
        if (bad.leader_reads_body) MOE_RETURN_IF_ERROR(comm.broadcast(body.data(), body.size() * sizeof(int64_t), 0));
        return ok_status();
      }
      DecoderOptions options;
      options.dp.comm = &comm;
      Decoder dec(model->config, model->weights, options);
      Caches caches;
      leader_status = dec.dp_follow(caches.make(model->config));
      return ok_status();
    });
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(leader_status.code(), StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(leader_status.message(), bad.message);
  }
}

TEST(DpDecoderErrors, LeaderWithoutAPagedCacheIsFailedPrecondition) {
  auto model = load_model(testing::tiny_model_dir());
  InProcessGroup group(2, 0, 5.0);
  Status leader_status;
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    if (comm.rank() == 0) {
      std::vector<int64_t> header = {2, 4, 8, 1, 1, 7}, body = {1, 1, 0, 1, 0, 5, 3};
      MOE_RETURN_IF_ERROR(comm.broadcast(header.data(), header.size() * sizeof(int64_t), 0));
      return comm.broadcast(body.data(), body.size() * sizeof(int64_t), 0);
    }
    DecoderOptions options;
    options.dp.comm = &comm;
    Decoder dec(model->config, model->weights, options);
    TpFollowerCaches caches;
    caches.paged = [](int64_t, int64_t) -> PagedKVCache* { return nullptr; };
    leader_status = dec.dp_follow(caches);
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(leader_status.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(leader_status.message(), "no paged KV cache of 8 blocks of 4");
}

}  // namespace
}  // namespace moe
