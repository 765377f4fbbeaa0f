// One TCP connection of the TCP tier, as its transport keeps it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "ic/wire/frame.hpp"
#include "tiers/tcp/send_queue.hpp"
#include "ic/transport/socket.hpp"
#include "tiers/transports.hpp"

namespace pgrac::tiers {

enum class TcpConnState { Connecting, Open, Closed };

// Why a connection ended. Kept as codes, not text, so that closing never
// allocates; the text is built when the end is reported.
enum class TcpCloseCause {
    Local,        // close() by the owner
    PeerClosed,   // orderly shutdown by the peer (frame_error Truncated if mid-frame)
    ReadFailed,   // errno in err
    WriteFailed,  // errno in err
    BadFrame,     // frame_error
    OutOfMemory,
    Internal,        // an unexpected exception, e.g. from a handler callback
    ConnectFailed,   // errno in err; reported through on_connected(false)
    ConnectTimeout,  // reported through on_connected(false)
};

struct TcpConnection {
    TcpConnection(ConnId id_, uint32_t max_payload_)
        : id(id_), max_payload(max_payload_), decoder(max_payload_) {}

    ConnId id;
    uint32_t max_payload;  // the decoder's limit; small ones read in small chunks
    int fd = -1;
    TcpConnState state = TcpConnState::Connecting;
    bool epollout = false;  // EPOLLOUT is in the epoll interest set
    bool held = false;      // its last write carried MSG_MORE: push_more() sends it
    ic::FrameStreamDecoder decoder;
    TcpSendQueue out;

    // Outbound connections while Connecting: the addresses still to try.
    std::string target;  // "host:port", for messages
    std::vector<ic::SocketAddress> addrs;
    size_t next_addr = 0;
    std::chrono::steady_clock::time_point deadline;

    // Set once Closed; the end is reported (and the entry erased) by poll().
    bool report_pending = false;
    TcpCloseCause cause = TcpCloseCause::Local;
    int err = 0;
    ic::FrameError frame_error = ic::FrameError::None;
};

}  // namespace pgrac::tiers
