// Over 600 lines: one class (InProcCommunicator) and its rendezvous machinery (Slot, OpState,
// Exchange: post, rendezvous, pull, deadlines) share private state; splitting them would
// move those internals into a header for no reader's benefit.
#include "moe/comm/inproc_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "moe/core/check.h"
#include "moe/core/text_format.h"

namespace moe {
namespace inproc_detail {
namespace {

using Clock = std::chrono::steady_clock;

Status deadline_exceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
Status unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

enum class Op { kAlltoallv, kAlltoallInt64, kAllreduceF32, kAllreduceI64, kAllgather, kBroadcast, kBarrier };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAlltoallv: return "alltoallv";
    case Op::kAlltoallInt64: return "alltoall_int64";
    case Op::kAllreduceF32: return "allreduce_sum(f32)";
    case Op::kAllreduceI64: return "allreduce_sum(int64)";
    case Op::kAllgather: return "allgather";
    case Op::kBroadcast: return "broadcast";
    case Op::kBarrier: return "barrier";
  }
  return "?";
}

}  // namespace

// What one rank posts for a collective: its arguments, read by the peers between the
// two rendezvous (and never changed in that window).
struct Slot {
  Op op = Op::kBarrier;
  bool valid = true;  // the rank's own argument check passed
  const void* send = nullptr;
  void* recv = nullptr;  // allreduce / broadcast: the in-place data
  const std::vector<size_t>* send_bytes = nullptr;
  const std::vector<size_t>* recv_bytes = nullptr;
  size_t bytes = 0;  // allgather / broadcast: bytes; allreduce: element count
  int root = -1;
};

struct Message {
  int source;
  int tag;
  std::vector<unsigned char> data;
};

// One collective (the k-th of every rank), while it is in flight.
struct OpState {
  explicit OpState(int n) : slots(n), posted(n, false), pulled_by(n, false) {}
  std::vector<Slot> slots;  // fixed once posted; read by the peers until `pulled` == n
  std::vector<bool> posted, pulled_by;
  int arrived = 0;   // ranks that posted (rendezvous 1 complete at n)
  int pulled = 0;    // ranks done copying from the others (rendezvous 2 complete at n)
  int pulling = 0;   // ranks copying right now (a failing rank waits for 0 before returning)
  int finished = 0;  // ranks that saw rendezvous 2 complete; the last erases the entry
};

struct GroupState {
  // node_of_rank: the node of each rank, numbered 0..num_nodes-1.
  GroupState(int n, std::vector<int> node_of_rank, double timeout)
      : num_ranks(n),
        node_of(std::move(node_of_rank)),
        num_nodes(node_of.empty() ? 1 : *std::max_element(node_of.begin(), node_of.end()) + 1),
        timeout_seconds(timeout),
        next_seq(n, 0),
        mailbox(n) {}

  const int num_ranks;
  const std::vector<int> node_of;
  const int num_nodes;
  std::atomic<double> timeout_seconds;  // Communicator::set_timeout_seconds (any rank)

  std::mutex mu;
  std::condition_variable cv;  // notified on every state change
  std::map<uint64_t, OpState> ops;  // by sequence number
  std::vector<uint64_t> next_seq;   // per rank: sequence number of its next collective
  bool broken = false;
  std::string failure;  // why it broke
  std::vector<std::deque<Message>> mailbox;  // per destination, in send order
  // split(): the child groups being handed out, by (split number, color), with how
  // many members have yet to pick theirs up.
  struct Child {
    std::shared_ptr<GroupState> state;
    int remaining = 0;
  };
  std::map<std::pair<uint64_t, int>, Child> children;

  Clock::time_point deadline_from_now() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  }
  Status broken_status(const char* op) const {
    return unavailable(std::string("inproc ") + op + ": group unusable after an earlier failure (" + failure + ")");
  }
};

