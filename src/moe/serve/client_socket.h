// Finding and probing the socket of the connection a request came on, for a handler
// that waits before answering (a non-streamed generation decides its status at the
// end) yet must notice a client that went away. Debian 12's cpp-httplib (0.11.4) gives
// a handler no socket and no "connection closed" check, so the socket is found by its
// address pair among this process's descriptors. Linux only. Thread-safe.
#pragma once

#include <string>

namespace moe::serve {

// The descriptor of this process's TCP socket connected to remote_addr:remote_port
// from local port `local_port`; -1 when none is found (the caller then cannot probe).
int find_client_socket(const std::string& remote_addr, int remote_port, int local_port);

// False once the peer of socket `fd` has closed or reset the connection (poll() says
// hang-up, read-hang-up or error). Never blocks.
bool client_connected(int fd);

}  // namespace moe::serve
