#include "moe/comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <utility>

#include "moe/comm/gloo_store.h"
#include "moe/core/check.h"
#include "moe/core/text_format.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// Slots (gloo's message matching keys) of our own point-to-point traffic: a high byte
// that gloo's collectives (prefixes 0x01..0x08, gloo/types.h) never use.
constexpr uint64_t kSlotSendHeader = 0x70ULL << 56;  // | tag: the 8-byte size of a send()
constexpr uint64_t kSlotSendData = 0x71ULL << 56;    // | tag: its payload
constexpr uint64_t kSlotAlltoallv = 0x72ULL << 56;   // the pairwise alltoallv

Status deadline_exceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
Status unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }

Ms to_ms(double seconds) { return Ms(std::max<long long>(1, std::llround(seconds * 1000.0))); }

// Gloo's timeout errors: "Timed out waiting ...", "Wait timeout for key(s)", "Connect
// timeout", "Read timeout", ... A pair closed because of *another* operation's timeout
// on this rank says "Application timeout caused pair closure": not a deadline of ours.
bool is_timeout(const std::string& what) {
  if (what.find("Application timeout caused pair closure") != std::string::npos) return false;
  return what.find("Timed out") != std::string::npos || what.find("imeout") != std::string::npos;
}

// Remaining time until `deadline`, at least 1 ms (gloo needs a positive timeout).
Ms remaining(Clock::time_point deadline) {
  return std::max(Ms(1), std::chrono::duration_cast<Ms>(deadline - Clock::now()));
}

std::string list_ranks(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ", ";
    s += std::to_string(x);
  }
  return s;
}

unsigned char g_dummy[8];  // stands in for null buffers of zero bytes

class CompletedRequest final : public CommRequest {
 public:
  explicit CompletedRequest(Status s) : s_(std::move(s)) {}
  Status wait() override { return s_; }
  StatusOr<bool> test() override {
    if (!s_.ok()) return s_;
    return true;
  }

 private:
  Status s_;
};

}  // namespace

struct GlooCommunicator::State {
  GlooOptions options;
  int rank = 0;
  int size = 1;
  int generation = 0;
  std::vector<int> world_ranks;
  std::vector<int> node_of;
  int num_nodes = 1;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  bool broken = false;  // an operation failed: reform() or exit
  bool out = false;     // reform() failed: this rank is out for good
  std::string failure;  // the first failure's message

  int world_rank() const { return world_ranks[static_cast<size_t>(rank)]; }

  std::string where(const std::string& op) const {
    std::string w = "gloo " + op + " on rank " + std::to_string(rank) + " of " + std::to_string(size);
    if (generation > 0) w += " (world rank " + std::to_string(world_rank()) + ", generation " + std::to_string(generation) + ")";
    return w;
  }

