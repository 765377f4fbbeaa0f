// The global lock functions of the C API (include/pgrac_ic/pgrac_ic.h) for
// upper layers: names and modes checked, then src/capi/ges/lock_client.hpp. Like
// every PostgreSQL function they report failures with ereport; no C++
// exception leaves them (the code below them encodes under guarded()).
extern "C" {
#include "postgres.h"
}

#include "capi/ges/lock_client.hpp"
#include "capi/send_path.hpp"

using namespace pgrac::glue;
using pgrac::ic::ges::ResourceName;

extern "C" {

int pgrac_ges_lock_name(const char* resource, pgrac_ges_mode mode, int timeout_ms) {
    pgrac::glue::refuse_in_place();
    return ges_lock(ges_api_resource(resource), ges_api_mode(mode), timeout_ms) ? 1 : 0;
}

int pgrac_ges_lock_id(int64_t resource, pgrac_ges_mode mode, int timeout_ms) {
    pgrac::glue::refuse_in_place();
    return ges_lock(ResourceName::from_int(resource), ges_api_mode(mode), timeout_ms) ? 1 : 0;
}

int pgrac_ges_unlock_name(const char* resource) {
    pgrac::glue::refuse_in_place();
    return ges_unlock(ges_api_resource(resource)) ? 1 : 0;
}

int pgrac_ges_unlock_id(int64_t resource) {
    pgrac::glue::refuse_in_place();
    return ges_unlock(ResourceName::from_int(resource)) ? 1 : 0;
}

int pgrac_ges_unlock_all(void) {
    pgrac::glue::refuse_in_place();
    return ges_unlock_all();
}

uint64_t pgrac_ges_token_name(const char* resource) {
    uint64_t token = 0;
    (void)ges_held_token(ges_api_resource(resource), &token);
    return token;
}

uint64_t pgrac_ges_token_id(int64_t resource) {
    uint64_t token = 0;
    (void)ges_held_token(ResourceName::from_int(resource), &token);
    return token;
}

static_assert(PGRAC_GES_MAX_VALUE == pgrac::ic::ges::kMaxLockValue);

static int lock_value(const ResourceName& r, void* buf, int* len) {
    pgrac::ic::ges::LockValue v;
    const bool valid = ges_lock_value(r, &v);
    *len = valid ? v.len : 0;
    if (valid && v.len != 0) memcpy(buf, v.data, v.len);
    return valid ? 1 : 0;
}

int pgrac_ges_lock_value_name(const char* resource, void* buf, int* len) {
    return lock_value(ges_api_resource(resource), buf, len);
}

int pgrac_ges_lock_value_id(int64_t resource, void* buf, int* len) {
    return lock_value(ResourceName::from_int(resource), buf, len);
}

void pgrac_ges_set_lock_value_name(const char* resource, const void* value, int len) {
    ges_set_lock_value(ges_api_resource(resource), value, len);
}

void pgrac_ges_set_lock_value_id(int64_t resource, const void* value, int len) {
    ges_set_lock_value(ResourceName::from_int(resource), value, len);
}

}  // extern "C"
