// The Scheduler's KV cache (src/moe/kv/block_manager.h): blocks on demand with
// preemption by recompute, automatic prefix caching, cache_salt, reset, forced hash
// collisions, and the pool's memory check. The reference for every output is the same
// request run alone with prefix caching off and a pool that never runs out: with the
// batch-invariant kernels the tokens must be identical.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "moe/scheduler.h"
#include "running_scheduler.h"
#include "seq_results.h"
#include "test_util.h"

namespace moe {
namespace {

using Out = testing::SeqResult;
using Sinks = testing::SeqResults;

using Running = testing::RunningScheduler;

std::unique_ptr<Engine> open_engine() {
  EngineOptions o;
  o.model_dir = testing::tiny_model_dir();
  o.batch_invariant = true;
  auto e = Engine::open(o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return std::move(e).value();
}

const std::string kSystem =
    "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak, speak.\nFirst Citizen:\nYou are "
    "all resolved rather to die than to famish?\n";
const std::vector<std::string> kQuestions = {"All:\nResolved. resolved.", "MENENIUS:\nWhat work's, my countrymen?",
                                             "ROMEO:\nIs the day so young?", "JULIET:\nO Romeo, Romeo!"};

SeqRequest request(const std::string& prompt, int max_tokens, int i) {
  SeqRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = i % 2 == 1 ? 0.8f : 0.0f;  // greedy and seeded alike
  r.sampling.seed = 7 + static_cast<uint64_t>(i);
  return r;
}

SchedulerOptions uncached() {
  SchedulerOptions o;
  o.enable_prefix_caching = false;
  o.kv_block_size = 4;
  o.kv_cache_tokens = 4096;
  return o;
}

// The reference: each request alone, caching off, a pool that never runs short.
std::vector<Out> alone(Engine* engine, const std::vector<SeqRequest>& reqs) {
  Running run(engine, uncached());
  Sinks s;
  std::vector<Out> out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_TRUE(run.sched->submit(reqs[i], s.sink(static_cast<int>(i))).ok());
    out.push_back(s.wait(static_cast<int>(i)));
    EXPECT_EQ(out.back().cached_tokens, 0);
  }
  return out;
}

TEST(SchedulerKv, ASharedPrefixIsComputedOnceAndTheTokensAreUnchanged) {
  auto engine = open_engine();
  std::vector<SeqRequest> reqs;
  for (size_t i = 0; i < kQuestions.size(); ++i) reqs.push_back(request(kSystem + kQuestions[i], 10, static_cast<int>(i)));
  const std::vector<Out> ref = alone(engine.get(), reqs);
  SchedulerOptions o;
  o.kv_block_size = 4;
  Running run(engine.get(), o);
  Sinks s;
  // The first computes the shared prefix; the others (one at a time) find it cached.
  int64_t queried = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(run.sched->submit(reqs[i], s.sink(static_cast<int>(i))).ok());
    const Out out = s.wait(static_cast<int>(i));
    EXPECT_EQ(out.tokens, ref[i].tokens) << i;
    EXPECT_EQ(out.prompt_tokens, ref[i].prompt_tokens);
    queried += out.prompt_tokens;
    if (i == 0) {
      EXPECT_EQ(out.cached_tokens, 0);
    } else {
      // Whole blocks of the common prefix, and never the whole prompt.
      EXPECT_GT(out.cached_tokens, 16) << i;
      EXPECT_EQ(out.cached_tokens % 4, 0);
      EXPECT_LT(out.cached_tokens, out.prompt_tokens);
    }
  }
  // The same prompt again hits all its full blocks but the last token's.
  ASSERT_TRUE(run.sched->submit(reqs[0], s.sink(10)).ok());
  const Out again = s.wait(10);
  EXPECT_EQ(again.tokens, ref[0].tokens);
  EXPECT_EQ(again.cached_tokens, (again.prompt_tokens - 1) / 4 * 4);
  const ServiceSnapshot snap = run.settled([](const ServiceSnapshot& x) { return x.kv_blocks_used == 0; });
  EXPECT_EQ(snap.prefix_cache_queries, queried + again.prompt_tokens);
  EXPECT_GT(snap.prefix_cache_hits, 0);
  EXPECT_EQ(snap.kv_blocks_used, 0);
  EXPECT_EQ(snap.preemptions, 0);
}

TEST(SchedulerKv, PreemptedSequencesResumeWithNoTokenRepeatedOrLost) {
  auto engine = open_engine();
  std::vector<SeqRequest> reqs;
  for (size_t i = 0; i < kQuestions.size(); ++i) reqs.push_back(request(kQuestions[i], 40, static_cast<int>(i)));
  const std::vector<Out> ref = alone(engine.get(), reqs);
  for (bool caching : {false, true}) {
    SchedulerOptions o;
    o.kv_block_size = 4;
    o.kv_cache_tokens = 64;  // 16 blocks; each request grows to 13-15 blocks: they cannot all run
    o.max_num_seqs = 4;
    o.max_num_batched_tokens = 16;
    o.enable_prefix_caching = caching;
    Running run(engine.get(), o);
    Sinks s;
    for (size_t i = 0; i < reqs.size(); ++i) ASSERT_TRUE(run.sched->submit(reqs[i], s.sink(static_cast<int>(i))).ok());
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Out out = s.wait(static_cast<int>(i));
      EXPECT_EQ(out.finish_reason, "length");
      EXPECT_EQ(out.tokens, ref[i].tokens) << "request " << i << (caching ? " with" : " without") << " caching";
    }
    const ServiceSnapshot snap = run.settled([](const ServiceSnapshot& x) { return x.kv_blocks_used == 0; });
    EXPECT_GT(snap.preemptions, 0) << "the pool was meant to run out";
    EXPECT_EQ(snap.kv_blocks_used, 0);
  }
}

