// Per-rank recording of the engine's per-step spans for `--trace FILE` (Chrome
// trace-event JSON, viewable in Perfetto; format in docs/tracing.md).
//
// A TraceRecorder belongs to one rank and is written by one thread (the thread that runs
// the decoder): no locks. Its event buffer is allocated once, at construction
// (`capacity` events of 40 bytes); an event past it is dropped and counted
// (dropped_events()), never allocated on the hot path. Instrumented code holds a
// `TraceRecorder*` that is null when tracing is off, so an untraced run pays one
// pointer test per hook.
//
// Times are seconds of now_seconds() (steady clock, core/clock.h); the JSON has
// microseconds. What is recorded:
//   spans   (name, lane, step, layer, [t0, t1]); `aux` is the exchange kind of a wait;
//   bytes   bytes this rank sent to rank `peer` in one exchange (at time t);
//   experts the global token count of each expert of one MoE layer in one step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe {

enum class TraceName : uint8_t {
  kStep,           // one forward pass of the decoder (every rank: rank 0's step, a worker's join)
  kAttention,      // a layer's attention block
  kMoe,            // a layer's feed-forward block (MoE or dense MLP)
  kRouter,         // router + capacity policy (its collective included)
  kDispatch,       // dispatch layout, counts exchange, packing the rows
  kExpertCompute,  // the local grouped expert FFN
  kCombine,        // packing the results, summing the returned rows
  kWait,           // blocked in the communicator (aux: TraceExchange)
  kExchange,       // an all-to-all in flight, issue to completion (lane 1 + micro-batch)
  kCount
};
// The name as written in the JSON ("step", "attention", "moe", "router", "dispatch",
// "expert_compute", "combine", "wait", "exchange").
const char* trace_name(TraceName name);

// What a wait (or an exchange span) waited for.
enum class TraceExchange : uint8_t { kCounts, kDispatch, kCombine, kTensorParallel, kOther };
const char* trace_exchange_name(TraceExchange e);  // "counts", "dispatch", "combine", "tp", "other"

// Lanes (the JSON's tid): 0 = the rank's thread; 1, 2 = exchanges of micro-batch 0, 1.
inline constexpr int kTraceMainLane = 0;

struct TraceEvent {
  enum class Kind : uint8_t { kSpan, kBytes, kExperts };
  double t0 = 0, t1 = 0;  // seconds (now_seconds()); t1 == t0 for bytes / experts
  int64_t value = 0;      // kBytes: bytes; kExperts: offset of the counts in the pool; kStep: tokens
  int32_t step = -1;
  int16_t layer = -1;     // -1: not a layer's
  int16_t aux = 0;        // kSpan kWait/kExchange: TraceExchange; kBytes: peer rank; kExperts: number of experts
  Kind kind = Kind::kSpan;
  TraceName name = TraceName::kStep;
  uint8_t lane = 0;
};

class TraceRecorder {
 public:
  // `rank`: the pid of this rank's events. Room for `capacity` >= 1 events and
  // 4 x capacity expert counts is allocated here (40 + 32 bytes per event).
  TraceRecorder(int rank, int64_t capacity);

  int rank() const { return rank_; }
  // Starts the next step (steps count from 0; every rank makes the same sequence of
  // decoder forwards, so step numbers agree across ranks). Returns its number.
  int32_t begin_step() { return ++step_; }
  int32_t step() const { return step_; }

  void span(TraceName name, int layer, double t0, double t1, int lane = kTraceMainLane, int aux = 0);
  // The current step's kStep span, with its token count (0 on a rank that only joins).
  void step_span(double t0, double t1, int64_t tokens);
  void bytes(int layer, int peer, int64_t bytes, double t);
  // counts: [num_experts] tokens per expert of `layer` in the current step.
  void experts(int layer, const int64_t* counts, int num_experts, double t);

  const std::vector<TraceEvent>& events() const { return events_; }
  const std::vector<int64_t>& expert_pool() const { return pool_; }
  int64_t dropped_events() const { return dropped_; }

  // This rank's events as Chrome trace-event JSON objects, comma-separated (no
  // brackets), with the process/thread name metadata first; ts/dur in microseconds
  // relative to `origin` seconds. Byte events become counters "bytes to rank P" with
  // the cumulative bytes; expert counts become instant events "experts".
  std::string events_json(double origin) const;

 private:
  bool room() {
    if (events_.size() < events_.capacity()) return true;
    ++dropped_;
    return false;
  }
  int rank_;
  int32_t step_ = -1;
  int64_t dropped_ = 0;
  std::vector<TraceEvent> events_;
  std::vector<int64_t> pool_;
};

// RAII span on the main lane: records [construction, destruction) when `rec` is not null.
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* rec, TraceName name, int layer);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  TraceRecorder* rec_;
  TraceName name_;
  int layer_;
  double t0_ = 0;
};

}  // namespace moe
