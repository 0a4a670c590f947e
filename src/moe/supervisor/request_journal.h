// The supervisor's record of every accepted request until it finishes: the request as
// accepted (with the seed the supervisor picked, so a replay samples the same tokens),
// the client's sink, the token ids already delivered to the client, and which attempt
// (submission to a worker group) is current.
//
// Every event reaches the client through deliver(), which drops events of a stale
// attempt (one from a group declared failed): the client sees each token once, in
// order, and exactly one final event. A replay resubmits the request with
// resume_token_ids = the delivered tokens (begin_attempt()).
//
// Thread-safe. A request's sink is called under that request's own lock (never the
// journal's), so its events are delivered in order; sinks must return quickly.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "moe/generation_service.h"

namespace moe::supervisor {

class RequestJournal {
 public:
  using Clock = std::chrono::steady_clock;

  // Records an accepted request, attached (its submitter starts its first attempt or
  // detaches it). Its events are held back (not passed to `sink`) until open(id): the
  // sink is never called before submit() has returned the id.
  uint64_t add(SeqRequest request, SeqSink sink);
  // Passes the events held back so far to the sink; later ones go straight through.
  void open(uint64_t id);
  // Forgets a request that was refused (its sink is never called).
  void remove(uint64_t id);

  // A new attempt of request `id`: its number and the request to send (resume_token_ids
  // = the tokens delivered so far). nullopt if the request finished (or is unknown).
  struct Attempt {
    int number = 0;
    SeqRequest request;
    bool replay = false;  // the request was sent to a worker group before
  };
  std::optional<Attempt> begin_attempt(uint64_t id);
  // Makes every attempt of `id` stale (later events of it are dropped) and the request
  // unattached: waiting for a new attempt. Returns false if the request finished. With
  // `only_attempt` >= 0, only while that attempt is the current one (false otherwise): an
  // attempt that failed late must not detach the replay already started after it.
  bool detach(uint64_t id, int only_attempt = -1);
  // Unfinished, not cancelled requests with no attempt under way (submission order).
  std::vector<uint64_t> unattached() const;

  // Delivers an event of attempt `attempt`: appends its token ids to the delivered ones
  // and passes it on; a final event ends the request. Returns false (and drops the event)
  // if the attempt is stale or the request finished.
  bool deliver(uint64_t id, int attempt, SeqEvent&& event);
  // Ends a request with an event made by the supervisor (error or abort; its
  // prompt/completion token counts are filled in). Returns false if it already finished.
  bool finish(uint64_t id, const std::string& finish_reason, const std::string& error);

  // Marks a request cancelled by its client. Returns false if it finished.
  bool mark_cancelled(uint64_t id);
  bool cancelled(uint64_t id) const;
  bool is_current(uint64_t id, int attempt) const;

  // The resume deadline: once set (the group serving the request failed), a request not
  // resumed by then is failed by the supervisor. set_deadline keeps an earlier one;
  // clear_deadline on a successful resubmission.
  void set_deadline(uint64_t id, Clock::time_point deadline);
  void clear_deadline(uint64_t id);
  // Unfinished requests whose deadline passed `now`.
  std::vector<uint64_t> overdue(Clock::time_point now) const;

  std::vector<uint64_t> unfinished() const;  // ids in submission order
  size_t size() const;                       // unfinished requests
  std::vector<int> delivered(uint64_t id) const;

 private:
  struct Entry {
    std::mutex mu;  // orders this request's deliveries
    SeqRequest request;
    SeqSink sink;
    std::vector<int> delivered;
    int prompt_tokens = 0;
    int attempt = 0;        // current attempt number (0 = none yet)
    bool attached = true;   // an attempt is under way (or about to be started)
    int submissions = 0;    // attempts begun
    bool finished = false, cancelled = false, opened = false;
    std::vector<SeqEvent> held;  // until opened
    std::optional<Clock::time_point> deadline;
  };
  std::shared_ptr<Entry> find(uint64_t id) const;
  // Ids (in entries_ order) of the entries for which keep(entry) holds, each read under its lock.
  std::vector<uint64_t> ids_where(const std::function<bool(const Entry&)>& keep) const;
  void pass(Entry& e, SeqEvent&& event);  // e.mu held

  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<Entry>> entries_;
  uint64_t next_id_ = 1;
};

}  // namespace moe::supervisor
