// SupervisedService: the GenerationService of `moe serve --supervise`. The HTTP front
// end runs in the supervisor process; the engine runs in a worker group (worker_group.h)
// reached through its endpoint (worker_protocol.h). Every accepted request is kept in a
// journal (request_journal.h) until it finishes. When the group fails (a process exits,
// a request stream is cut, the engine reports an error, /health says stalled or failed,
// or /health does not answer for liveness_timeout_seconds) the supervisor kills the
// whole group, starts a fresh one and resubmits every unfinished request with
// resume_token_ids = the tokens its client already has: the client sees one continuous
// stream (a pause; no error, no duplicated or missing token; with greedy or seeded
// sampling the same text as without the failure; an unseeded sampled request gets a
// seed from the supervisor when accepted, so that its replay samples the same tokens).
//
// Bounds: a request not resumed within recovery_timeout_seconds of the failure gets a
// final "error" event; after max_restarts failed starts in a row the supervisor gives up
// (health "failed", every request ends with "error", run() returns the error). A request
// the worker refuses as invalid (InvalidArgument, FailedPrecondition, OutOfRange) is not
// retried: submit() returns the error, or a replay ends with "error".
//
// Threads: submit/cancel/snapshot/health/count_tokens from any thread; run() on one
// thread. A monitor thread probes the group and recovers it; a sweeper thread starts
// attempts and enforces deadlines; each attempt (one request on one group) has a thread
// reading its stream.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moe/generation_service.h"
#include "moe/status.h"
#include "moe/supervisor/worker_group.h"

namespace moe::supervisor {

struct SupervisorOptions {
  double liveness_timeout_seconds = 10;  // no /health answer for this long: failed
  double probe_interval_seconds = 0.5;   // /health probes of the group
  double recovery_timeout_seconds = 60;  // a request not resumed by then after a failure: "error"
  int max_restarts = 3;                  // failed starts in a row before giving up (>= 1)
  double startup_timeout_seconds = 600;  // each start of a group, until it serves
  double control_timeout_seconds = 5;    // one control call (/snapshot, /count_tokens, a submit reply)
};

class SupervisedService final : public GenerationService {
 public:
  // Starts the first worker group through `launcher` (not owned; must outlive the
  // service) and reads its model info. Errors: InvalidArgument for bad options; the
  // launcher's error when the group does not start.
  static StatusOr<std::unique_ptr<SupervisedService>> start(WorkerLauncher& launcher, SupervisorOptions options);
  ~SupervisedService() override;  // aborts what is left, kills the group

  // Blocks until shutdown() was called and every request finished (OK), or until the
  // supervisor gave up on the worker group (its error). Kills the group before
  // returning.
  Status run();
  // Stops admitting (submit(): Unavailable); requests in flight continue for up to
  // `grace_seconds`, then end with "abort". Thread-safe, idempotent.
  void shutdown(double grace_seconds);

  StatusOr<uint64_t> submit(SeqRequest request, SeqSink sink) override;
  void cancel(uint64_t id) override;
  // The worker's counters (the last known ones while it is down) plus the supervisor's:
  // worker_failures, recoveries, replayed_requests, recovery_seconds.
  ServiceSnapshot snapshot() const override;
  // Forwards to the worker group (its scheduler owns the cache); Unavailable while it restarts.
  Status reset_prefix_cache() override;
  // "ok" (or the worker's own state) with the ranks' pids; "recovering"; "failed".
  ServiceHealth health() const override;
  const ModelInfo& model_info() const override;
  // Forwarded to the worker; while it is down, waits for it (up to the recovery
  // timeout), then answers 1 + the text's byte count (an upper bound).
  int count_tokens(const std::string& text) const override;
  // Forwarded to the worker (its errors, e.g. InvalidArgument for an id out of range,
  // as they are); while it is down, waits as count_tokens does, then Unavailable.
  StatusOr<std::vector<int>> tokenize(const std::string& text, bool add_special_tokens) const override;
  StatusOr<std::string> detokenize(const std::vector<int>& ids) const override;
  // From the whole vocabulary's bytes, fetched from the worker once (at the first call)
  // and cached: cheap per token. Empty when the worker could not be reached.
  std::string token_bytes(int id) const override;

  struct State;  // implementation detail (supervised_service.cc)

 private:
  explicit SupervisedService(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace moe::supervisor