// One rank's part in one collective: post, rendezvous 1, pull from the peers,
// rendezvous 2, finish. advance() moves it on without blocking; the communicator's
// wait loop blocks between advances.
class Exchange {
 public:
  Exchange(GroupState* g, int rank, std::vector<Exchange*>* active, Slot slot, Status local_error)
      : g_(g), rank_(rank), active_(active), slot_(slot), local_error_(std::move(local_error)) {
    slot_.valid = local_error_.ok();
    deadline_ = g_->deadline_from_now();
  }
  ~Exchange() { deactivate(); }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // For alltoallv: the counts live here so the posted slot can point at them.
  void set_counts(std::vector<size_t> send_bytes, std::vector<size_t> recv_bytes) {
    send_bytes_ = std::move(send_bytes);
    recv_bytes_ = std::move(recv_bytes);
    slot_.send_bytes = &send_bytes_;
    slot_.recv_bytes = &recv_bytes_;
  }

  // Posts this rank's slot for its next collective.
  Status start() {
    std::lock_guard<std::mutex> lock(g_->mu);
    if (g_->broken) {
      finish(g_->broken_status(name()));
      return result_;
    }
    seq_ = g_->next_seq[rank_]++;
    op_ = &g_->ops.try_emplace(seq_, g_->num_ranks).first->second;
    op_->slots[rank_] = slot_;
    op_->posted[rank_] = true;
    if (++op_->arrived == g_->num_ranks) g_->cv.notify_all();
    active_->push_back(this);
    return ok_status();
  }

  bool done() const { return phase_ == Phase::kDone; }
  const Status& result() const { return result_; }
  Clock::time_point deadline() const { return deadline_; }

  // Lock held: whether advance() would get further (or fail) now.
  bool can_advance_locked() const {
    if (phase_ == Phase::kDone || g_->broken) return true;
    if (phase_ == Phase::kPosted) return op_->arrived == g_->num_ranks;
    return op_->pulled == g_->num_ranks;
  }

  // Goes as far as possible without blocking. Lock not held.
  void advance() {
    while (phase_ != Phase::kDone) {
      std::unique_lock<std::mutex> lock(g_->mu);
      if (g_->broken) {
        fail_locked(lock, deadline_exceeded(std::string("inproc ") + name() + " on rank " + std::to_string(rank_) +
                                            ": " + g_->failure));
        return;
      }
      if (phase_ == Phase::kPosted) {
        if (op_->arrived < g_->num_ranks) return;
        ++op_->pulling;
        lock.unlock();
        copy_result_ = pull();
        lock.lock();
        --op_->pulling;
        op_->pulled_by[rank_] = true;
        ++op_->pulled;
        g_->cv.notify_all();
        phase_ = Phase::kPulled;
        continue;
      }
      if (op_->pulled < g_->num_ranks) return;
      if (++op_->finished == g_->num_ranks) g_->ops.erase(seq_);
      op_ = nullptr;
      lock.unlock();
      // Every peer has finished reading our buffers: safe to write in place.
      if (copy_result_.ok() && !reduced_.empty()) std::memcpy(slot_.recv, reduced_.data(), reduced_.size());
      finish(copy_result_);
    }
  }

  // Lock held, deadline passed and can_advance_locked() false: breaks the group,
  // naming the ranks this exchange waits for.
  void time_out_locked(std::unique_lock<std::mutex>& lock) {
    std::vector<int> missing;
    const std::vector<bool>& have = phase_ == Phase::kPosted ? op_->posted : op_->pulled_by;
    for (int i = 0; i < g_->num_ranks; ++i) {
      if (!have[i]) missing.push_back(i);
    }
    g_->broken = true;
    g_->failure = std::string("timed out after ") + format_g(g_->timeout_seconds) + " s in " + name() +
                  " waiting for rank" + (missing.size() == 1 ? " " : "s ") + rank_list(missing) +
                  (phase_ == Phase::kPosted ? "" : " to copy (test()/wait() on their request)") + " (group of " +
                  std::to_string(g_->num_ranks) + ")";
    g_->cv.notify_all();
    fail_locked(lock, deadline_exceeded(std::string("inproc ") + name() + " on rank " + std::to_string(rank_) + ": " +
                                        g_->failure));
  }

