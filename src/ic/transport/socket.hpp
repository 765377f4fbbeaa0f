// Socket helpers the core (requester lanes, address checks) and the tiers
// share: address resolution, socket options, and the texts their errors are
// reported with.
#pragma once

#include <cstdint>
#include <string>
#include <sys/socket.h>
#include <vector>

namespace pgrac::ic {

struct SocketAddress {
    sockaddr_storage addr{};
    socklen_t len = 0;
};

// Resolves host (numeric IPv4/IPv6 or a name) and port to TCP addresses, in
// getaddrinfo's order. passive: addresses to bind, where "" or "*" means any.
bool resolve_tcp(const std::string& host, uint16_t port, bool passive,
                 std::vector<SocketAddress>* out, std::string* error);

// A nonblocking, close-on-exec TCP socket with TCP_NODELAY and the given
// buffer sizes (0 = kernel default); -1 with errno set on failure.
int open_tcp_socket(int family, int sndbuf, int rcvbuf);

// A listening socket bound to a (SO_REUSEADDR; IPv6 ones v6-only, so that
// 0.0.0.0 and :: can be bound side by side); -1 with *error set on failure.
int open_tcp_listener(const SocketAddress& a, int sndbuf, int rcvbuf, std::string* error);

// TCP_NODELAY and buffer sizes for an accepted socket.
void tune_tcp_socket(int fd, int sndbuf, int rcvbuf);

// Numeric address of sa, e.g. "127.0.0.1" or "::1".
std::string numeric_host(const sockaddr* sa, socklen_t len);

// "host:port", with IPv6 literals in brackets.
std::string endpoint_text(const std::string& host, uint16_t port);

// "what: strerror(err)".
std::string sys_error(const std::string& what, int err);

}  // namespace pgrac::ic
