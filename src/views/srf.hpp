// Small helpers for the set-returning functions behind the views.
#pragma once

extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "utils/timestamp.h"
}

#include <cstdint>

namespace pgrac::glue {

// Unix microseconds -> timestamptz Datum.
inline Datum unix_us_to_timestamptz(int64_t us) {
    const int64_t pg_epoch_shift = static_cast<int64_t>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
                                   SECS_PER_DAY * USECS_PER_SEC;
    return TimestampTzGetDatum(us - pg_epoch_shift);
}

inline Datum ns_to_us_datum(uint64_t ns) {
    return Float8GetDatum(static_cast<double>(ns) / 1000.0);
}

// Counters are unsigned 64-bit; bigint is signed. They do not reach 2^63.
inline Datum counter_datum(uint64_t v) {
    return Int64GetDatum(static_cast<int64_t>(v));
}

}  // namespace pgrac::glue