  void set_nodes() {
    const int k = options.ranks_per_node;
    node_of.assign(static_cast<size_t>(size), 0);
    num_nodes = 1;
    if (k <= 0) return;
    std::vector<int> distinct;
    for (int w : world_ranks) distinct.push_back(w / k);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (int r = 0; r < size; ++r) {
      const int node = world_ranks[static_cast<size_t>(r)] / k;
      node_of[static_cast<size_t>(r)] =
          static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), node) - distinct.begin());
    }
    num_nodes = static_cast<int>(distinct.size());
  }

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_seconds));
  }

  // Rendezvous of a new context (generation `gen`, this rank `r` of `n`) under "gen<gen>".
  Status connect(int gen, int r, int n) {
    const std::string op = "rendezvous of generation " + std::to_string(gen) + " (rank " + std::to_string(r) +
                           " of " + std::to_string(n) + ", store " + options.store_dir + ")";
    try {
      gloo_detail::DeadlineFileStore files(options.store_dir, deadline());
      gloo::rendezvous::PrefixStore store("gen" + std::to_string(gen), files);
      auto c = std::make_shared<gloo::rendezvous::Context>(r, n);
      c->setTimeout(to_ms(options.timeout_seconds));
      c->connectFullMesh(store, device);
      ctx = std::move(c);
      return ok_status();
    } catch (const gloo::IoException& e) {
      if (is_timeout(e.what())) {
        return deadline_exceeded("gloo " + op + ": the peers did not all show up within " +
                                 format_g(options.timeout_seconds) + " s: " + e.what());
      }
      return unavailable("gloo " + op + ": " + e.what());
    } catch (const std::exception& e) {
      return internal_error("gloo " + op + ": " + e.what() +
                            " (keys left by an earlier job? each job needs a fresh store_dir)");
    }
  }

  Status check_usable(const std::string& op) const {
    if (out) return unavailable(where(op) + ": this rank left the group (" + failure + ")");
    if (broken) {
      return unavailable(where(op) + ": communicator unusable after an earlier failure (" + failure +
                         "); call reform()");
    }
    return ok_status();
  }

  // Breaks the communicator and closes all its connections at once. Gloo itself closes
  // them all only after a timeout; after a peer-gone error it closes just that pair, and
  // a peer waiting on this rank would sit out its whole timeout (rank 0 of a ring
  // allreduce, when rank 1 failed on dead rank 2). Closing them makes every peer fail
  // within milliseconds (Unavailable), and in turn close theirs.
  Status fail(Status s) {
    if (!broken) failure = s.message();
    broken = true;
    drop_connections();
    return s;
  }

  void drop_connections() {
    try {
      ctx.reset();
    } catch (...) {
      // Closing sockets has nothing left to report.
    }
  }

  // Runs `body` (gloo calls; may return an error of its own), mapping gloo's exceptions
  // to a Status; any failure breaks the communicator.
  template <class F>
  Status run(const std::string& op, F&& body) {
    MOE_RETURN_IF_ERROR(check_usable(op));
    try {
      Status s = body();
      if (!s.ok() && s.code() != StatusCode::kInvalidArgument) return fail(std::move(s));
      return s;
    } catch (const gloo::IoException& e) {
      if (is_timeout(e.what())) {
        return fail(deadline_exceeded(where(op) + ": timed out after " + format_g(options.timeout_seconds) +
                                      " s (a peer did not take part): " + e.what()));
      }
      return fail(unavailable(where(op) + ": a peer is gone: " + e.what()));
    } catch (const std::exception& e) {
      return fail(internal_error(where(op) + ": " + e.what()));
    } catch (...) {
      return fail(internal_error(where(op) + ": unknown exception from gloo"));
    }
  }

  // Waits for the posted receives (from `srcs`) and sends (to `dsts`) of unbound buffers,
  // naming the peers that did not complete when gloo throws.
  Status wait_all(const std::string& op, gloo::transport::UnboundBuffer* in, const std::vector<int>& dsts,
                  gloo::transport::UnboundBuffer* out, const std::vector<int>& srcs, Clock::time_point until) {
    std::vector<int> missing_recv = srcs, missing_send = dsts;
    try {
      for (size_t i = 0; i < srcs.size(); ++i) {
        int from = -1;
        out->waitRecv(&from, remaining(until));
        missing_recv.erase(std::remove(missing_recv.begin(), missing_recv.end(), from), missing_recv.end());
      }
      for (size_t i = 0; i < dsts.size(); ++i) {
        int to = -1;
        in->waitSend(&to, remaining(until));
        missing_send.erase(std::remove(missing_send.begin(), missing_send.end(), to), missing_send.end());
      }
    } catch (const gloo::IoException& e) {
      std::string peers;
      if (!missing_recv.empty()) peers += "no data yet from rank(s) " + list_ranks(missing_recv);
      if (!missing_send.empty()) peers += std::string(peers.empty() ? "" : "; ") + "not delivered to rank(s) " + list_ranks(missing_send);
      throw gloo::IoException(std::string(e.what()) + " [" + peers + "]");
    }
    (void)op;
    return ok_status();
  }

  Status check_peer(const std::string& op, int peer, int tag, const void* data, size_t bytes) const {
    if (peer < 0 || peer >= size) return invalid_argument(where(op) + ": rank out of range");
    if (peer == rank) return invalid_argument(where(op) + ": peer is this rank (copy locally)");
    if (tag < 0) return invalid_argument(where(op) + ": tag is negative");
    if (data == nullptr && bytes > 0) return invalid_argument(where(op) + ": null buffer");
    return ok_status();
  }

  Status alltoallv(const std::string& op, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                   const std::vector<size_t>& recv_bytes) {
    MOE_RETURN_IF_ERROR(check_usable(op));
    const size_t n = static_cast<size_t>(size);
    if (send_bytes.size() != n || recv_bytes.size() != n) {
      return invalid_argument(where(op) + ": send_bytes has " + std::to_string(send_bytes.size()) +
                              " entries, recv_bytes " + std::to_string(recv_bytes.size()) + ", communicator size " +
                              std::to_string(n));
    }
    std::vector<size_t> soff(n), roff(n);
    size_t s_total = 0, r_total = 0;
    for (size_t r = 0; r < n; ++r) {
      soff[r] = s_total;
      roff[r] = r_total;
      s_total += send_bytes[r];
      r_total += recv_bytes[r];
    }
    if ((s_total > 0 && send == nullptr) || (r_total > 0 && recv == nullptr)) {
      return invalid_argument(where(op) + ": null buffer");
    }
    if (s_total > 0 && send == recv) return invalid_argument(where(op) + ": send and recv are the same buffer");
    const size_t me = static_cast<size_t>(rank);
    if (send_bytes[me] != recv_bytes[me]) {
      return invalid_argument(where(op) + ": sends " + std::to_string(send_bytes[me]) +
                              " bytes to itself but expects " + std::to_string(recv_bytes[me]));
    }
    return run(op, [&]() -> Status {
      const auto until = deadline();
      auto in = ctx->createUnboundBuffer(s_total ? const_cast<void*>(send) : g_dummy, s_total ? s_total : 1);
      auto out = ctx->createUnboundBuffer(r_total ? recv : g_dummy, r_total ? r_total : 1);
      std::vector<int> srcs, dsts;
      // Receives first, then sends, staggered (rank + k); zero-byte blocks are skipped on
      // both sides (the counts agree pairwise).
      for (int k = 1; k < size; ++k) {
        const int src = (rank - k + size) % size;
        if (recv_bytes[static_cast<size_t>(src)] == 0) continue;
        out->recv(src, kSlotAlltoallv, roff[static_cast<size_t>(src)], recv_bytes[static_cast<size_t>(src)]);
        srcs.push_back(src);
      }
      for (int k = 1; k < size; ++k) {
        const int dst = (rank + k) % size;
        if (send_bytes[static_cast<size_t>(dst)] == 0) continue;
        in->send(dst, kSlotAlltoallv, soff[static_cast<size_t>(dst)], send_bytes[static_cast<size_t>(dst)]);
        dsts.push_back(dst);
      }
      if (send_bytes[me] > 0) {
        std::memcpy(static_cast<unsigned char*>(recv) + roff[me], static_cast<const unsigned char*>(send) + soff[me],
                    send_bytes[me]);
      }
      return wait_all(op, in.get(), dsts, out.get(), srcs, until);
    });
  }

  template <class T>
  Status allreduce(const char* op, T* data, size_t n) {
    MOE_RETURN_IF_ERROR(check_usable(op));
    if (n == 0) return ok_status();
    if (data == nullptr) return invalid_argument(where(op) + ": null buffer");
    return run(op, [&]() -> Status {
      gloo::AllreduceOptions o(ctx);
      o.setOutput(data, n);  // in place
      o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);  // each element summed on one rank: bit-identical
      o.setTimeout(to_ms(options.timeout_seconds));
      gloo::allreduce(o);
      return ok_status();
    });
  }
};

