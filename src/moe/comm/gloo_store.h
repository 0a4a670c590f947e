// The rendezvous store of the Gloo backend (gloo_communicator.h), and the membership
// agreement of GlooCommunicator::reform. Internal to the comm module (includes gloo).
//
// DeadlineFileStore: gloo's FileStore (one file per key in a directory shared by the
// ranks), with every wait bounded by one deadline. Gloo's own FileStore::get() waits up
// to a fixed 30 s and its wait() counts whole seconds only; its timeout errors are
// gloo::IoException "Wait timeout for key(s): ...", which this store also throws.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/store.h>

#include "moe/status.h"

namespace moe::gloo_detail {

class DeadlineFileStore final : public gloo::rendezvous::Store {
 public:
  // `dir` must exist (gloo resolves it with realpath(); throws gloo::EnforceNotMet if not).
  DeadlineFileStore(const std::string& dir, std::chrono::steady_clock::time_point deadline);

  // Throws gloo::EnforceNotMet if the key exists already (keys are write-once).
  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key until the deadline (IoException after it).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  // Waits until the earlier of the deadline and now + timeout.
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // True if the key is set (no waiting).
  bool has(const std::string& key);
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }

 private:
  // Exposes FileStore's protected existence check.
  struct Files : gloo::rendezvous::FileStore {
    using FileStore::FileStore;
    bool has(const std::string& key) { return check({key}); }
  };
  void wait_until(const std::vector<std::string>& keys, std::chrono::steady_clock::time_point until);

  Files files_;
  std::chrono::steady_clock::time_point deadline_;
};

// Who survives into generation `generation` (>= 1), with keys "gen<generation>/alive/<world
// rank>" and "gen<generation>/members" in `store_dir`:
//  - the coordinator (current rank 0) checks in, waits up to `join_seconds` for the other
//    `members` (world ranks of the current group; returns early once all have checked
//    in), and writes the list of those that did, in world-rank order;
//  - every other member checks in and waits up to join_seconds + timeout_seconds for
//    that list.
// Returns the list (ascending world ranks). Unavailable if no list came in time, or if
// `my_world_rank` is not in it (this rank was declared dead: it must exit); Internal for
// a store that cannot be written (e.g. a key left from an earlier run).
StatusOr<std::vector<int>> agree_members(const std::string& store_dir, int generation,
                                         const std::vector<int>& members, int my_world_rank, bool coordinator,
                                         double join_seconds, double timeout_seconds);

}  // namespace moe::gloo_detail
