// `moe bench chaos`'s fixed workload and one request of it on the wire: requests from
// built-in prompts that cycle through every combination of endpoint
// (/v1/completions, /v1/chat/completions), streamed or not, and greedy (temperature 0)
// or seeded sampling (temperature 0.8 and a per-request seed), so that each output is
// reproducible and can be compared with a fault-free run. The client records what
// came back and classifies it: completed, errored (a proper error: an HTTP error
// status or an SSE error event) or lost (no final answer: refused, cut, empty).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moe::serve_bench {

struct ChaosRequest {
  int index = 0;
  bool chat = false;       // /v1/chat/completions (else /v1/completions)
  bool stream = false;
  bool greedy = true;      // temperature 0; else temperature 0.8 with `seed`
  int64_t seed = 0;        // sent when !greedy
  std::string prompt;
  int max_tokens = 16;
  std::string endpoint() const { return chat ? "/v1/chat/completions" : "/v1/completions"; }
};

// `count` requests: request i is chat when bit 0 of i is set, streamed when bit 1 is,
// seeded when bit 2 is (so any 8 consecutive requests hold every combination), with
// prompt i of the built-in list (cycled) and seed `seed_base + i`.
std::vector<ChaosRequest> make_chaos_workload(int count, int max_tokens, int64_t seed_base);

// The JSON body: model, prompt or messages, max_tokens, temperature, seed (seeded
// requests), stream, and ignore_eos (so every output has max_tokens tokens).
nlohmann::json chaos_request_body(const ChaosRequest& request, const std::string& model);

enum class Outcome { kCompleted, kErrored, kLost };
const char* outcome_name(Outcome o);

// What one request got. Times are seconds since the trial's start.
struct ChaosResult {
  Outcome outcome = Outcome::kLost;
  std::string text;               // the generated text (streamed: the deltas joined)
  std::string detail;             // why errored or lost
  int http_status = 0;            // 0: no response
  bool refused = false;           // never connected (nothing accepted it)
  double start_s = 0, end_s = 0;
  std::vector<double> token_times_s;  // streamed: each text chunk; else the response
};

// The raw facts of one exchange, before classification.
struct RawExchange {
  bool chat = false;
  bool stream = false;
  bool connected = false;         // a response (status line) arrived
  bool transport_ok = false;      // the response was read to its end
  std::string transport_error;    // when !transport_ok
  int status = 0;
  std::string body;               // the whole body (non-streamed or error responses)
  // Streamed: the payloads of the SSE events, in order, and when each arrived.
  std::vector<std::string> events;
  std::vector<double> event_times_s;
  double start_s = 0, end_s = 0;  // sent, finished (seconds since the trial's start)
};

// completed: status 200 and, streamed, a [DONE] after text and no error event (or,
// non-streamed, a JSON body with choices[0].text / message.content); errored: an HTTP
// status >= 400 with a body, or an SSE error event; lost: everything else (no
// connection, a cut stream with no error, a 200 with an empty or truncated body).
ChaosResult classify_exchange(const RawExchange& raw);

// What the clients of a run have received so far, shared by them. Thread-safe.
struct ChaosProgress {
  std::atomic<int64_t> last_byte_ns{0};  // steady-clock time of the latest bytes received
  // Streamed output delivered, in tokens: one per SSE event of a streamed 200 response
  // (about one token each; non-streamed responses arrive whole at their end, too late to
  // say where the workload is).
  std::atomic<int64_t> delivered_tokens{0};
};

// Sends `request` to `origin` ("http://host:port"), updating `progress` (may be null);
// `read_timeout_s` bounds any silence. Never throws.
ChaosResult send_chaos_request(const std::string& origin, const ChaosRequest& request, const std::string& model,
                               double read_timeout_s, std::chrono::steady_clock::time_point t0,
                               ChaosProgress* progress);

}  // namespace moe::serve_bench
