# pgrac_ic: PGXS build of the extension. The PostgreSQL-independent core
# (src/ic, src/tiers) and pgrac_ctl are built by CMake into build/; this
# Makefile links the core into pgrac_ic.so and installs everything.
EXTENSION = pgrac_ic
MODULE_big = pgrac_ic
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" pgrac_ic.control)

GLUE_DIRS = src src/instance src/listener src/lms src/capi src/capi/ges src/views
GLUE_SRCS = $(foreach d,$(GLUE_DIRS),$(wildcard $(d)/*.cpp))
OBJS = $(GLUE_SRCS:.cpp=.o)
DATA = $(wildcard sql/pgrac_ic--*.sql)

# pg_regress: every sql/*.sql that is not an install script, run against a
# temporary instance that preloads pgrac_ic (stub tier). TAP: t/*.pl.
REGRESS = $(sort $(patsubst sql/%.sql,%,$(filter-out sql/pgrac_ic--%,$(wildcard sql/*.sql))))
REGRESS_OPTS = --temp-config=$(CURDIR)/test/regress.conf --temp-instance=$(CURDIR)/tmp_check_regress
TAP_TESTS = 1
HEADERS_pgrac_ic = include/pgrac_ic/pgrac_ic.h

BUILD_DIR = build
CORE_LIB = $(BUILD_DIR)/libpgrac_core.a
CTL_BIN = $(BUILD_DIR)/bin/pgrac_ctl
SCRIPTS_built = $(CTL_BIN)
EXTRA_CLEAN = $(BUILD_DIR) tmp_check tmp_check_regress

# PostgreSQL's headers are system headers to us: our own code must be clean at
# -Wall -Wextra, theirs is not our business.
PG_CPPFLAGS = -isystem $(shell $(PG_CONFIG) --includedir-server) -Iinclude -Isrc
SHLIB_LINK = $(CORE_LIB) -lisal -lcrypto -lrdmacm -libverbs -lnuma -lstdc++ -lpthread

# No LLVM bitcode for C++ sources.
override with_llvm = no

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

override CXXFLAGS += -std=c++17 -Wall -Wextra -Werror -Wno-register -fno-omit-frame-pointer

CMAKE_BUILD_TYPE ?= RelWithDebInfo
# More CMake options, e.g. the Debian package's -DPGRAC_BUILD_TESTS=OFF
# -DPGRAC_BUILD_BENCH=OFF (debian/rules): it needs neither GoogleTest nor
# Google Benchmark to build.
PGRAC_CMAKE_FLAGS ?=
$(OBJS): $(foreach d,$(GLUE_DIRS) src/ic/* src/tiers src/tiers/*,$(wildcard $(d)/*.hpp)) include/pgrac_ic/pgrac_ic.h
$(shlib): $(CORE_LIB)
$(CORE_LIB) $(CTL_BIN): core
.PHONY: core
core:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(CMAKE_BUILD_TYPE) $(PGRAC_CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD_DIR) -j$(shell nproc) --target pgrac_core pgrac_ctl
all: $(CTL_BIN)

# RDMA TAP tests (t/030_rdma.pl) in the soft-RoCE VM, against the installed
# extension: make install first; needs root (the VM: tests/vm/run-in-vm.sh).
.PHONY: check-rdma
check-rdma:
	bash tests/rxe/tap_in_vm.sh

# The example upper layer (examples/pgrac_example/README.md): a separate PGXS
# extension built against the installed pgrac_ic header, so after make install.
# install-example is what t/027_example_upper_layer.pl needs; its stub-tier
# pg_regress runs with installcheck-example (as the postgres user).
.PHONY: example install-example installcheck-example clean-example
example:
	$(MAKE) -C examples/pgrac_example PG_CONFIG=$(PG_CONFIG)
install-example: example
	$(MAKE) -C examples/pgrac_example install PG_CONFIG=$(PG_CONFIG)
installcheck-example:
	$(MAKE) -C examples/pgrac_example installcheck PG_CONFIG=$(PG_CONFIG)
clean-example:
	$(MAKE) -C examples/pgrac_example clean PG_CONFIG=$(PG_CONFIG)
clean: clean-example
