# PGXS build of the pg_claim extension.
#   make && make install          build and install (as root)
#   make installcheck             pg_regress + isolation against a temp instance
# The full test suite (all layers) is test/run-tests.sh; see README.md.

EXTENSION    = pg_claim
MODULE_big   = pg_claim
PG_CONFIG   ?= pg_config

# Layers: src/core is pure C++ (never includes postgres.h), src/pg is the only
# place that talks to server internals, src/api has one file per SQL surface,
# src/worker holds the background worker and its shared memory.
SRCS = $(sort $(wildcard src/core/*.cpp src/pg/*.cpp src/api/*.cpp src/worker/*.cpp))
OBJS = $(SRCS:.cpp=.o)

# The install script is assembled from its parts so that each SQL surface has
# its own file; the generated script is what gets installed.
INSTALL_PARTS = $(sort $(wildcard sql/install/*.sql))
DATA_built   = sql/pg_claim--0.1.0.sql

REGRESS      = $(sort $(patsubst sql/%.sql,%,$(filter-out sql/pg_claim--%,$(wildcard sql/*.sql))))
REGRESS_OPTS = --temp-instance=tmp_check --temp-config=test/regress.conf

ISOLATION      = $(sort $(patsubst test/isolation/specs/%.spec,%,$(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --temp-instance=tmp_check_iso --temp-config=test/regress.conf \
                 --inputdir=test/isolation --outputdir=output_iso

PG_CPPFLAGS  = -Isrc
PG_CXXFLAGS  = -std=c++17 -Wno-register -fno-omit-frame-pointer
SHLIB_LINK   = -lstdc++

# No LLVM bitcode for the C++ sources: the JIT gains nothing from it here.
override with_llvm = no

EXTRA_CLEAN  = sql/pg_claim--0.1.0.sql output_iso tmp_check tmp_check_iso results regression.diffs regression.out

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

sql/pg_claim--0.1.0.sql: $(INSTALL_PARTS)
	cat $^ > $@

# Every object depends on the headers of its layer and below.
$(OBJS): $(wildcard src/core/*.hpp src/pg/*.hpp src/api/*.hpp src/worker/*.hpp)
