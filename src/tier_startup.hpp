// Choosing the tier at postmaster start, and making its transport.
#pragma once

#include "ic/engine.hpp"

namespace pgrac::glue {

// Postmaster, from _PG_init: detects the hardware, decides the tier, logs the
// WARNING of a fallback, or stops the start (FATAL) when strict forbids it.
void select_tier();
// Copies the decision into shared memory (status view).
void publish_tier(pgrac::ic::IcShared* shm);
// Makes the transport of the tier that runs.
pgrac::ic::TransportFactory transport_factory();

}  // namespace pgrac::glue
