// Global lock resource names and modes as the C API and the SQL functions
// give them: checked (an ERROR says what is wrong), and named in messages.
#pragma once

#include <cstddef>

#include "ic/ges/mode.hpp"
#include "ic/ges/resource.hpp"
#include "pgrac_ic/pgrac_ic.h"

namespace pgrac::glue {

// The text resource of `len` bytes at p: 1 to kMaxResourceText bytes, no NUL.
pgrac::ic::ges::ResourceName ges_text_resource(const char* p, int len);
// The C API's NUL-terminated resource name (not NULL).
pgrac::ic::ges::ResourceName ges_api_resource(const char* resource);
// The C API's mode (one of pgrac_ges_mode).
pgrac::ic::ges::LockMode ges_api_mode(pgrac_ges_mode mode);
// "name", or "#id" for a bigint resource, for messages.
void ges_resource_text(const pgrac::ic::ges::ResourceName& r, char* out, size_t cap);

}  // namespace pgrac::glue