TEST(SchedulerKv, TheOldReservationNeverPreempts) {
  auto engine = open_engine();
  std::vector<SeqRequest> reqs;
  for (size_t i = 0; i < kQuestions.size(); ++i) reqs.push_back(request(kQuestions[i], 40, static_cast<int>(i)));
  const std::vector<Out> ref = alone(engine.get(), reqs);
  SchedulerOptions o;
  o.kv_block_size = 4;
  o.kv_cache_tokens = 64;
  o.enable_prefix_caching = false;
  o.reserve_max_tokens = true;
  Running run(engine.get(), o);
  Sinks s;
  for (size_t i = 0; i < reqs.size(); ++i) ASSERT_TRUE(run.sched->submit(reqs[i], s.sink(static_cast<int>(i))).ok());
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(s.wait(static_cast<int>(i)).tokens, ref[i].tokens);
  EXPECT_EQ(run.sched->snapshot().preemptions, 0);
}

TEST(SchedulerKv, ForcedHashCollisionsNeverServeAnotherPromptsKv) {
  auto engine = open_engine();
  std::vector<SeqRequest> reqs;
  for (size_t i = 0; i < kQuestions.size(); ++i) reqs.push_back(request(kSystem + kQuestions[i], 8, static_cast<int>(i)));
  const std::vector<Out> ref = alone(engine.get(), reqs);
  SchedulerOptions o;
  o.kv_block_size = 4;
  o.prefix_hash_bits_for_test = 2;  // 4 keys for every block there is
  Running run(engine.get(), o);
  Sinks s;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(run.sched->submit(reqs[i], s.sink(static_cast<int>(i))).ok());
    EXPECT_EQ(s.wait(static_cast<int>(i)).tokens, ref[i].tokens) << i;
  }
}

TEST(SchedulerKv, CacheSaltSeparatesAndResetForgets) {
  auto engine = open_engine();
  SchedulerOptions o;
  o.kv_block_size = 4;
  Running run(engine.get(), o);
  Sinks s;
  SeqRequest a = request(kSystem, 4, 0);
  a.cache_salt = "tenant-a";
  ASSERT_TRUE(run.sched->submit(a, s.sink(0)).ok());
  EXPECT_EQ(s.wait(0).cached_tokens, 0);
  SeqRequest b = a;
  b.cache_salt = "tenant-b";
  ASSERT_TRUE(run.sched->submit(b, s.sink(1)).ok());
  EXPECT_EQ(s.wait(1).cached_tokens, 0) << "another salt must not see tenant-a's prefix";
  ASSERT_TRUE(run.sched->submit(a, s.sink(2)).ok());
  const Out same = s.wait(2);
  EXPECT_EQ(same.cached_tokens, (same.prompt_tokens - 1) / 4 * 4);
  ASSERT_TRUE(run.sched->reset_prefix_cache().ok());
  ASSERT_TRUE(run.sched->submit(a, s.sink(3)).ok());
  EXPECT_EQ(s.wait(3).cached_tokens, 0) << "after reset_prefix_cache";
}

