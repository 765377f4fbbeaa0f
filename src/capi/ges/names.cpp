extern "C" {
#include "postgres.h"
}

#include <cstdio>
#include <cstring>

#include "capi/ges/names.hpp"

using namespace pgrac::ic::ges;

namespace pgrac::glue {

ResourceName ges_text_resource(const char* p, int len) {
    ResourceName r;
    if (len < 1 || len > static_cast<int>(kMaxResourceText) || memchr(p, 0, len) != nullptr)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("global lock resource names are 1 to %d bytes",
                               static_cast<int>(kMaxResourceText))));
    r.kind = ResourceKind::Text;
    r.len = static_cast<uint8_t>(len);
    memset(r.data, 0, sizeof r.data);
    memcpy(r.data, p, len);
    return r;
}

ResourceName ges_api_resource(const char* resource) {
    if (resource == nullptr)
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("global lock resource name must not be NULL")));
    return ges_text_resource(resource, static_cast<int>(strnlen(resource, 4096)));
}

LockMode ges_api_mode(pgrac_ges_mode mode) {
    if (static_cast<int>(mode) < 0 || static_cast<int>(mode) >= kLockModeCount)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("invalid global lock mode %d", static_cast<int>(mode))));
    return static_cast<LockMode>(mode);
}

void ges_resource_text(const ResourceName& r, char* out, size_t cap) {
    if (r.is_text())
        snprintf(out, cap, "%.*s", static_cast<int>(r.len), reinterpret_cast<const char*>(r.data));
    else
        snprintf(out, cap, "#%lld", static_cast<long long>(r.int_value()));
}

}  // namespace pgrac::glue
