// Where C++ meets PostgreSQL. Two rules:
//  1. No C++ exception crosses into a PostgreSQL frame: every call into C++
//     that may throw goes through guarded(), which catches everything and
//     keeps the message, and the caller reports it with ereport() after the
//     try has ended.
//  2. No ereport(ERROR) longjmps over a live C++ destructor: functions that may
//     raise a PostgreSQL error (including CHECK_FOR_INTERRUPTS) hold no C++
//     objects with destructors in their frames.
#pragma once

#include <cstddef>
#include <cstdio>
#include <exception>
#include <new>

namespace pgrac::glue {

// Runs f(); on an exception returns false with its message in errbuf.
template <typename F>
bool guarded(F&& f, char* errbuf, size_t errlen) noexcept {
    try {
        f();
        return true;
    } catch (const std::bad_alloc&) {
        std::snprintf(errbuf, errlen, "out of memory");
    } catch (const std::exception& e) {
        std::snprintf(errbuf, errlen, "%s", e.what());
    } catch (...) {
        std::snprintf(errbuf, errlen, "unknown C++ exception");
    }
    return false;
}

}  // namespace pgrac::glue