TEST(SchedulerKv, PromptLogprobsAreComputedForEveryPromptToken) {
  auto engine = open_engine();
  SeqRequest r = request(kSystem, 3, 0);
  r.prompt_logprobs = 2;
  const std::vector<Out> ref = alone(engine.get(), {r});
  SchedulerOptions o;
  o.kv_block_size = 4;
  Running run(engine.get(), o);
  Sinks s;
  ASSERT_TRUE(run.sched->submit(request(kSystem, 3, 0), s.sink(0)).ok());  // caches the prompt
  s.wait(0);
  ASSERT_TRUE(run.sched->submit(r, s.sink(1)).ok());
  const Out out = s.wait(1);
  EXPECT_EQ(out.cached_tokens, 0) << "a request with prompt_logprobs reads no cached prefix";
  ASSERT_EQ(out.prompt_logprobs.size(), ref[0].prompt_logprobs.size());
  for (size_t i = 0; i < out.prompt_logprobs.size(); ++i) {
    EXPECT_EQ(out.prompt_logprobs[i].token_id, ref[0].prompt_logprobs[i].token_id);
    EXPECT_FLOAT_EQ(out.prompt_logprobs[i].logprob, ref[0].prompt_logprobs[i].logprob) << i;
  }
  EXPECT_EQ(out.tokens, ref[0].tokens);
}

TEST(SchedulerKv, APoolThatDoesNotFitInMemoryIsRefusedWithTheNumbers) {
  auto engine = open_engine();
  SchedulerOptions o;
  o.kv_cache_memory_bytes = uint64_t{1} << 50;  // 1 PiB
  auto s = Scheduler::create(engine.get(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  for (const char* part : {"the KV cache (", "and the weights (", "this process may use", "memory_utilization"}) {
    EXPECT_NE(s.status().message().find(part), std::string::npos) << s.status().message();
  }
  SchedulerOptions tiny;
  tiny.memory_utilization = 1e-9;  // no room beside the weights
  auto t = Scheduler::create(engine.get(), tiny);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("no room for a KV cache"), std::string::npos) << t.status().message();
  SchedulerOptions both;
  both.kv_cache_tokens = 64;
  both.kv_cache_memory_bytes = 1 << 20;
  EXPECT_EQ(Scheduler::create(engine.get(), both).status().code(), StatusCode::kInvalidArgument);
  SchedulerOptions reserve_cached;
  reserve_cached.reserve_max_tokens = true;
  EXPECT_EQ(Scheduler::create(engine.get(), reserve_cached).status().code(), StatusCode::kInvalidArgument);
}

TEST(SchedulerKv, OneHugeRequestWaitsOrIsPreemptedButFinishes) {
  auto engine = open_engine();
  SchedulerOptions o;
  o.kv_block_size = 4;
  o.kv_cache_tokens = 96;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 16;
  Running run(engine.get(), o);
  Sinks s;
  SeqRequest huge = request(kSystem, 1, 0);  // its prompt + max_tokens: the whole pool
  const int huge_prompt = run.sched->count_tokens(huge.prompt);
  huge.max_tokens = 96 - huge_prompt;
  ASSERT_GT(huge.max_tokens, 0);
  ASSERT_TRUE(run.sched->submit(request(kQuestions[0], 30, 1), s.sink(0)).ok());
  ASSERT_TRUE(run.sched->submit(huge, s.sink(1)).ok());
  ASSERT_TRUE(run.sched->submit(request(kQuestions[1], 30, 2), s.sink(2)).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.wait(i).finish_reason, "length") << i;
  huge.max_tokens += 1;  // one token more than the pool: never
  auto never = run.sched->submit(huge, s.sink(3));
  ASSERT_FALSE(never.ok());
  EXPECT_NE(never.status().message().find("never fit"), std::string::npos);
}


TEST(SchedulerKv, AReplayedRequestThatIsPreemptedStillEndsExact) {
  // The supervisor replays a request after a worker failure with the tokens it had
  // delivered (resume_token_ids); here that replay is also preempted, more than once.
  auto engine = open_engine();
  std::vector<SeqRequest> reqs;
  for (size_t i = 0; i < kQuestions.size(); ++i) reqs.push_back(request(kQuestions[i], 40, static_cast<int>(i)));
  const std::vector<Out> ref = alone(engine.get(), reqs);
  SchedulerOptions o;
  o.kv_block_size = 4;
  o.kv_cache_tokens = 64;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 16;
  Running run(engine.get(), o);
  Sinks s;
  for (size_t i = 0; i < reqs.size(); ++i) {
    SeqRequest r = reqs[i];
    const size_t k = 5 + 3 * i;  // tokens delivered before the failure
    r.resume_token_ids.assign(ref[i].tokens.begin(), ref[i].tokens.begin() + static_cast<long>(k));
    ASSERT_TRUE(run.sched->submit(r, s.sink(static_cast<int>(i))).ok());
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Out out = s.wait(static_cast<int>(i));
    const size_t k = 5 + 3 * i;
    EXPECT_EQ(out.tokens, std::vector<int>(ref[i].tokens.begin() + static_cast<long>(k), ref[i].tokens.end())) << i;
  }
  EXPECT_GT(run.sched->snapshot().preemptions, 0);
}

// The disk tier: a second scheduler on the same directory (a restart) finds the first
// one's blocks; corrupt block files are refused and recomputed; an unusable directory
// serves without the tier.
class SchedulerKvDisk : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("kv_disk"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  SchedulerOptions with_disk() const {
    SchedulerOptions o;
    o.kv_block_size = 4;
    o.kv_offload_dir = dir_ + "/kv";
    return o;
  }
  std::string dir_;
};

TEST_F(SchedulerKvDisk, ARestartReadsThePrefixBackFromDisk) {
  auto engine = open_engine();
  const SeqRequest r = request(kSystem + kQuestions[0], 6, 1);
  const std::vector<Out> ref = alone(engine.get(), {r});
  {
    Running run(engine.get(), with_disk());
    Sinks s;
    ASSERT_TRUE(run.sched->submit(r, s.sink(0)).ok());
    EXPECT_EQ(s.wait(0).tokens, ref[0].tokens);
  }  // the tier writes what is queued before it closes
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/kv")) files += e.path().extension() == ".kvb";
  const int full_blocks = (ref[0].prompt_tokens + 6 - 1) / 4;  // blocks filled by computed tokens
  EXPECT_EQ(files, static_cast<size_t>(full_blocks));
  Running run(engine.get(), with_disk());
  Sinks s;
  ASSERT_TRUE(run.sched->submit(r, s.sink(0)).ok());
  const Out out = s.wait(0);
  EXPECT_EQ(out.tokens, ref[0].tokens);
  EXPECT_EQ(out.cached_tokens, (out.prompt_tokens - 1) / 4 * 4);
  const ServiceSnapshot snap = run.sched->snapshot();
  EXPECT_EQ(snap.kv_disk_hits, (out.prompt_tokens - 1) / 4);
  EXPECT_EQ(snap.kv_disk_rejects, 0);
}

TEST_F(SchedulerKvDisk, CorruptBlockFilesAreRefusedAndRecomputed) {
  auto engine = open_engine();
  const SeqRequest r = request(kSystem, 4, 0);
  const std::vector<Out> ref = alone(engine.get(), {r});
  {
    Running run(engine.get(), with_disk());
    Sinks s;
    ASSERT_TRUE(run.sched->submit(r, s.sink(0)).ok());
    s.wait(0);
  }
  // Flip the last byte (payload) of every block file.
  int corrupted = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/kv")) {
    if (e.path().extension() != ".kvb") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0x5a);
    f.seekp(-1, std::ios::end);
    f.put(c);
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0);
  Running run(engine.get(), with_disk());
  Sinks s;
  ASSERT_TRUE(run.sched->submit(r, s.sink(0)).ok());
  const Out out = s.wait(0);
  EXPECT_EQ(out.tokens, ref[0].tokens);
  EXPECT_EQ(out.cached_tokens, 0);
  const ServiceSnapshot snap = run.sched->snapshot();
  EXPECT_EQ(snap.kv_disk_hits, 0);
  EXPECT_EQ(snap.kv_disk_rejects, 1) << "the first block's file is refused; the prefix ends there";
}

