// clang-format off
#error "src/ic and src/tiers are PostgreSQL-independent: fmgr.h may only be included by glue code in src/, src/lms, src/views"
