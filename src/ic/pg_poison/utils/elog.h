// clang-format off
#error "src/ic and src/tiers are PostgreSQL-independent: utils/elog.h may only be included by the glue (src/module.cpp, src/instance, src/capi, src/lms, src/listener, src/views)"