TEST_F(SchedulerKvDisk, AnotherKvDtypeNeverReadsTheseBlocks) {
  auto engine = open_engine();
  const SeqRequest r = request(kSystem, 4, 0);
  {
    Running run(engine.get(), with_disk());
    Sinks s;
    ASSERT_TRUE(run.sched->submit(r, s.sink(0)).ok());
    s.wait(0);
  }
  EngineOptions eo;
  eo.model_dir = testing::tiny_model_dir();
  eo.batch_invariant = true;
  eo.kv_dtype = "bf16";
  auto bf16 = Engine::open(eo);
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  const std::vector<Out> ref = alone(bf16->get(), {r});
  Running run(bf16->get(), with_disk());
  Sinks s;
  ASSERT_TRUE(run.sched->submit(r, s.sink(0)).ok());
  const Out out = s.wait(0);
  EXPECT_EQ(out.tokens, ref[0].tokens);
  EXPECT_EQ(out.cached_tokens, 0);
  EXPECT_EQ(run.sched->snapshot().kv_disk_hits, 0);
}

TEST_F(SchedulerKvDisk, AnUnusableDirectoryServesWithoutTheTier) {
  auto engine = open_engine();
  std::ofstream(dir_ + "/file") << "x";
  SchedulerOptions o = with_disk();
  o.kv_offload_dir = dir_ + "/file/sub";  // under a regular file: fails for root too
  Running run(engine.get(), o);
  Sinks s;
  ASSERT_TRUE(run.sched->submit(request(kSystem, 3, 0), s.sink(0)).ok());
  EXPECT_EQ(s.wait(0).finish_reason, "length");
  EXPECT_EQ(run.sched->snapshot().kv_disk_writes, 0);
  SchedulerOptions off = with_disk();
  off.enable_prefix_caching = false;
  EXPECT_EQ(Scheduler::create(engine.get(), off).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