GlooCommunicator::GlooCommunicator(std::unique_ptr<State> state) : s_(std::move(state)) {}

GlooCommunicator::~GlooCommunicator() {
  if (!s_) return;
  try {
    s_->drop_connections();  // the peers' operations fail at once
    s_->device.reset();
  } catch (...) {
    // Nothing to do: the process keeps going without this group.
  }
}

StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::create(int rank, int size, const GlooOptions& options) {
  const std::string what = "GlooCommunicator::create(rank " + std::to_string(rank) + ", size " + std::to_string(size) + ")";
  if (size < 1) return invalid_argument(what + ": size must be >= 1");
  if (rank < 0 || rank >= size) return invalid_argument(what + ": rank must be in [0, size)");
  if (options.store_dir.empty()) return invalid_argument(what + ": store_dir is empty (a rendezvous directory is required)");
  if (options.hostname.empty()) return invalid_argument(what + ": hostname is empty");
  if (options.ranks_per_node < 0) {
    return invalid_argument(what + ": ranks_per_node " + std::to_string(options.ranks_per_node) + " is negative");
  }
  if (!(options.timeout_seconds > 0) || !std::isfinite(options.timeout_seconds)) {
    return invalid_argument(what + ": timeout_seconds " + format_g(options.timeout_seconds) +
                            " is not a positive number");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.store_dir, ec);
  if (!std::filesystem::is_directory(options.store_dir, ec)) {
    return invalid_argument(what + ": store_dir " + options.store_dir + " is not a directory and cannot be created");
  }
  auto s = std::make_unique<State>();
  s->options = options;
  s->rank = rank;
  s->size = size;
  for (int r = 0; r < size; ++r) s->world_ranks.push_back(r);
  s->set_nodes();
  try {
    gloo::transport::tcp::attr attr(options.hostname.c_str());
    s->device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return invalid_argument(what + ": hostname " + options.hostname + ": cannot listen there: " + e.what());
  }
  MOE_RETURN_IF_ERROR(s->connect(0, rank, size));
  return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(std::move(s)));
}