 private:
  enum class Phase { kPosted, kPulled, kDone };

  const char* name() const { return op_name(slot_.op); }

  void deactivate() {
    for (auto it = active_->begin(); it != active_->end(); ++it) {
      if (*it == this) {
        active_->erase(it);
        return;
      }
    }
  }

  void finish(Status s) {
    phase_ = Phase::kDone;
    result_ = std::move(s);
    deactivate();
  }

  // Gives up on the operation (the group is broken). Peers that are copying from our
  // buffers right now finish first; no new copy starts once the group is broken.
  void fail_locked(std::unique_lock<std::mutex>& lock, Status s) {
    if (op_ != nullptr) {
      g_->cv.wait(lock, [&] { return op_->pulling == 0; });
      op_ = nullptr;
    }
    finish(std::move(s));
  }

  Status invalid(const std::string& m) const {
    return invalid_argument(std::string("inproc ") + name() + " on rank " + std::to_string(rank_) + ": " + m);
  }

  // Between the rendezvous: checks that all ranks agree, then copies from the peers.
  Status pull() {
    const int n = g_->num_ranks;
    const std::vector<Slot>& s = op_->slots;
    for (int j = 0; j < n; ++j) {
      if (s[j].op != slot_.op) {
        return invalid(std::string("rank ") + std::to_string(j) + " called " + op_name(s[j].op) + " instead");
      }
    }
    if (!local_error_.ok()) return local_error_;
    for (int j = 0; j < n; ++j) {
      if (!s[j].valid) return invalid("rank " + std::to_string(j) + " passed invalid arguments");
    }
    switch (slot_.op) {
      case Op::kAlltoallv: return pull_alltoallv();
      case Op::kAlltoallInt64: {
        auto* out = static_cast<int64_t*>(slot_.recv);
        for (int j = 0; j < n; ++j) out[j] = static_cast<const int64_t*>(s[j].send)[rank_];
        return ok_status();
      }
      case Op::kAllreduceF32: return pull_allreduce<float>();
      case Op::kAllreduceI64: return pull_allreduce<int64_t>();
      case Op::kAllgather: {
        for (int j = 0; j < n; ++j) {
          if (s[j].bytes != slot_.bytes) {
            return invalid("rank " + std::to_string(j) + " has " + std::to_string(s[j].bytes) + " bytes, rank " +
                           std::to_string(rank_) + " has " + std::to_string(slot_.bytes));
          }
        }
        auto* out = static_cast<unsigned char*>(slot_.recv);
        for (int j = 0; j < n; ++j) {
          if (slot_.bytes) std::memcpy(out + j * slot_.bytes, s[j].send, slot_.bytes);
        }
        return ok_status();
      }
      case Op::kBroadcast: {
        for (int j = 0; j < n; ++j) {
          if (s[j].bytes != slot_.bytes || s[j].root != slot_.root) {
            return invalid("rank " + std::to_string(j) + " has bytes=" + std::to_string(s[j].bytes) +
                           " root=" + std::to_string(s[j].root) + ", rank " + std::to_string(rank_) +
                           " has bytes=" + std::to_string(slot_.bytes) + " root=" + std::to_string(slot_.root));
          }
        }
        if (rank_ != slot_.root && slot_.bytes) std::memcpy(slot_.recv, s[slot_.root].recv, slot_.bytes);
        return ok_status();
      }
      case Op::kBarrier: return ok_status();
    }
    return ok_status();
  }

