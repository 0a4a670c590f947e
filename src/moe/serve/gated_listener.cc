#include "moe/serve/gated_listener.h"

#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

namespace moe::serve {
namespace {

using Clock = std::chrono::steady_clock;

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return;
  char host[NI_MAXHOST] = {}, serv[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return;
  }
  ip = host;
  port = std::atoi(serv);
}

// poll() for `events` up to `ms` (>= 0); > 0 when ready.
int wait_for(int fd, short events, int64_t ms) {
  pollfd p{fd, events, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
  } while (rc < 0 && errno == EINTR);
  return rc;
}

// A connection's stream for httplib's process_request: buffered reads (httplib reads a
// request head a byte at a time) bounded by the per-read timeout and by the request's
// deadline; writes bounded by the write timeout. Bytes read past one request stay in
// the buffer (pipelining): buffered() says so.
class GatedStream final : public httplib::Stream {
 public:
  GatedStream(int fd, int64_t read_timeout_ms, int64_t write_timeout_ms)
      : fd_(fd), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {}

  void set_deadline(Clock::time_point deadline) { deadline_ = deadline; }
  size_t buffered() const { return end_ - begin_; }

  bool is_readable() const override { return buffered() > 0 || wait_for(fd_, POLLIN, read_wait_ms()) > 0; }
  bool is_writable() const override {
    if (wait_for(fd_, POLLOUT, write_timeout_ms_) <= 0) return false;
    // Alive: nothing to read, or something (not the end of the stream).
    if (wait_for(fd_, POLLIN, 0) == 0) return true;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (buffered() == 0) {
      if (wait_for(fd_, POLLIN, read_wait_ms()) <= 0) return -1;
      if (size >= sizeof(buf_)) return recv_some(ptr, size);  // a large body read: straight in
      const ssize_t n = recv_some(buf_, sizeof(buf_));
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, buffered());
    std::memcpy(ptr, buf_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (wait_for(fd_, POLLOUT, write_timeout_ms_) <= 0) return -1;
    ssize_t n;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  int64_t read_wait_ms() const {
    const int64_t left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    return std::max<int64_t>(0, std::min(read_timeout_ms_, left));
  }
  ssize_t recv_some(char* ptr, size_t size) {
    ssize_t n;
    do {
      n = ::recv(fd_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  const int fd_;
  const int64_t read_timeout_ms_, write_timeout_ms_;
  Clock::time_point deadline_ = Clock::time_point::max();
  char buf_[16384];
  size_t begin_ = 0, end_ = 0;
};

// How long a worker waits for a kept-alive connection's next request before parking it
// in the gate (docs/performance.md: wrk with and without the gate).
constexpr int64_t kFastPathWait = 100;  // ms

// Whether a whole request head ("\r\n\r\n") is readable on `fd` within `ms`; false at
// once for a partial head (the gate waits for the rest) or a closed connection.
bool head_arrives_within(int fd, int64_t ms) {
  if (wait_for(fd, POLLIN, ms) <= 0) return false;
  char buf[8192];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
  return n > 0 && std::string_view(buf, static_cast<size_t>(n)).find("\r\n\r\n") != std::string_view::npos;
}

}  // namespace

Listener::~Listener() { stop_gate(); }

void Listener::raise_backlog() {
  const socket_t s = svr_sock_.load();
  if (s != INVALID_SOCKET) ::listen(s, SOMAXCONN);
}

Status Listener::start_gate(const GateOptions& gate, size_t max_threads) {
  workers_ = std::make_unique<GrowingThreadPool>(std::min<size_t>(4, max_threads), std::max<size_t>(1, max_threads));
  gate_ = std::make_unique<ConnectionGate>(gate, [this](int fd) {
    workers_->enqueue([this, fd] { serve(fd); });
  });
  new_task_queue = [] { return new InlineTaskQueue(); };
  return gate_->start();
}

void Listener::stop_gate() {
  if (gate_) gate_->stop();         // no more hand-offs; parked connections closed
  if (workers_) workers_->shutdown();  // connections being served end (the listener is closed)
}

ConnectionGate::Counters Listener::gate_counters() const {
  return gate_ ? gate_->counters() : ConnectionGate::Counters{};
}

bool Listener::process_and_close_socket(socket_t sock) {
  if (!gate_) {
    ::close(sock);
    return false;
  }
  gate_->admit(sock);
  return true;
}

void Listener::serve(socket_t sock) {
  const int64_t read_ms = static_cast<int64_t>(read_timeout_sec_) * 1000 + read_timeout_usec_ / 1000;
  const int64_t write_ms = static_cast<int64_t>(write_timeout_sec_) * 1000 + write_timeout_usec_ / 1000;
  GatedStream strm(sock, read_ms, write_ms);
  for (size_t served = 0;; ++served) {
    // The whole request (its head is here already; its body) within one read timeout.
    strm.set_deadline(Clock::now() + std::chrono::milliseconds(read_ms));
    const bool last = !is_running() || served + 1 >= keep_alive_max_count_;
    bool closed = false;
    const bool ok = process_request(strm, last, closed, nullptr);
    if (!ok || closed || last || !is_running()) break;
    if (strm.buffered() > 0) continue;  // the next request is here already (pipelined)
    // An active client sends its next request at once: a whole head within
    // kFastPathWait is served by this worker; anything else (idle, or a head still
    // coming) waits in the gate without a worker.
    if (head_arrives_within(sock, kFastPathWait)) continue;
    gate_->park(sock);
    return;
  }
  gate_->release(sock);
  ::close(sock);
}

}  // namespace moe::serve