int GlooCommunicator::rank() const { return s_->rank; }
int GlooCommunicator::size() const { return s_->size; }
int GlooCommunicator::node_of(int rank) const {
  return (rank >= 0 && rank < s_->size) ? s_->node_of[static_cast<size_t>(rank)] : -1;
}
int GlooCommunicator::num_nodes() const { return s_->num_nodes; }
int GlooCommunicator::generation() const { return s_->generation; }
std::vector<int> GlooCommunicator::world_ranks() const { return s_->world_ranks; }

void GlooCommunicator::set_timeout_seconds(double seconds) {
  MOE_CHECK(seconds > 0 && std::isfinite(seconds));
  s_->options.timeout_seconds = seconds;
  if (s_->ctx) s_->ctx->setTimeout(to_ms(seconds));
}

double GlooCommunicator::timeout_seconds() const { return s_->options.timeout_seconds; }

Status GlooCommunicator::alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                   const std::vector<size_t>& recv_bytes) {
  return s_->alltoallv("alltoallv", send, send_bytes, recv, recv_bytes);
}

StatusOr<std::unique_ptr<CommRequest>> GlooCommunicator::ialltoallv(const void* send,
                                                                    const std::vector<size_t>& send_bytes, void* recv,
                                                                    const std::vector<size_t>& recv_bytes) {
  // Refused at issue, like the MPI backend: bad arguments, or a broken communicator.
  MOE_RETURN_IF_ERROR(s_->check_usable("ialltoallv"));
  Status st = s_->alltoallv("ialltoallv", send, send_bytes, recv, recv_bytes);
  if (st.code() == StatusCode::kInvalidArgument) return st;
  return std::unique_ptr<CommRequest>(std::make_unique<CompletedRequest>(std::move(st)));
}

Status GlooCommunicator::alltoall_int64(const int64_t* send, int64_t* recv) {
  if (!send || !recv || static_cast<const void*>(send) == static_cast<const void*>(recv)) {
    return invalid_argument(s_->where("alltoall_int64") + ": null or identical send/recv buffers");
  }
  const std::vector<size_t> bytes(static_cast<size_t>(s_->size), sizeof(int64_t));
  return s_->alltoallv("alltoall_int64", send, bytes, recv, bytes);
}

Status GlooCommunicator::allreduce_sum(float* data, size_t n) { return s_->allreduce("allreduce_sum(f32)", data, n); }
Status GlooCommunicator::allreduce_sum(int64_t* data, size_t n) {
  return s_->allreduce("allreduce_sum(int64)", data, n);
}

Status GlooCommunicator::allgather(const void* send, size_t bytes, void* recv) {
  State& s = *s_;
  MOE_RETURN_IF_ERROR(s.check_usable("allgather"));
  if (bytes == 0) return ok_status();
  if (!send || !recv) return invalid_argument(s.where("allgather") + ": null buffer");
  if (send == recv) return invalid_argument(s.where("allgather") + ": send and recv are the same buffer");
  return s.run("allgather", [&]() -> Status {
    gloo::AllgatherOptions o(s.ctx);
    o.setInput(static_cast<char*>(const_cast<void*>(send)), bytes);
    o.setOutput(static_cast<char*>(recv), bytes * static_cast<size_t>(s.size));
    o.setTimeout(to_ms(s.options.timeout_seconds));
    gloo::allgather(o);
    return ok_status();
  });
}

Status GlooCommunicator::broadcast(void* data, size_t bytes, int root) {
  State& s = *s_;
  const std::string op = "broadcast from rank " + std::to_string(root);
  MOE_RETURN_IF_ERROR(s.check_usable(op));
  if (root < 0 || root >= s.size) {
    return invalid_argument(s.where(op) + ": root out of range [0, " + std::to_string(s.size) + ")");
  }
  if (bytes == 0) return ok_status();
  if (!data) return invalid_argument(s.where(op) + ": null buffer");
  return s.run(op, [&]() -> Status {
    gloo::BroadcastOptions o(s.ctx);
    o.setOutput(static_cast<char*>(data), bytes);  // in place: the root's output is its input
    o.setRoot(root);
    o.setTimeout(to_ms(s.options.timeout_seconds));
    gloo::broadcast(o);
    return ok_status();
  });
}

Status GlooCommunicator::barrier() {
  State& s = *s_;
  return s.run("barrier", [&]() -> Status {
    gloo::BarrierOptions o(s.ctx);
    o.setTimeout(to_ms(s.options.timeout_seconds));
    gloo::barrier(o);
    return ok_status();
  });
}