  Status pull_alltoallv() {
    const int n = g_->num_ranks;
    const std::vector<Slot>& s = op_->slots;
    // Every rank checks every pair, so all ranks agree on the outcome.
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        const size_t sent = (*s[i].send_bytes)[j];
        const size_t expected = (*s[j].recv_bytes)[i];
        if (sent != expected) {
          return invalid("rank " + std::to_string(i) + " sends " + std::to_string(sent) + " bytes to rank " +
                         std::to_string(j) + ", which expects " + std::to_string(expected));
        }
      }
    }
    auto* out = static_cast<unsigned char*>(slot_.recv);
    size_t dst = 0;
    for (int j = 0; j < n; ++j) {
      const std::vector<size_t>& sb = *s[j].send_bytes;
      size_t src = 0;
      for (int k = 0; k < rank_; ++k) src += sb[k];
      const size_t len = recv_bytes_[j];
      if (len) std::memcpy(out + dst, static_cast<const unsigned char*>(s[j].send) + src, len);
      dst += len;
    }
    return ok_status();
  }

  template <typename T>
  Status pull_allreduce() {
    const int n = g_->num_ranks;
    const std::vector<Slot>& s = op_->slots;
    for (int j = 0; j < n; ++j) {
      if (s[j].bytes != slot_.bytes) {
        return invalid("rank " + std::to_string(j) + " has " + std::to_string(s[j].bytes) + " elements, rank " +
                       std::to_string(rank_) + " has " + std::to_string(slot_.bytes));
      }
    }
    // Same summation order (rank 0, 1, ...) on every rank: identical results everywhere.
    std::vector<T> sum(slot_.bytes, T{});
    for (int j = 0; j < n; ++j) {
      const T* in = static_cast<const T*>(s[j].recv);
      for (size_t i = 0; i < slot_.bytes; ++i) sum[i] += in[i];
    }
    reduced_.resize(slot_.bytes * sizeof(T));
    if (!reduced_.empty()) std::memcpy(reduced_.data(), sum.data(), reduced_.size());
    return ok_status();
  }

  GroupState* g_;
  int rank_;
  std::vector<Exchange*>* active_;
  Slot slot_;
  Status local_error_;
  std::vector<size_t> send_bytes_, recv_bytes_;
  Clock::time_point deadline_;
  uint64_t seq_ = 0;
  OpState* op_ = nullptr;  // valid from start() until this rank is done with it
  Phase phase_ = Phase::kPosted;
  Status copy_result_;
  Status result_;
  std::vector<unsigned char> reduced_;  // allreduce: the sum, written after rendezvous 2
};

class InProcCommunicator;

class InProcRequest : public CommRequest {
 public:
  InProcRequest(InProcCommunicator* comm, std::unique_ptr<Exchange> ex) : comm_(comm), ex_(std::move(ex)) {}
  ~InProcRequest() override;
  Status wait() override;
  StatusOr<bool> test() override;

 private:
  InProcCommunicator* comm_;
  std::unique_ptr<Exchange> ex_;
};

class InProcCommunicator : public Communicator {
 public:
  InProcCommunicator(std::shared_ptr<GroupState> g, int rank) : g_(std::move(g)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return g_->num_ranks; }
  int node_of(int rank) const override {
    MOE_CHECK(rank >= 0 && rank < g_->num_ranks);
    return g_->node_of[static_cast<size_t>(rank)];
  }
  int num_nodes() const override { return g_->num_nodes; }

