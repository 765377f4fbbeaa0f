#include "ic/transport/socket.hpp"

#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

namespace pgrac::ic {

namespace {

uint16_t port_of(const SocketAddress& a) {
    if (a.addr.ss_family == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6*>(&a.addr)->sin6_port);
    return ntohs(reinterpret_cast<const sockaddr_in*>(&a.addr)->sin_port);
}

}  // namespace

bool resolve_tcp(const std::string& host, uint16_t port, bool passive,
                 std::vector<SocketAddress>* out, std::string* error) {
    const bool any = passive && (host.empty() || host == "*");
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    const std::string service = std::to_string(port);
    addrinfo* list = nullptr;
    const int rc = getaddrinfo(any ? nullptr : host.c_str(), service.c_str(), &hints, &list);
    if (rc != 0) {
        *error = "cannot resolve \"" + host + "\": " + gai_strerror(rc);
        return false;
    }
    out->clear();
    for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
        SocketAddress a;
        std::memcpy(&a.addr, ai->ai_addr, ai->ai_addrlen);
        a.len = ai->ai_addrlen;
        out->push_back(a);
    }
    freeaddrinfo(list);
    if (out->empty()) {
        *error = "cannot resolve \"" + host + "\": no TCP address";
        return false;
    }
    return true;
}

void tune_tcp_socket(int fd, int sndbuf, int rcvbuf) {
    // Best effort: none of these can fail on a valid TCP socket, and a socket
    // without them still works, only slower.
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sndbuf > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
}

int open_tcp_socket(int family, int sndbuf, int rcvbuf) {
    const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
    if (fd >= 0) tune_tcp_socket(fd, sndbuf, rcvbuf);
    return fd;
}

int open_tcp_listener(const SocketAddress& a, int sndbuf, int rcvbuf, std::string* error) {
    const auto* sa = reinterpret_cast<const sockaddr*>(&a.addr);
    const int fd = open_tcp_socket(sa->sa_family, sndbuf, rcvbuf);
    const char* step = "socket";
    if (fd >= 0) {
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (sa->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        if (bind(fd, sa, a.len) != 0) {
            step = "bind";
        } else if (listen(fd, SOMAXCONN) != 0) {
            step = "listen";
        } else {
            return fd;
        }
    }
    const int err = errno;
    if (fd >= 0) close(fd);
    *error = sys_error(std::string(step) + " " + endpoint_text(numeric_host(sa, a.len), port_of(a)),
                       err);
    return -1;
}

std::string numeric_host(const sockaddr* sa, socklen_t len) {
    char host[NI_MAXHOST];
    if (getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
    return host;
}

std::string endpoint_text(const std::string& host, uint16_t port) {
    const bool v6_literal = host.find(':') != std::string::npos;
    return (v6_literal ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string sys_error(const std::string& what, int err) {
    char buf[256];
    // GNU strerror_r: returns the message, which may or may not be in buf.
    return what + ": " + strerror_r(err, buf, sizeof buf);
}

}  // namespace pgrac::ic
