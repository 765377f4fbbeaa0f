// GES wire encoding uses std::vector: it happens in encode_msg() under
// guarded(), and the functions that may raise hold only trivially
// destructible locals.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
}

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "capi/ges/send.hpp"
#include "instance/guc.hpp"
#include "ic/wire/message_types.hpp"
#include "instance/pg_boundary.hpp"
#include "instance/shmem.hpp"

using namespace pgrac::ic::ges;

namespace pgrac::glue {

namespace {

constexpr int kEncodeMax = 256;

Owner my_owner() {
    return Owner{static_cast<uint16_t>(pgrac_node_id), static_cast<uint32_t>(MyProcPid)};
}

// Encodes one GES message into out (kEncodeMax bytes); returns its length,
// 0 on failure (message in err).
size_t encode_msg(GesMsgType type, const ResourceName* r, LockMode mode, uint64_t request_id,
                  uint8_t flags, uint32_t timeout_ms, DenyReason reason, uint8_t* out, char* err,
                  size_t errlen) {
    size_t n = 0;
    const bool ok = guarded(
        [&] {
            GesMessage m;
            m.type = type;
            m.owner = my_owner();
            if (r) m.resource = *r;
            m.mode = mode;
            m.request_id = request_id;
            m.flags = flags;
            m.timeout_ms = timeout_ms;
            m.reason = reason;
            std::vector<uint8_t> body;
            const GesWireError e = encode_ges_message(m, &body);
            if (e != GesWireError::None || body.size() > kEncodeMax)
                throw std::runtime_error(std::string("cannot encode GES message: ") +
                                         ges_wire_error_name(e));
            std::memcpy(out, body.data(), body.size());
            n = body.size();
        },
        err, errlen);
    return ok ? n : 0;
}

}  // namespace

uint32_t ges_shard_of(const ResourceName& r) {
    pgrac::ic::IcShared* shm = shared();
    return shm && shm->n_lms ? worker_for(r, shm->n_lms) : 0;
}

int ges_send_client(GesMsgType type, const ResourceName* r, uint32_t route_key, LockMode mode,
                    uint64_t request_id, uint8_t flags, uint32_t timeout_ms, DenyReason reason,
                    int wait_ms) {
    uint8_t body[kEncodeMax];
    char err[256];
    const size_t n =
        encode_msg(type, r, mode, request_id, flags, timeout_ms, reason, body, err, sizeof err);
    if (n == 0) ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("pgrac_ic: %s", err)));
    return pgrac_ic_send(pgrac_node_id, ic::kMsgGesClient, route_key, body,
                         static_cast<uint32_t>(n), PGRAC_IC_CONTROL, wait_ms);
}

int ges_send_release_all(int wait_ms) {
    int first = PGRAC_IC_OK;
    pgrac::ic::IcShared* shm = shared();
    for (uint32_t w = 0; shm && w < shm->n_lms; w++) {
        const int rc = ges_send_client(GesMsgType::ReleaseAll, nullptr, w, LockMode::NL, 0, 0, 0,
                                       DenyReason::Cancelled, wait_ms);
        if (rc != PGRAC_IC_OK && first == PGRAC_IC_OK) first = rc;
    }
    return first;
}

}  // namespace pgrac::glue
