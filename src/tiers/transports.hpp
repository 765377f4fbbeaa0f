// The transports the tiers build (src/tiers/README.md): the stub and TCP
// factories here, the verbs one in tiers/verbs/transport.hpp. Each implements
// the core's interface, ic/transport/transport.hpp.
#pragma once

#include <memory>

#include "ic/transport/transport.hpp"

namespace pgrac::tiers {

// The core's interface, under the names the tiers' code uses.
using ic::ConnId;
using ic::Transport;
using ic::TransportCounters;
using ic::TransportHandler;

// stub: no network at all; listen() succeeds, connect() always fails.
std::unique_ptr<Transport> make_stub_transport(TransportHandler& handler);

struct TcpOptions {
    uint32_t max_payload = ic::kMaxFramePayload;
    // The limit every new connection (accepted or dialed) starts with until
    // set_max_payload() changes it; capped at max_payload, so by default the
    // same. Small for unauthenticated peers: it also bounds their buffers.
    uint32_t initial_max_payload = ic::kMaxFramePayload;
    int sndbuf = 0, rcvbuf = 0;  // 0 = kernel default
    int connect_timeout_ms = 5000;
};
// tier3: nonblocking TCP sockets on epoll, TCP_NODELAY, vectored writes.
std::unique_ptr<Transport> make_tcp_transport(TransportHandler& handler, const TcpOptions& opts);

}  // namespace pgrac::tiers