  // Collective: allgather (color, key); the member of each color with the lowest rank
  // here makes the child's shared state and leaves it in this group's `children`; after
  // a barrier every member picks it up.
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override {
    if (color < 0) return local_invalid(Op::kAllgather, "split color " + std::to_string(color) + " must be >= 0");
    const int n = size();
    const int64_t mine[2] = {color, key};
    std::vector<int64_t> all(static_cast<size_t>(2 * n));
    MOE_RETURN_IF_ERROR(allgather(mine, sizeof mine, all.data()));
    std::vector<int> members;
    for (int r = 0; r < n; ++r) {
      if (all[static_cast<size_t>(2 * r)] == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return all[static_cast<size_t>(2 * a + 1)] < all[static_cast<size_t>(2 * b + 1)];
    });
    const uint64_t id = splits_++;
    if (rank_ == *std::min_element(members.begin(), members.end())) {
      std::vector<int> nodes, seen;  // the members' nodes, renumbered by first appearance
      for (int m : members) {
        const int node = node_of(m);
        auto it = std::find(seen.begin(), seen.end(), node);
        if (it == seen.end()) it = seen.insert(seen.end(), node);
        nodes.push_back(static_cast<int>(it - seen.begin()));
      }
      auto child = std::make_shared<GroupState>(static_cast<int>(members.size()), std::move(nodes), timeout_seconds());
      std::lock_guard<std::mutex> lock(g_->mu);
      g_->children[{id, color}] = GroupState::Child{std::move(child), static_cast<int>(members.size())};
    }
    MOE_RETURN_IF_ERROR(barrier());
    std::shared_ptr<GroupState> state;
    {
      std::lock_guard<std::mutex> lock(g_->mu);
      auto it = g_->children.find({id, color});
      MOE_CHECK(it != g_->children.end());
      state = it->second.state;
      if (--it->second.remaining == 0) g_->children.erase(it);
    }
    const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    return std::unique_ptr<Communicator>(std::make_unique<InProcCommunicator>(std::move(state), new_rank));
  }
  std::string backend() const override { return "inproc"; }
  void set_timeout_seconds(double seconds) override {
    MOE_CHECK(seconds > 0 && std::isfinite(seconds));
    g_->timeout_seconds = seconds;
  }
  double timeout_seconds() const override { return g_->timeout_seconds; }

