// The supervisor's calls to a worker group's endpoint (worker_protocol.h) on 127.0.0.1:
// short control requests (WorkerClient) and one request's /submit stream (SubmitStream).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "moe/generation_service.h"
#include "moe/status.h"

namespace httplib {
class Client;
}

namespace moe::supervisor {

// Each call opens its own connection and waits at most `timeout_seconds` (connect and
// read). Errors: Unavailable (no answer: refused, timed out, cut), Internal (an answer
// that is not the expected JSON). Thread-safe.
class WorkerClient {
 public:
  WorkerClient(int port, double timeout_seconds);
  StatusOr<ServiceHealth> health() const;
  StatusOr<ServiceSnapshot> snapshot() const;
  Status reset_prefix_cache() const;
  StatusOr<ModelInfo> model_info() const;
  StatusOr<int> count_tokens(const std::string& text) const;
  // The worker service's answers (its own errors, e.g. InvalidArgument, come back as
  // they are), or Unavailable / Internal as above.
  StatusOr<std::vector<int>> tokenize(const std::string& text, bool add_special_tokens) const;
  StatusOr<std::string> detokenize(const std::vector<int>& ids) const;
  // token_bytes() of every id in [0, vocab_size) (one call; the vocabulary's size in entries).
  StatusOr<std::vector<std::string>> vocab_bytes() const;

 private:
  StatusOr<std::string> call(const std::string& method, const std::string& path, const std::string& body) const;
  int port_;
  double timeout_seconds_;
};

// One request's /submit stream. run() blocks until the stream ends; abort() (any
// thread) cuts it, and the worker then cancels the request.
class SubmitStream {
 public:
  // Called once: the worker's id, or its refusal (the worker's Status), or Unavailable
  // when no reply came (connection refused or cut). Return false to end the stream.
  using ReplyFn = std::function<bool(const StatusOr<uint64_t>& reply)>;
  // Called per event, in order. Return false to end the stream.
  using EventFn = std::function<bool(SeqEvent&& event)>;

  SubmitStream(int port, double connect_timeout_seconds);
  ~SubmitStream();
  // OK once the final event was passed to on_event; otherwise Unavailable saying why
  // the stream ended early (cut, refused, malformed line, or ended by a callback).
  Status run(const SeqRequest& request, const ReplyFn& on_reply, const EventFn& on_event);
  void abort();

 private:
  const int port_;
  const double connect_timeout_seconds_;
  std::mutex mu_;
  std::unique_ptr<httplib::Client> client_;
  bool aborted_ = false;
};

}  // namespace moe::supervisor
