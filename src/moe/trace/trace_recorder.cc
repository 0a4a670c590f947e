#include "moe/trace/trace_recorder.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "moe/core/check.h"
#include "moe/core/clock.h"

namespace moe {

const char* trace_name(TraceName name) {
  switch (name) {
    case TraceName::kStep: return "step";
    case TraceName::kAttention: return "attention";
    case TraceName::kMoe: return "moe";
    case TraceName::kRouter: return "router";
    case TraceName::kDispatch: return "dispatch";
    case TraceName::kExpertCompute: return "expert_compute";
    case TraceName::kCombine: return "combine";
    case TraceName::kWait: return "wait";
    case TraceName::kExchange: return "exchange";
    case TraceName::kCount: break;
  }
  return "?";
}

const char* trace_exchange_name(TraceExchange e) {
  switch (e) {
    case TraceExchange::kCounts: return "counts";
    case TraceExchange::kDispatch: return "dispatch";
    case TraceExchange::kCombine: return "combine";
    case TraceExchange::kTensorParallel: return "tp";
    case TraceExchange::kOther: return "other";
  }
  return "other";
}

TraceRecorder::TraceRecorder(int rank, int64_t capacity) : rank_(rank) {
  MOE_CHECK(capacity >= 1);
  events_.reserve(static_cast<size_t>(capacity));
  pool_.reserve(static_cast<size_t>(capacity) * 4);
}

void TraceRecorder::span(TraceName name, int layer, double t0, double t1, int lane, int aux) {
  if (!room()) return;
  TraceEvent e;
  e.t0 = t0;
  e.t1 = t1;
  e.step = step_;
  e.layer = static_cast<int16_t>(layer);
  e.aux = static_cast<int16_t>(aux);
  e.name = name;
  e.lane = static_cast<uint8_t>(lane);
  events_.push_back(e);
}

void TraceRecorder::step_span(double t0, double t1, int64_t tokens) {
  if (!room()) return;
  TraceEvent e;
  e.t0 = t0;
  e.t1 = t1;
  e.step = step_;
  e.value = tokens;
  e.name = TraceName::kStep;
  events_.push_back(e);
}

void TraceRecorder::bytes(int layer, int peer, int64_t bytes, double t) {
  if (!room()) return;
  TraceEvent e;
  e.t0 = e.t1 = t;
  e.step = step_;
  e.layer = static_cast<int16_t>(layer);
  e.aux = static_cast<int16_t>(peer);
  e.value = bytes;
  e.kind = TraceEvent::Kind::kBytes;
  events_.push_back(e);
}

void TraceRecorder::experts(int layer, const int64_t* counts, int num_experts, double t) {
  if (pool_.size() + static_cast<size_t>(num_experts) > pool_.capacity()) {
    ++dropped_;
    return;
  }
  if (!room()) return;
  TraceEvent e;
  e.t0 = e.t1 = t;
  e.step = step_;
  e.layer = static_cast<int16_t>(layer);
  e.aux = static_cast<int16_t>(num_experts);
  e.value = static_cast<int64_t>(pool_.size());
  e.kind = TraceEvent::Kind::kExperts;
  pool_.insert(pool_.end(), counts, counts + num_experts);
  events_.push_back(e);
}

namespace {

void append(std::string* out, const char* fmt, auto... args) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof(buf), fmt, args...);
  out->append(buf, static_cast<size_t>(std::min<int>(n, static_cast<int>(sizeof(buf)) - 1)));
}

}  // namespace

std::string TraceRecorder::events_json(double origin) const {
  std::string out;
  out.reserve(events_.size() * 120 + 512);
  const int pid = rank_;
  append(&out, R"({"ph":"M","name":"process_name","pid":%d,"tid":0,"args":{"name":"rank %d"}})", pid, pid);
  append(&out, R"(,{"ph":"M","name":"process_sort_index","pid":%d,"tid":0,"args":{"sort_index":%d}})", pid, pid);
  append(&out, R"(,{"ph":"M","name":"thread_name","pid":%d,"tid":0,"args":{"name":"compute"}})", pid);
  append(&out, R"(,{"ph":"M","name":"thread_name","pid":%d,"tid":1,"args":{"name":"exchanges of micro-batch 0"}})", pid);
  append(&out, R"(,{"ph":"M","name":"thread_name","pid":%d,"tid":2,"args":{"name":"exchanges of micro-batch 1"}})", pid);
  std::vector<int64_t> sent;  // cumulative bytes per peer
  auto us = [origin](double t) { return (t - origin) * 1e6; };
  for (const TraceEvent& e : events_) {
    switch (e.kind) {
      case TraceEvent::Kind::kSpan: {
        append(&out, R"(,{"ph":"X","name":"%s","pid":%d,"tid":%d,"ts":%.3f,"dur":%.3f,"args":{"step":%d)",
               trace_name(e.name), pid, static_cast<int>(e.lane), us(e.t0), std::max(0.0, (e.t1 - e.t0) * 1e6),
               static_cast<int>(e.step));
        if (e.layer >= 0) append(&out, R"(,"layer":%d)", static_cast<int>(e.layer));
        if (e.name == TraceName::kStep) append(&out, R"(,"tokens":%)" PRId64, e.value);
        if (e.name == TraceName::kWait || e.name == TraceName::kExchange) {
          append(&out, R"(,"exchange":"%s")", trace_exchange_name(static_cast<TraceExchange>(e.aux)));
        }
        out += "}}";
        break;
      }
      case TraceEvent::Kind::kBytes: {
        const size_t peer = static_cast<size_t>(e.aux);
        if (sent.size() <= peer) sent.resize(peer + 1, 0);
        sent[peer] += e.value;
        append(&out, R"(,{"ph":"C","name":"bytes to rank %d","pid":%d,"tid":0,"ts":%.3f,"args":{"bytes":%)" PRId64 "}}",
               static_cast<int>(e.aux), pid, us(e.t0), sent[peer]);
        break;
      }
      case TraceEvent::Kind::kExperts: {
        append(&out, R"(,{"ph":"i","s":"p","name":"experts","pid":%d,"tid":0,"ts":%.3f,"args":{"step":%d,"layer":%d,"tokens":[)",
               pid, us(e.t0), static_cast<int>(e.step), static_cast<int>(e.layer));
        for (int i = 0; i < e.aux; ++i) {
          append(&out, i ? ",%" PRId64 : "%" PRId64, pool_[static_cast<size_t>(e.value) + static_cast<size_t>(i)]);
        }
        out += "]}}";
        break;
      }
    }
  }
  return out;
}

TraceSpan::TraceSpan(TraceRecorder* rec, TraceName name, int layer) : rec_(rec), name_(name), layer_(layer) {
  if (rec_ != nullptr) t0_ = now_seconds();
}

TraceSpan::~TraceSpan() {
  if (rec_ != nullptr) rec_->span(name_, layer_, t0_, now_seconds());
}

}  // namespace moe
