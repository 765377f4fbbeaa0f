// Choosing the tier at postmaster start, and making its transport.
#pragma once

#include "ic/engine/engine.hpp"
#include "tiers/tier.hpp"
#include "tiers/transports.hpp"

namespace pgrac::glue {

// Postmaster, from _PG_init: detects the hardware, decides the tier, logs the
// WARNING of a fallback, or stops the start (FATAL) when strict forbids it.
void select_tier();
// Copies the decision into shared memory (status view).
void publish_tier(pgrac::ic::IcShared* shm);
// Makes the transport of the tier that runs: stub, TCP, or for tier1/tier2
// the verbs transport (verbs_glue.hpp: falls back to TCP unless strict).
pgrac::ic::TransportFactory transport_factory();
// TCP options of this build: frames up to one message (header, body, tag),
// and handshake-sized frames until a connection is authenticated.
pgrac::tiers::TcpOptions tcp_options();

// The decision made at postmaster start (inherited by every child).
pgrac::tiers::Tier decided_tier();
const char* decided_reason();
const char* decided_device();  // tier1/tier2: the RDMA device to use, else ""
int decided_port();

}  // namespace pgrac::glue