  Status alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                   const std::vector<size_t>& recv_bytes) override {
    auto ex = make_alltoallv(send, send_bytes, recv, recv_bytes);
    return run(*ex);
  }

  StatusOr<std::unique_ptr<CommRequest>> ialltoallv(const void* send, const std::vector<size_t>& send_bytes,
                                                    void* recv, const std::vector<size_t>& recv_bytes) override {
    auto ex = make_alltoallv(send, send_bytes, recv, recv_bytes);
    MOE_RETURN_IF_ERROR(ex->start());
    return std::unique_ptr<CommRequest>(std::make_unique<InProcRequest>(this, std::move(ex)));
  }

  Status alltoall_int64(const int64_t* send, int64_t* recv) override {
    Slot s;
    s.op = Op::kAlltoallInt64;
    s.send = send;
    s.recv = recv;
    Status err;
    if (!send || !recv || static_cast<const void*>(send) == static_cast<const void*>(recv)) {
      err = local_invalid(s.op, "null or identical send/recv buffers");
    }
    Exchange ex(g_.get(), rank_, &active_, s, err);
    return run(ex);
  }

  Status allreduce_sum(float* data, size_t n) override { return allreduce(Op::kAllreduceF32, data, n); }
  Status allreduce_sum(int64_t* data, size_t n) override { return allreduce(Op::kAllreduceI64, data, n); }

  Status allgather(const void* send, size_t bytes, void* recv) override {
    Slot s;
    s.op = Op::kAllgather;
    s.send = send;
    s.recv = recv;
    s.bytes = bytes;
    Status err;
    if (bytes && (!send || !recv)) err = local_invalid(s.op, "null buffer");
    Exchange ex(g_.get(), rank_, &active_, s, err);
    return run(ex);
  }

  Status broadcast(void* data, size_t bytes, int root) override {
    Slot s;
    s.op = Op::kBroadcast;
    s.recv = data;
    s.bytes = bytes;
    s.root = root;
    Status err;
    if (root < 0 || root >= size()) err = local_invalid(s.op, "root " + std::to_string(root) + " out of range");
    if (bytes && !data) err = local_invalid(s.op, "null buffer");
    Exchange ex(g_.get(), rank_, &active_, s, err);
    return run(ex);
  }

  Status barrier() override {
    Slot s;
    s.op = Op::kBarrier;
    Exchange ex(g_.get(), rank_, &active_, s, ok_status());
    return run(ex);
  }

  Status send(const void* data, size_t bytes, int dest, int tag) override {
    MOE_RETURN_IF_ERROR(check_peer("send", dest, tag, data, bytes));
    Message m{rank_, tag, std::vector<unsigned char>(bytes)};
    if (bytes) std::memcpy(m.data.data(), data, bytes);
    std::lock_guard<std::mutex> lock(g_->mu);
    if (g_->broken) return g_->broken_status("send");
    g_->mailbox[dest].push_back(std::move(m));
    g_->cv.notify_all();
    return ok_status();
  }

  Status recv(void* data, size_t bytes, int source, int tag) override {
    MOE_RETURN_IF_ERROR(check_peer("recv", source, tag, data, bytes));
    const auto deadline = g_->deadline_from_now();
    std::deque<Message>& box = g_->mailbox[rank_];
    auto find = [&] {
      for (auto it = box.begin(); it != box.end(); ++it) {
        if (it->source == source && it->tag == tag) return it;
      }
      return box.end();
    };
    Message m;
    while (true) {
      progress_all();  // outstanding ialltoallv requests keep moving meanwhile
      std::unique_lock<std::mutex> lock(g_->mu);
      auto it = box.end();
      const bool woke = g_->cv.wait_until(
          lock, deadline, [&] { return g_->broken || (it = find()) != box.end() || any_can_advance_locked(); });
      if (g_->broken) return g_->broken_status("recv");
      if (it != box.end()) {
        m = std::move(*it);
        box.erase(it);
        break;
      }
      if (!woke) {
        return deadline_exceeded("inproc recv on rank " + std::to_string(rank_) + ": timed out after " +
                                 format_g(g_->timeout_seconds) + " s waiting for rank " + std::to_string(source) +
                                 " (tag " + std::to_string(tag) + ", " + std::to_string(bytes) + " bytes)");
      }
    }
    if (m.data.size() != bytes) {
      return invalid_argument("inproc recv on rank " + std::to_string(rank_) + ": rank " + std::to_string(source) +
                              " sent " + std::to_string(m.data.size()) + " bytes with tag " + std::to_string(tag) +
                              ", expected " + std::to_string(bytes));
    }
    if (bytes) std::memcpy(data, m.data.data(), bytes);
    return ok_status();
  }

  // Blocks until `ex` is done (or times out), progressing every outstanding operation
  // of this rank meanwhile.
  Status wait_exchange(Exchange& ex) {
    while (true) {
      progress_all();
      if (ex.done()) return ex.result();
      std::unique_lock<std::mutex> lock(g_->mu);
      if (!g_->cv.wait_until(lock, ex.deadline(), [&] { return any_can_advance_locked(); })) {
        ex.time_out_locked(lock);
        return ex.result();
      }
    }
  }

  StatusOr<bool> test_exchange(Exchange& ex) {
    progress_all();
    if (!ex.done()) {
      std::unique_lock<std::mutex> lock(g_->mu);
      if (ex.can_advance_locked()) return false;  // became ready just now: next test()
      if (Clock::now() < ex.deadline()) return false;
      ex.time_out_locked(lock);
    }
    if (!ex.result().ok()) return ex.result();
    return true;
  }

 private:
  Status local_invalid(Op op, const std::string& m) const {
    return invalid_argument(std::string("inproc ") + op_name(op) + " on rank " + std::to_string(rank_) + ": " + m);
  }

  std::unique_ptr<Exchange> make_alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                           const std::vector<size_t>& recv_bytes) {
    Slot s;
    s.op = Op::kAlltoallv;
    s.send = send;
    s.recv = recv;
    Status err;
    const size_t n = static_cast<size_t>(size());
    if (send_bytes.size() != n || recv_bytes.size() != n) {
      err = local_invalid(s.op, "send_bytes has " + std::to_string(send_bytes.size()) + " entries, recv_bytes " +
                                    std::to_string(recv_bytes.size()) + ", group size " + std::to_string(n));
    } else {
      size_t total_send = 0, total_recv = 0;
      for (size_t b : send_bytes) total_send += b;
      for (size_t b : recv_bytes) total_recv += b;
      if ((total_send && !send) || (total_recv && !recv)) {
        err = local_invalid(s.op, "null buffer");
      } else if (total_send && total_recv && static_cast<const void*>(send) == static_cast<const void*>(recv)) {
        err = local_invalid(s.op, "send and recv are the same buffer");
      }
    }
    auto ex = std::make_unique<Exchange>(g_.get(), rank_, &active_, s, err);
    // With bad counts, post n zeros so that peers' pair checks stay in bounds (they
    // stop at the invalid flag anyway).
    if (err.ok()) {
      ex->set_counts(send_bytes, recv_bytes);
    } else {
      ex->set_counts(std::vector<size_t>(n, 0), std::vector<size_t>(n, 0));
    }
    return ex;
  }

  Status allreduce(Op op, void* data, size_t n) {
    Slot s;
    s.op = op;
    s.recv = data;
    s.bytes = n;
    Status err;
    if (n && !data) err = local_invalid(op, "null buffer");
    Exchange ex(g_.get(), rank_, &active_, s, err);
    return run(ex);
  }

  Status run(Exchange& ex) {
    MOE_RETURN_IF_ERROR(ex.start());
    return wait_exchange(ex);
  }

  void progress_all() {
    const std::vector<Exchange*> snapshot = active_;  // advance() may remove entries
    for (Exchange* x : snapshot) x->advance();
  }

  bool any_can_advance_locked() const {
    for (const Exchange* x : active_) {
      if (x->can_advance_locked()) return true;
    }
    return false;
  }

  Status check_peer(const char* op, int peer, int tag, const void* data, size_t bytes) const {
    const std::string where = std::string("inproc ") + op + " on rank " + std::to_string(rank_) + ": ";
    if (peer < 0 || peer >= size()) return invalid_argument(where + "rank " + std::to_string(peer) + " out of range");
    if (peer == rank_) return invalid_argument(where + "peer is this rank (copy locally)");
    if (tag < 0) return invalid_argument(where + "negative tag " + std::to_string(tag));
    if (bytes && !data) return invalid_argument(where + "null buffer");
    return ok_status();
  }

  std::shared_ptr<GroupState> g_;
  int rank_;
  std::vector<Exchange*> active_;  // this rank's collectives in flight, in issue order
  uint64_t splits_ = 0;            // split() calls so far (the same count on every rank)
};

