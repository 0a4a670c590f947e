// client_socket.h: the socket of a connection is found by its address pair among the
// process's descriptors, and a peer that closed is seen as gone (without blocking).
#include "moe/serve/client_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace moe::serve {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (peer) {
    ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
  } else {
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  }
  return ntohs(a.sin_port);
}

TEST(ClientSocket, FindsTheAcceptedSocketAndSeesTheClientLeave) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  const int server_port = port_of(listener, false);
  addr.sin_port = htons(static_cast<uint16_t>(server_port));
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int accepted = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  const int client_port = port_of(client, false);

  // The server side: peer = the client's address, local port = the listener's. (The
  // client's own socket has the reverse pair and is not matched.)
  EXPECT_EQ(find_client_socket("127.0.0.1", client_port, server_port), accepted);
  EXPECT_EQ(find_client_socket("127.0.0.1", server_port, client_port), client);
  EXPECT_EQ(find_client_socket("127.0.0.1", client_port, server_port + 1), -1);
  EXPECT_EQ(find_client_socket("10.0.0.1", client_port, server_port), -1);

  EXPECT_TRUE(client_connected(accepted));
  // Unread data from the client does not count as leaving.
  ASSERT_EQ(::send(client, "x", 1, MSG_NOSIGNAL), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(client_connected(accepted));
  ::close(client);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = !client_connected(accepted);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(gone);
  ::close(accepted);
  ::close(listener);
}

}  // namespace
}  // namespace moe::serve