Status GlooCommunicator::send(const void* data, size_t bytes, int dest, int tag) {
  State& s = *s_;
  const std::string op = "send to rank " + std::to_string(dest) + " (tag " + std::to_string(tag) + ", " +
                         std::to_string(bytes) + " bytes)";
  MOE_RETURN_IF_ERROR(s.check_usable(op));
  MOE_RETURN_IF_ERROR(s.check_peer(op, dest, tag, data, bytes));
  return s.run(op, [&]() -> Status {
    const auto until = s.deadline();
    uint64_t header = bytes;
    auto h = s.ctx->createUnboundBuffer(&header, sizeof(header));
    h->send(dest, kSlotSendHeader | static_cast<uint64_t>(tag));
    std::unique_ptr<gloo::transport::UnboundBuffer> p;
    if (bytes > 0) {
      p = s.ctx->createUnboundBuffer(const_cast<void*>(data), bytes);
      p->send(dest, kSlotSendData | static_cast<uint64_t>(tag));
    }
    MOE_RETURN_IF_ERROR(s.wait_all(op, h.get(), {dest}, h.get(), {}, until));
    if (p) MOE_RETURN_IF_ERROR(s.wait_all(op, p.get(), {dest}, p.get(), {}, until));
    return ok_status();
  });
}

Status GlooCommunicator::recv(void* data, size_t bytes, int source, int tag) {
  State& s = *s_;
  const std::string op = "recv from rank " + std::to_string(source) + " (tag " + std::to_string(tag) + ", " +
                         std::to_string(bytes) + " bytes)";
  MOE_RETURN_IF_ERROR(s.check_usable(op));
  MOE_RETURN_IF_ERROR(s.check_peer(op, source, tag, data, bytes));
  return s.run(op, [&]() -> Status {
    const auto until = s.deadline();
    uint64_t header = 0;
    auto h = s.ctx->createUnboundBuffer(&header, sizeof(header));
    h->recv(source, kSlotSendHeader | static_cast<uint64_t>(tag));
    MOE_RETURN_IF_ERROR(s.wait_all(op, h.get(), {}, h.get(), {source}, until));
    // A message of another size is still received (into scratch), keeping both sides in step.
    std::vector<unsigned char> scratch(header != bytes ? static_cast<size_t>(header) : 0);
    void* into = header != bytes ? static_cast<void*>(scratch.data()) : data;
    if (header > 0) {
      auto p = s.ctx->createUnboundBuffer(into, static_cast<size_t>(header));
      p->recv(source, kSlotSendData | static_cast<uint64_t>(tag));
      MOE_RETURN_IF_ERROR(s.wait_all(op, p.get(), {}, p.get(), {source}, until));
    }
    if (header != bytes) {
      return invalid_argument(s.where(op) + ": the message has " + std::to_string(header) + " bytes");
    }
    return ok_status();
  });
}

Status GlooCommunicator::reform(double join_seconds) {
  State& s = *s_;
  const int next = s.generation + 1;
  const std::string op = "reform to generation " + std::to_string(next);
  if (!std::isfinite(join_seconds) || join_seconds < 0) {
    return invalid_argument(s.where(op) + ": join_seconds " + format_g(join_seconds) + " is not a number >= 0");
  }
  if (s.out) return unavailable(s.where(op) + ": this rank left the group (" + s.failure + ")");
  const int me = s.world_rank();
  const bool coordinator = s.rank == 0;
  // Close the old connections first (if an operation failed they are closed already):
  // peers still blocked in an operation with us fail at once instead of timing out.
  s.drop_connections();
  auto leave = [&](Status st) {
    s.out = true;
    s.broken = true;
    s.failure = st.message();
    return st;
  };
  auto members = gloo_detail::agree_members(s.options.store_dir, next, s.world_ranks, me, coordinator, join_seconds,
                                            s.options.timeout_seconds);
  if (!members.ok()) return leave(members.status());
  const std::vector<int>& list = *members;
  const int new_rank = static_cast<int>(std::lower_bound(list.begin(), list.end(), me) - list.begin());
  Status st = s.connect(next, new_rank, static_cast<int>(list.size()));
  if (!st.ok()) return leave(st);
  s.generation = next;
  s.world_ranks = list;
  s.rank = new_rank;
  s.size = static_cast<int>(list.size());
  s.set_nodes();
  s.broken = false;
  s.failure.clear();
  return ok_status();
}

}  // namespace moe
