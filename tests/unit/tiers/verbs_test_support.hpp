// What the tests of the verbs tier over a real device share
// (verbs_transport_test.cpp, verbs_landing_attack_test.cpp): the address and
// ports they use, a numbered Message frame, small transport options, and why
// they cannot run here.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ic/wire/frame.hpp"
#include "tiers/detect/rdma_live.hpp"
#include "tiers/transport_test_support.hpp"
#include "tiers/verbs/transport.hpp"

namespace pgrac::tiers::verbstest {

// The device's IP address: RXEVM_IPADDR in the soft-RoCE VM, PGRAC_VERBS_ADDR
// overrides, else 127.0.0.1.
inline std::string test_addr() {
    for (const char* v : {"PGRAC_VERBS_ADDR", "RXEVM_IPADDR"})
        if (const char* s = std::getenv(v); s != nullptr && *s != '\0') return s;
    return "127.0.0.1";
}

inline uint16_t test_port() {
    static std::mt19937 rng(
        static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
    return static_cast<uint16_t>(20000 + rng() % 20000);
}

// A Message frame numbered seq whose payload is payload_len bytes (>= 24).
inline std::vector<uint8_t> message(uint32_t seq, size_t payload_len) {
    ic::MessageHeader m;
    m.msg_type = 300;
    m.rpc_id = seq;
    std::vector<uint8_t> payload(std::max(payload_len, ic::kMessageHeaderSize));
    ic::encode_message_header(m, payload.data());
    for (size_t i = ic::kMessageHeaderSize; i < payload.size(); ++i)
        payload[i] = static_cast<uint8_t>(seq * 31 + i);
    ic::FrameHeader h;
    h.type = ic::FrameType::Message;
    h.seq = seq;
    h.src_node = 7;
    return transporttest::make_frame(h, payload);
}

inline VerbsOptions small_options() {
    VerbsOptions o;
    o.max_payload = 16 * 1024;
    o.send_slots = 64;
    o.recv_slots = 128;
    o.qp_send_depth = 32;
    o.cq_depth = 1024;
    o.connect_timeout_ms = 20000;
    return o;
}

// A dialer that offers two landing slots; a side that writes frames of 1 KiB
// and more into them.
inline VerbsOptions landing_options() {
    VerbsOptions o = small_options();
    o.landing_slots = 2;
    return o;
}

inline VerbsOptions writer_options() {
    VerbsOptions o = small_options();
    o.write_min = 1024;
    return o;
}

// Why the tests cannot run here, or empty.
inline std::string skip_reason() {
    std::string error;
    if (verbs_device_names(&error).empty())
        return "no RDMA device (libibverbs lists none" + (error.empty() ? "" : ": " + error) +
               "); run tests/rxe/verbs_transport_in_vm.sh for the soft-RoCE VM";
    return "";
}

}  // namespace pgrac::tiers::verbstest
