#include "moe/serve/connection_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

namespace moe::serve {
namespace {

std::string peer_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, buf, sizeof(buf));
  } else if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, buf, sizeof(buf));
  } else {
    return "?";
  }
  return buf;
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

ConnectionGate::ConnectionGate(GateOptions options, Ready on_ready)
    : options_(options), on_ready_(std::move(on_ready)) {}

ConnectionGate::~ConnectionGate() { stop(); }

Status ConnectionGate::start() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return internal_error(std::string("connection gate: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  peek_.resize(std::max<size_t>(4, options_.max_head_bytes));
  thread_ = std::thread([this] { run(); });
  return ok_status();
}

void ConnectionGate::admit(int fd) {
  const std::string client = peer_address(fd);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      size_t& n = per_client_[client];
      if (options_.max_connections_per_client == 0 || n < options_.max_connections_per_client) {
        ++n;
        ++counters_.admitted;
        client_of_[fd] = client;
        add(fd, /*kept_alive=*/false);
        return;
      }
      ++counters_.refused_per_client;
      if (n == 0) per_client_.erase(client);
    }
  }
  // Over the client's cap (or stopping): a short answer, best effort, then close.
  static const std::string kRefusal = [] {
    const std::string body =
        R"({"error":{"message":"too many connections from this client address","type":"rate_limit_error",)"
        R"("param":null,"code":"too_many_connections"}})";
    return "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\n"
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  (void)::send(fd, kRefusal.data(), kRefusal.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

void ConnectionGate::park(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) {
    auto it = client_of_.find(fd);
    if (it != client_of_.end()) {
      if (--per_client_[it->second] == 0) per_client_.erase(it->second);
      client_of_.erase(it);
    }
    ::close(fd);
    return;
  }
  add(fd, /*kept_alive=*/true);
}

// mu_ held.
void ConnectionGate::add(int fd, bool kept_alive) {
  Waiting w;
  w.kept_alive = kept_alive;
  w.deadline = Clock::now() + seconds(kept_alive ? options_.keep_alive_timeout_seconds : options_.header_timeout_seconds);
  waiting_[fd] = w;
  epoll_event ev{};
  // Edge-triggered: peeking leaves the bytes in the socket, so a level-triggered set
  // would report the socket again at once; an edge comes with each new segment.
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void ConnectionGate::release(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = client_of_.find(fd);
  if (it == client_of_.end()) return;
  if (--per_client_[it->second] == 0) per_client_.erase(it->second);
  client_of_.erase(it);
}

// mu_ held.
void ConnectionGate::drop_locked(int fd) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  waiting_.erase(fd);
  auto it = client_of_.find(fd);
  if (it != client_of_.end()) {
    if (--per_client_[it->second] == 0) per_client_.erase(it->second);
    client_of_.erase(it);
  }
  ::close(fd);
}

void ConnectionGate::check(int fd, Clock::time_point now) {
  std::unique_lock<std::mutex> lock(mu_);  // held across the peek: fd cannot be closed and reused meanwhile
  auto it = waiting_.find(fd);
  if (it == waiting_.end()) return;
  const ssize_t n = ::recv(fd, peek_.data(), peek_.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    drop_locked(fd);  // the client closed (or the socket failed) before a request
    return;
  }
  if (n < 0) return;
  Waiting& w = it->second;
  if (w.kept_alive && !w.got_bytes) {
    w.got_bytes = true;  // the next request began: its head has header_timeout from now
    w.deadline = now + seconds(options_.header_timeout_seconds);
  }
  const std::string_view got(peek_.data(), static_cast<size_t>(n));
  if (got.find("\r\n\r\n") == std::string_view::npos && static_cast<size_t>(n) < peek_.size()) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  waiting_.erase(it);
  lock.unlock();
  on_ready_(fd);
}

void ConnectionGate::sweep(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> expired;
  for (const auto& [fd, w] : waiting_) {
    if (w.deadline <= now) expired.push_back(fd);
  }
  for (int fd : expired) {
    const Waiting& w = waiting_[fd];
    if (w.kept_alive && !w.got_bytes) {
      ++counters_.idle_closed;
    } else {
      ++counters_.head_timeouts;
    }
    drop_locked(fd);
  }
}

void ConnectionGate::run() {
  std::vector<epoll_event> events(256);
  Clock::time_point next_sweep = Clock::now();
  while (!stopping_) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 50);
    const Clock::time_point now = Clock::now();
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == wake_fd_) continue;
      check(fd, now);
    }
    if (now >= next_sweep) {
      sweep(now);
      next_sweep = now + std::chrono::milliseconds(50);
    }
  }
}

void ConnectionGate::stop() {
  if (epoll_fd_ < 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> fds;
  for (const auto& [fd, w] : waiting_) fds.push_back(fd);
  for (int fd : fds) drop_locked(fd);
  ::close(epoll_fd_);
  ::close(wake_fd_);
  epoll_fd_ = wake_fd_ = -1;
}

ConnectionGate::Counters ConnectionGate::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  c.waiting = waiting_.size();
  return c;
}

size_t ConnectionGate::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.size();
}

}  // namespace moe::serve
