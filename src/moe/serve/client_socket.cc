#include "moe/serve/client_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace moe::serve {
namespace {

// The numeric address and port of a socket address (IPv4 or IPv6).
bool address_of(const sockaddr_storage& ss, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    sockaddr_in a;
    std::memcpy(&a, &ss, sizeof(a));
    if (::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf)) == nullptr) return false;
    *port = ntohs(a.sin_port);
  } else if (ss.ss_family == AF_INET6) {
    sockaddr_in6 a;
    std::memcpy(&a, &ss, sizeof(a));
    if (::inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof(buf)) == nullptr) return false;
    *port = ntohs(a.sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

}  // namespace

int find_client_socket(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof(peer), sl = sizeof(self);
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    std::string paddr, saddr;
    int pport = -1, sport = -1;
    if (!address_of(peer, &paddr, &pport) || !address_of(self, &saddr, &sport)) continue;
    if (pport == remote_port && sport == local_port && paddr == remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

bool client_connected(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) < 0) return true;  // EINTR and the like: assume still there
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
}

}  // namespace moe::serve
