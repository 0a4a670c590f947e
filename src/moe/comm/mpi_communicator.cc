// Over 600 lines: one class (MpiCommunicator) whose operations share the nonblocking-with-deadline
// machinery (Pending, wait, orphans); split() and its child set-up belong with it.
#include "moe/comm/mpi_communicator.h"

// (OMPI_SKIP_MPICXX: set for every user of the moe target, src/CMakeLists.txt.)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "moe/comm/mpi_process.h"
#include "moe/core/check.h"
#include "moe/core/text_format.h"

namespace moe {
namespace {

using mpi_detail::mpi_finalized;
using mpi_detail::mpi_initialized;
using mpi_detail::mpi_status;
using Clock = std::chrono::steady_clock;

Status deadline_exceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
Status unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }

// MPI may reject null buffers even with zero counts; point those at dummy bytes.
// Send and receive get different ones: Open MPI's nonblocking collectives (libnbc)
// take sendbuf == recvbuf to mean MPI_IN_PLACE, which with ialltoallv runs another
// schedule than the peers' and hangs (seen with a rank whose blocks were all empty).
unsigned char g_send_dummy[8];
unsigned char g_recv_dummy[8];
const void* nonnull(const void* p) { return p ? p : g_send_dummy; }
void* nonnull(void* p) { return p ? p : g_recv_dummy; }

// Sleeps between MPI_Test calls: yield for the first ~1 ms, then 50 us naps, and 1 ms
// naps after 100 ms (a wait that long is an idle one, e.g. an EP worker waiting for the
// next request: 50 us naps kept 20% of a core busy).
class Backoff {
 public:
  void pause() {
    const auto waited = Clock::now() - start_;
    if (waited < std::chrono::milliseconds(1)) {
      std::this_thread::yield();
    } else if (waited < std::chrono::milliseconds(100)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  Clock::time_point start_ = Clock::now();
};

enum class Kind {
  kCollective,  // a nonblocking collective: can be neither cancelled nor freed
  kP2p,         // user send/recv: cancellable
  kPairwise,    // pairwise alltoallv: point-to-point, but a failure desynchronizes the peers
};

// One operation in flight: its MPI requests, and the arrays MPI reads until completion.
struct Pending {
  std::string op;  // for messages, e.g. "barrier", "recv from rank 1 (tag 3, 8 bytes)"
  Kind kind = Kind::kCollective;
  Clock::time_point deadline;
  std::vector<MPI_Request> reqs;
  std::vector<MPI_Status> statuses;  // statuses[i] of reqs[i], valid once it completed
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;  // MPI_Ialltoallv
  bool done = false;
  Status result;

  MPI_Request* add() {
    reqs.push_back(MPI_REQUEST_NULL);
    statuses.emplace_back();
    return &reqs.back();
  }
};

class MpiCommunicator;

class MpiRequest : public CommRequest {
 public:
  MpiRequest(MpiCommunicator* comm, std::unique_ptr<Pending> p) : comm_(comm), p_(std::move(p)) {}
  ~MpiRequest() override;
  Status wait() override;
  StatusOr<bool> test() override;

 private:
  MpiCommunicator* comm_;
  std::unique_ptr<Pending> p_;
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(const MpiOptions& options) : options_(options) {}

  ~MpiCommunicator() override {
    if (!mpi_initialized() || mpi_finalized()) return;
    // Give timed-out operations a last chance to complete (e.g. a late peer).
    const auto grace_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(std::min(options_.timeout_seconds, 1.0)));
    Backoff backoff;
    while (!orphans_.empty() && Clock::now() < grace_end) {
      drain_orphans();
      if (!orphans_.empty()) backoff.pause();
    }
    for (auto& [req, kind] : orphans_) {
      // Point-to-point requests may be cancelled and freed; collective ones may not
      // (MPI forbids it): those stay pending in the library.
      if (kind != Kind::kCollective && req != MPI_REQUEST_NULL) {
        MPI_Cancel(&req);
        MPI_Request_free(&req);
      }
    }
    if (p2p_comm_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_comm_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  // Collective set-up: duplicates MPI_COMM_WORLD twice (collectives + pairwise
  // alltoallv; user point-to-point) and works out the nodes.
  Status init() {
    {
      Pending p = start("communicator set-up (MPI_Comm_idup)", Kind::kCollective);
      MPI_Comm a = MPI_COMM_NULL, b = MPI_COMM_NULL;
      int rc = MPI_Comm_idup(MPI_COMM_WORLD, &a, p.add());
      if (rc == MPI_SUCCESS) rc = MPI_Comm_idup(MPI_COMM_WORLD, &b, p.add());
      if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
      MOE_RETURN_IF_ERROR(wait(p));
      comm_ = a;
      p2p_comm_ = b;
    }
    for (MPI_Comm c : {comm_, p2p_comm_}) {
      int rc = MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
      if (rc != MPI_SUCCESS) return mpi_status("MPI_Comm_set_errhandler", rc);
    }
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    void* attr = nullptr;
    int flag = 0;
    if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag) == MPI_SUCCESS && flag) {
      tag_ub_ = *static_cast<int*>(attr);
    }

    node_of_.assign(size_, 0);
    if (options_.ranks_per_node > 0) {
      for (int r = 0; r < size_; ++r) node_of_[r] = r / options_.ranks_per_node;
      num_nodes_ = (size_ + options_.ranks_per_node - 1) / options_.ranks_per_node;
      return ok_status();
    }
    // Real nodes. All ranks have just completed the idup, so the (blocking) split
    // cannot wait long for a missing peer. key = rank: local rank 0 is the node's
    // lowest rank, its "leader".
    MPI_Comm shm = MPI_COMM_NULL;
    int rc = MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shm);
    if (rc != MPI_SUCCESS) return mpi_status("MPI_Comm_split_type", rc);
    MPI_Group shm_group, group;
    MPI_Comm_group(shm, &shm_group);
    MPI_Comm_group(comm_, &group);
    int zero = 0, leader = -1;
    rc = MPI_Group_translate_ranks(shm_group, 1, &zero, group, &leader);
    MPI_Group_free(&shm_group);
    MPI_Group_free(&group);
    MPI_Comm_free(&shm);
    if (rc != MPI_SUCCESS) return mpi_status("MPI_Group_translate_ranks", rc);
    std::vector<int> leaders(size_);
    {
      Pending p = start("node discovery (MPI_Iallgather)", Kind::kCollective);
      rc = MPI_Iallgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm_, p.add());
      if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
      MOE_RETURN_IF_ERROR(wait(p));
    }
    std::vector<int> distinct = leaders;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (int r = 0; r < size_; ++r) {
      node_of_[r] = static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), leaders[r]) - distinct.begin());
    }
    num_nodes_ = static_cast<int>(distinct.size());
    return ok_status();
  }

  // A child of split(): takes ownership of its two communicators.
  Status adopt(MPI_Comm collectives, MPI_Comm p2p, std::vector<int> node_of, int tag_ub) {
    comm_ = collectives;
    p2p_comm_ = p2p;
    for (MPI_Comm c : {comm_, p2p_comm_}) {
      int rc = MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
      if (rc != MPI_SUCCESS) return mpi_status("MPI_Comm_set_errhandler", rc);
    }
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    tag_ub_ = tag_ub;
    node_of_ = std::move(node_of);
    num_nodes_ = node_of_.empty() ? 1 : *std::max_element(node_of_.begin(), node_of_.end()) + 1;
    return ok_status();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_of(int rank) const override { return (rank >= 0 && rank < size_) ? node_of_[rank] : -1; }
  int num_nodes() const override { return num_nodes_; }
  std::string backend() const override { return "mpi"; }
  void set_timeout_seconds(double seconds) override {
    MOE_CHECK(seconds > 0 && std::isfinite(seconds));
    options_.timeout_seconds = seconds;
  }
  double timeout_seconds() const override { return options_.timeout_seconds; }

  Status alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                   const std::vector<size_t>& recv_bytes) override {
    MOE_ASSIGN_OR_RETURN(auto p, start_alltoallv(send, send_bytes, recv, recv_bytes));
    return wait(*p);
  }

  StatusOr<std::unique_ptr<CommRequest>> ialltoallv(const void* send, const std::vector<size_t>& send_bytes,
                                                    void* recv, const std::vector<size_t>& recv_bytes) override {
    MOE_ASSIGN_OR_RETURN(auto p, start_alltoallv(send, send_bytes, recv, recv_bytes));
    return std::unique_ptr<CommRequest>(std::make_unique<MpiRequest>(this, std::move(p)));
  }

  Status alltoall_int64(const int64_t* send, int64_t* recv) override {
    MOE_RETURN_IF_ERROR(check_usable("alltoall_int64"));
    if (!send || !recv || static_cast<const void*>(send) == static_cast<const void*>(recv)) {
      return invalid_argument("mpi alltoall_int64: null or identical send/recv buffers");
    }
    Pending p = start("alltoall_int64", Kind::kCollective);
    const int rc = MPI_Ialltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, comm_, p.add());
    if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
    return wait(p);
  }

  Status allreduce_sum(float* data, size_t n) override { return allreduce("allreduce_sum(f32)", data, n, MPI_FLOAT); }
  Status allreduce_sum(int64_t* data, size_t n) override {
    return allreduce("allreduce_sum(int64)", data, n, MPI_INT64_T);
  }

  Status allgather(const void* send, size_t bytes, void* recv) override {
    MOE_RETURN_IF_ERROR(check_usable("allgather"));
    MOE_RETURN_IF_ERROR(check_count("allgather", "byte count", bytes));
    Pending p = start("allgather", Kind::kCollective);
    const int n = static_cast<int>(bytes);
    const void* sbuf = bytes ? nonnull(send) : g_send_dummy;
    void* rbuf = bytes ? nonnull(recv) : g_recv_dummy;
    if (sbuf == rbuf) return invalid_argument("mpi allgather: send and recv are the same buffer");
    const int rc = MPI_Iallgather(sbuf, n, MPI_BYTE, rbuf, n, MPI_BYTE, comm_, p.add());
    if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
    return wait(p);
  }

  Status broadcast(void* data, size_t bytes, int root) override {
    MOE_RETURN_IF_ERROR(check_usable("broadcast"));
    MOE_RETURN_IF_ERROR(check_count("broadcast", "byte count", bytes));
    if (root < 0 || root >= size_) {
      return invalid_argument("mpi broadcast: root " + std::to_string(root) + " out of range [0, " +
                              std::to_string(size_) + ")");
    }
    Pending p = start("broadcast from rank " + std::to_string(root), Kind::kCollective);
    const int rc = MPI_Ibcast(nonnull(data), static_cast<int>(bytes), MPI_BYTE, root, comm_, p.add());
    if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
    return wait(p);
  }

  Status reduce_scatter_sum(const float* send, float* recv, size_t count) override {
    MOE_RETURN_IF_ERROR(check_usable("reduce_scatter_sum"));
    MOE_RETURN_IF_ERROR(check_count("reduce_scatter_sum", "element count", count * static_cast<size_t>(size_)));
    if (count && (!send || !recv || static_cast<const void*>(send) == static_cast<const void*>(recv))) {
      return invalid_argument("mpi reduce_scatter_sum: null or identical send/recv buffers");
    }
    Pending p = start("reduce_scatter_sum", Kind::kCollective);
    const void* sbuf = count ? static_cast<const void*>(send) : g_send_dummy;
    void* rbuf = count ? static_cast<void*>(recv) : g_recv_dummy;
    const int rc =
        MPI_Ireduce_scatter_block(sbuf, rbuf, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_, p.add());
    if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
    return wait(p);
  }

  // The (color, key) allgather proves every peer alive within the deadline; the
  // blocking MPI_Comm_split that follows then cannot wait long for a missing one.
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override {
    MOE_RETURN_IF_ERROR(check_usable("split"));
    if (color < 0) return invalid_argument("mpi split: color " + std::to_string(color) + " must be >= 0");
    const int mine[2] = {color, key};
    std::vector<int> all(static_cast<size_t>(2 * size_));
    MOE_RETURN_IF_ERROR(allgather(mine, sizeof mine, all.data()));
    std::vector<int> members;
    for (int r = 0; r < size_; ++r) {
      if (all[static_cast<size_t>(2 * r)] == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return all[static_cast<size_t>(2 * a + 1)] < all[static_cast<size_t>(2 * b + 1)];
    });
    std::vector<int> nodes, seen;  // the members' nodes, renumbered by first appearance
    for (int m : members) {
      auto it = std::find(seen.begin(), seen.end(), node_of_[m]);
      if (it == seen.end()) it = seen.insert(seen.end(), node_of_[m]);
      nodes.push_back(static_cast<int>(it - seen.begin()));
    }
    MPI_Comm a = MPI_COMM_NULL, b = MPI_COMM_NULL;
    int rc = MPI_Comm_split(comm_, color, key, &a);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_split(p2p_comm_, color, key, &b);
    if (rc != MPI_SUCCESS) {
      if (a != MPI_COMM_NULL) MPI_Comm_free(&a);
      return mpi_status("MPI_Comm_split", rc);
    }
    auto child = std::make_unique<MpiCommunicator>(options_);
    MOE_RETURN_IF_ERROR(child->adopt(a, b, std::move(nodes), tag_ub_));
    return std::unique_ptr<Communicator>(std::move(child));
  }

  Status barrier() override {
    MOE_RETURN_IF_ERROR(check_usable("barrier"));
    Pending p = start("barrier", Kind::kCollective);
    const int rc = MPI_Ibarrier(comm_, p.add());
    if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
    return wait(p);
  }

  Status send(const void* data, size_t bytes, int dest, int tag) override {
    const std::string op = "send to rank " + std::to_string(dest) + " (tag " + std::to_string(tag) + ", " +
                           std::to_string(bytes) + " bytes)";
    MOE_RETURN_IF_ERROR(check_usable(op));
    MOE_RETURN_IF_ERROR(check_peer(op, dest, tag, bytes));
    Pending p = start(op, Kind::kP2p);
    const int rc = MPI_Isend(nonnull(data), static_cast<int>(bytes), MPI_BYTE, dest, tag, p2p_comm_, p.add());
    if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
    return wait(p);
  }

  Status recv(void* data, size_t bytes, int source, int tag) override {
    const std::string op = "recv from rank " + std::to_string(source) + " (tag " + std::to_string(tag) + ", " +
                           std::to_string(bytes) + " bytes)";
    MOE_RETURN_IF_ERROR(check_usable(op));
    MOE_RETURN_IF_ERROR(check_peer(op, source, tag, bytes));
    Pending p = start(op, Kind::kP2p);
    const int rc = MPI_Irecv(nonnull(data), static_cast<int>(bytes), MPI_BYTE, source, tag, p2p_comm_, p.add());
    if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
    MOE_RETURN_IF_ERROR(wait(p));
    int count = -1;
    MPI_Get_count(&p.statuses[0], MPI_BYTE, &count);
    if (count != static_cast<int>(bytes)) {
      return invalid_argument("mpi " + op + " on rank " + std::to_string(rank_) + ": the message has " +
                              std::to_string(count) + " bytes");
    }
    return ok_status();
  }

  // Tests every request once; on completion, error or timeout sets p.done/p.result.
  StatusOr<bool> poll(Pending& p) {
    if (!p.done) {
      bool all = true;
      for (size_t i = 0; i < p.reqs.size(); ++i) {
        if (p.reqs[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        const int rc = MPI_Test(&p.reqs[i], &flag, &p.statuses[i]);
        if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
        if (!flag) all = false;
      }
      if (all) {
        p.done = true;
        p.result = ok_status();
      } else if (Clock::now() >= p.deadline) {
        return expire(p);
      } else {
        return false;
      }
    }
    if (!p.result.ok()) return p.result;
    return true;
  }

  Status wait(Pending& p) {
    Backoff backoff;
    while (true) {
      MOE_ASSIGN_OR_RETURN(bool done, poll(p));
      if (done) return ok_status();
      backoff.pause();
    }
  }

 private:
  Pending start(std::string op, Kind kind) {
    Pending p;
    p.op = std::move(op);
    p.kind = kind;
    p.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options_.timeout_seconds));
    return p;
  }

  Status check_usable(const std::string& op) const {
    if (!broken_) return ok_status();
    return unavailable("mpi " + op + " on rank " + std::to_string(rank_) +
                       ": communicator unusable after an earlier failure (" + failure_ + ")");
  }

  static Status check_count(const std::string& op, const char* what, size_t n) {
    if (n <= static_cast<size_t>(INT_MAX)) return ok_status();
    return invalid_argument("mpi " + op + ": " + what + " " + std::to_string(n) + " exceeds INT_MAX (" +
                            std::to_string(INT_MAX) + ")");
  }

  Status check_peer(const std::string& op, int peer, int tag, size_t bytes) const {
    const std::string where = "mpi " + op + " on rank " + std::to_string(rank_) + ": ";
    if (peer < 0 || peer >= size_) return invalid_argument(where + "rank out of range");
    if (peer == rank_) return invalid_argument(where + "peer is this rank (copy locally)");
    if (tag < 0 || tag > tag_ub_) {
      return invalid_argument(where + "tag out of range [0, " + std::to_string(tag_ub_) + "]");
    }
    return check_count(op, "byte count", bytes);
  }

  Status allreduce(const char* op, void* data, size_t n, MPI_Datatype type) {
    MOE_RETURN_IF_ERROR(check_usable(op));
    MOE_RETURN_IF_ERROR(check_count(op, "element count", n));
    Pending p = start(op, Kind::kCollective);
    const int rc = MPI_Iallreduce(MPI_IN_PLACE, nonnull(data), static_cast<int>(n), type, MPI_SUM, comm_, p.add());
    if (rc != MPI_SUCCESS) return fail(p, mpi_status(p.op, rc));
    return wait(p);
  }

  StatusOr<std::unique_ptr<Pending>> start_alltoallv(const void* send, const std::vector<size_t>& send_bytes,
                                                     void* recv, const std::vector<size_t>& recv_bytes) {
    const bool pairwise = options_.a2a_algo == A2aAlgo::kPairwise;
    const std::string op = pairwise ? "alltoallv (pairwise)" : "alltoallv";
    MOE_RETURN_IF_ERROR(check_usable(op));
    const size_t n = static_cast<size_t>(size_);
    if (send_bytes.size() != n || recv_bytes.size() != n) {
      return invalid_argument("mpi " + op + ": send_bytes has " + std::to_string(send_bytes.size()) +
                              " entries, recv_bytes " + std::to_string(recv_bytes.size()) + ", communicator size " +
                              std::to_string(n));
    }
    std::vector<size_t> soff(n), roff(n);
    size_t s_total = 0, r_total = 0;
    for (size_t r = 0; r < n; ++r) {
      MOE_RETURN_IF_ERROR(check_count(op, "block size", send_bytes[r]));
      MOE_RETURN_IF_ERROR(check_count(op, "block size", recv_bytes[r]));
      soff[r] = s_total;
      roff[r] = r_total;
      s_total += send_bytes[r];
      r_total += recv_bytes[r];
    }
    const auto* sbuf = static_cast<const unsigned char*>(s_total ? nonnull(send) : g_send_dummy);
    auto* rbuf = static_cast<unsigned char*>(r_total ? nonnull(recv) : g_recv_dummy);
    if (static_cast<const void*>(sbuf) == static_cast<const void*>(rbuf)) {
      return invalid_argument("mpi " + op + ": send and recv are the same buffer");
    }
    auto p = std::make_unique<Pending>(start(op, pairwise ? Kind::kPairwise : Kind::kCollective));
    if (!pairwise) {
      for (size_t r = 0; r < n; ++r) {
        if (soff[r] > static_cast<size_t>(INT_MAX) || roff[r] > static_cast<size_t>(INT_MAX)) {
          return invalid_argument("mpi " + op + ": byte displacement of block " + std::to_string(r) +
                                  " exceeds INT_MAX (MPI_Alltoallv takes int displacements; use A2aAlgo::kPairwise)");
        }
        p->send_counts.push_back(static_cast<int>(send_bytes[r]));
        p->send_displs.push_back(static_cast<int>(soff[r]));
        p->recv_counts.push_back(static_cast<int>(recv_bytes[r]));
        p->recv_displs.push_back(static_cast<int>(roff[r]));
      }
      const int rc = MPI_Ialltoallv(sbuf, p->send_counts.data(), p->send_displs.data(), MPI_BYTE, rbuf,
                                    p->recv_counts.data(), p->recv_displs.data(), MPI_BYTE, comm_, p->add());
      if (rc != MPI_SUCCESS) return fail(*p, mpi_status(p->op, rc));
      return p;
    }
    const int me = rank_;
    if (send_bytes[me] != recv_bytes[me]) {
      return invalid_argument("mpi " + op + " on rank " + std::to_string(me) + ": sends " +
                              std::to_string(send_bytes[me]) + " bytes to itself but expects " +
                              std::to_string(recv_bytes[me]));
    }
    // Receives first, then sends, staggered (rank + k) so that not every rank sends to
    // rank 0 first. Zero-byte blocks are skipped on both sides (counts agree pairwise).
    for (int k = 1; k < size_; ++k) {
      const int src = (me - k + size_) % size_;
      if (recv_bytes[src] == 0) continue;
      const int rc = MPI_Irecv(rbuf + roff[src], static_cast<int>(recv_bytes[src]), MPI_BYTE, src, kPairwiseTag,
                               comm_, p->add());
      if (rc != MPI_SUCCESS) return fail(*p, mpi_status(p->op, rc));
    }
    for (int k = 1; k < size_; ++k) {
      const int dst = (me + k) % size_;
      if (send_bytes[dst] == 0) continue;
      const int rc = MPI_Isend(sbuf + soff[dst], static_cast<int>(send_bytes[dst]), MPI_BYTE, dst, kPairwiseTag,
                               comm_, p->add());
      if (rc != MPI_SUCCESS) return fail(*p, mpi_status(p->op, rc));
    }
    if (send_bytes[me]) std::memcpy(rbuf + roff[me], sbuf + soff[me], send_bytes[me]);
    return p;
  }

  // Ends `p` with error `s`; requests still in flight become orphans and break the
  // communicator (their peers can no longer be matched up).
  Status fail(Pending& p, Status s) {
    bool left = false;
    for (MPI_Request& r : p.reqs) {
      if (r == MPI_REQUEST_NULL) continue;
      orphans_.emplace_back(r, p.kind);
      r = MPI_REQUEST_NULL;
      left = true;
    }
    if (left || p.kind != Kind::kP2p) {
      if (!broken_) failure_ = s.message();
      broken_ = true;
    }
    p.done = true;
    p.result = s;
    return s;
  }

  // Timeout. Point-to-point requests are cancelled (a receive nobody matches cancels
  // cleanly); collective ones cannot be.
  Status expire(Pending& p) {
    std::string msg = "mpi " + p.op + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                      ": timed out after " + format_g(options_.timeout_seconds) + " s";
    if (p.kind == Kind::kCollective) msg += " (a peer did not join)";
    if (p.kind != Kind::kCollective) {
      for (MPI_Request& r : p.reqs) {
        if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
      }
      const auto until = Clock::now() + std::chrono::milliseconds(100);
      Backoff backoff;
      while (true) {
        bool all = true;
        for (size_t i = 0; i < p.reqs.size(); ++i) {
          if (p.reqs[i] == MPI_REQUEST_NULL) continue;
          int flag = 0;
          if (MPI_Test(&p.reqs[i], &flag, &p.statuses[i]) != MPI_SUCCESS) flag = 0;
          if (!flag) all = false;
        }
        if (all || Clock::now() >= until) break;
        backoff.pause();
      }
    }
    Status s = deadline_exceeded(msg);
    if (p.kind == Kind::kPairwise) {
      // Even with every request cancelled, a late message would match the next one.
      if (!broken_) failure_ = s.message();
      broken_ = true;
    }
    return fail(p, s);
  }

  // Drops completed orphans.
  void drain_orphans() {
    for (auto& [req, kind] : orphans_) {
      if (req == MPI_REQUEST_NULL) continue;
      int flag = 0;
      if (MPI_Test(&req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) continue;
    }
    orphans_.erase(std::remove_if(orphans_.begin(), orphans_.end(),
                                  [](const auto& o) { return o.first == MPI_REQUEST_NULL; }),
                   orphans_.end());
  }

  static constexpr int kPairwiseTag = 0;

  MpiOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;      // collectives, pairwise alltoallv
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;  // user send/recv (their tags never meet ours)
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  std::vector<int> node_of_;
  int num_nodes_ = 1;
  bool broken_ = false;
  std::string failure_;
  std::vector<std::pair<MPI_Request, Kind>> orphans_;  // timed-out requests still in MPI's hands
};

MpiRequest::~MpiRequest() {
  if (!p_->done) (void)comm_->wait(*p_);
}

Status MpiRequest::wait() { return comm_->wait(*p_); }

StatusOr<bool> MpiRequest::test() { return comm_->poll(*p_); }

}  // namespace

StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(const MpiOptions& options) {
  if (!mpi_initialized()) return failed_precondition("make_mpi_communicator: call mpi_init() first");
  if (mpi_finalized()) return failed_precondition("make_mpi_communicator: MPI was already finalized");
  if (options.ranks_per_node < 0) {
    return invalid_argument("make_mpi_communicator: ranks_per_node " + std::to_string(options.ranks_per_node) +
                            " is negative");
  }
  if (!(options.timeout_seconds > 0) || !std::isfinite(options.timeout_seconds)) {
    return invalid_argument("make_mpi_communicator: timeout_seconds " + format_g(options.timeout_seconds) +
                            " is not a positive number");
  }
  auto comm = std::make_unique<MpiCommunicator>(options);
  MOE_RETURN_IF_ERROR(comm->init());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace moe