InProcRequest::~InProcRequest() {
  if (!ex_->done()) (void)wait();
}

Status InProcRequest::wait() { return comm_->wait_exchange(*ex_); }

StatusOr<bool> InProcRequest::test() { return comm_->test_exchange(*ex_); }

}  // namespace inproc_detail

InProcessGroup::InProcessGroup(int num_ranks, int ranks_per_node, double timeout_seconds) {
  MOE_CHECK(num_ranks >= 1);
  MOE_CHECK(ranks_per_node >= 0);
  MOE_CHECK(timeout_seconds > 0);
  std::vector<int> node_of(static_cast<size_t>(num_ranks), 0);
  for (int r = 0; r < num_ranks; ++r) node_of[static_cast<size_t>(r)] = ranks_per_node == 0 ? 0 : r / ranks_per_node;
  state_ = std::make_shared<inproc_detail::GroupState>(num_ranks, std::move(node_of), timeout_seconds);
  for (int r = 0; r < num_ranks; ++r) comms_.push_back(std::make_unique<inproc_detail::InProcCommunicator>(state_, r));
}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const { return static_cast<int>(comms_.size()); }

Communicator& InProcessGroup::rank(int r) {
  MOE_CHECK(r >= 0 && r < size());
  return *comms_[r];
}

Status run_ranks(InProcessGroup& group, std::function<Status(Communicator&)> fn) {
  const int n = group.size();
  std::mutex mu;
  Status first;
  auto record = [&](int r, Status s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (first.ok()) first = s.with_context("rank " + std::to_string(r));
  };
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        record(r, fn(group.rank(r)));
      } catch (const std::exception& e) {
        record(r, internal_error(std::string("exception: ") + e.what()));
      } catch (...) {
        record(r, internal_error("unknown exception"));
      }
    });
  }
  for (auto& t : threads) t.join();
  return first;
}

}  // namespace moe
