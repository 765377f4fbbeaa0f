// ErrorLog: bounded ring of recent errors with a seqlock per entry.
//
// Ticket t (from fetch_add on next) owns slot t % kEntries and publishes it as
// seq = 2t+2; while writing, seq = 2t+1. The fields are written and read with
// relaxed atomics (byte by byte for the description) so that a reader racing
// a writer is well defined; the seq checks tell it to discard what it copied.
// Errors are rare and the view reads seldom, so the byte-wise copy is cheap.
#include "ic/base/error_log.hpp"

#include <sched.h>

#include <cstring>

#include "ic/base/atomics.hpp"

namespace pgrac::ic {

namespace {

constexpr size_t kTypes = static_cast<size_t>(ErrorType::kCount);

const char* const kTypeNames[kTypes] = {
    "malformed_frame",
    "bad_checksum",
    "oversized_message",
    "unknown_node",
    "address_mismatch",
    "wrong_key",
    "cluster_mismatch",
    "system_mismatch",
    "version_mismatch",
    "handshake_failed",
    "connect_failed",
    "peer_down",
    "peer_reset",
    "queue_full",
    "inbox_full",
    "rpc_timeout",
    "no_handler",
    "handler_error",
    "cq_overflow",
    "qp_error",
    "tier_fallback",
    "internal",
    "stale_epoch",
    "wrong_source",
    "replay_conflict",
    "fenced",
    "membership_change",
    "duplicate_node",
    "limit_mismatch",
    "frame_auth_failed",
    "unauthenticated_limit",
    "accept_paused",
    "config_mismatch",
    "config_drift",
    "busy",
    "future_epoch",
    "barrier_overdue",
};

// A writer waits this long for an older writer of the same slot (which only
// has a few hundred bytes to store) before giving up on keeping the entry.
constexpr int kClaimYields = 1000;

// Bytes of `s` to keep so that, with a NUL, they fit in kErrorDescriptionMax
// without cutting a UTF-8 sequence in two.
size_t kept_length(const char* s) {
    const size_t n = strnlen(s, kErrorDescriptionMax);
    if (n < kErrorDescriptionMax) return n;
    size_t len = kErrorDescriptionMax - 1;
    // s[len] is the first byte dropped. If it is a continuation byte (10xxxxxx),
    // the sequence began in the kept part: drop its start too. A valid
    // sequence has at most 3 continuation bytes; beyond that the input is not
    // UTF-8 and any cut is as good as another.
    for (int i = 0; i < 3 && len > 0; i++) {
        if ((static_cast<unsigned char>(s[len]) & 0xC0) != 0x80) break;
        len--;
    }
    if (len > 0 && (static_cast<unsigned char>(s[len]) & 0xC0) == 0x80) {
        len = kErrorDescriptionMax - 1;  // not UTF-8: plain byte cut
    }
    return len;
}

// Claims the slot for ticket t: waits out an older writer, or gives up if a
// newer ticket has already taken the slot (ours is then too old to keep).
bool claim(ErrorEntry* e, uint64_t ticket) {
    const uint64_t writing = 2 * ticket + 1;
    uint64_t seq = load_acquire(&e->seq);
    int waits = 0;
    for (;;) {
        if (seq >= writing) return false;
        if (seq & 1) {
            if (++waits > kClaimYields) return false;
            sched_yield();
            seq = load_acquire(&e->seq);
            continue;
        }
        if (compare_exchange(&e->seq, &seq, writing)) return true;
    }
}

}  // namespace

const char* error_type_name(ErrorType t) {
    const auto i = static_cast<size_t>(t);
    return i < kTypes ? kTypeNames[i] : "unknown";
}

const char* severity_name(Severity s) {
    switch (s) {
        case Severity::Info:
            return "INFO";
        case Severity::Warning:
            return "WARNING";
        case Severity::Error:
            return "ERROR";
    }
    return "UNKNOWN";
}

void ErrorLog::reset() {
    std::memset(static_cast<void*>(this), 0, sizeof(*this));
}

void ErrorLog::count_only(ErrorType type) {
    const auto ti = static_cast<size_t>(type);
    count(&totals[ti < kTypes ? ti : static_cast<size_t>(ErrorType::Internal)]);
}

void ErrorLog::add(ErrorType type, Severity severity, int32_t peer_node, int64_t time_us,
                   const char* description) {
    auto ti = static_cast<size_t>(type);
    if (ti >= kTypes) {
        ti = static_cast<size_t>(ErrorType::Internal);
        type = ErrorType::Internal;
    }
    // Totals first: they stay exact even if the entry itself is dropped.
    count(&totals[ti]);
    const uint64_t ticket = fetch_add(&next, uint64_t{1});
    ErrorEntry* e = &entries[ticket % kEntries];
    if (!claim(e, ticket)) return;
    // Orders the odd seq before the field stores below: a reader that sees any
    // of them and then re-reads seq sees odd (or later) and discards its copy.
    __atomic_thread_fence(__ATOMIC_RELEASE);

    store_relaxed(&e->time_us, time_us);
    store_relaxed(&e->peer_node, peer_node);
    store_relaxed(&e->type, static_cast<uint16_t>(type));
    store_relaxed(&e->severity, static_cast<uint8_t>(severity));
    if (description == nullptr) description = "";
    const size_t len = kept_length(description);
    for (size_t i = 0; i < kErrorDescriptionMax; i++) {
        // Zero-fill after the text so that no part of an older entry remains.
        store_relaxed(&e->description[i], i < len ? description[i] : '\0');
    }
    // Release: a reader that acquires the even seq sees every field above.
    store_release(&e->seq, 2 * ticket + 2);
}

size_t ErrorLog::snapshot(ErrorEntry* out, size_t max) const {
    const uint64_t n = load_acquire(&next);
    const uint64_t oldest = n > kEntries ? n - kEntries : 0;
    size_t got = 0;
    for (uint64_t t = n; t > oldest && got < max; t--) {
        const uint64_t ticket = t - 1;
        const ErrorEntry* e = &entries[ticket % kEntries];
        const uint64_t seq = load_acquire(&e->seq);
        // Not yet written, being written, dropped or already overwritten.
        if (seq != 2 * ticket + 2) continue;
        ErrorEntry& o = out[got];
        o.seq = seq;
        o.time_us = load_relaxed(&e->time_us);
        o.peer_node = load_relaxed(&e->peer_node);
        o.type = load_relaxed(&e->type);
        o.severity = load_relaxed(&e->severity);
        o.pad = 0;
        for (size_t i = 0; i < kErrorDescriptionMax; i++) {
            o.description[i] = load_relaxed(&e->description[i]);
        }
        o.description[kErrorDescriptionMax - 1] = '\0';
        // Orders the copies above before the re-read of seq (pairs with the
        // writer's release fence after it made seq odd).
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (load_relaxed(&e->seq) != seq) continue;  // overwritten while copying
        got++;
    }
    return got;
}

uint64_t ErrorLog::total(ErrorType t) const {
    const auto i = static_cast<size_t>(t);
    return i < kTypes ? load_relaxed(&totals[i]) : 0;
}

}  // namespace pgrac::ic
