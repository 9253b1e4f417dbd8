# PGXS build of the pg_claim extension.
#   make && make install          build and install (as root)
#   make installcheck             pg_regress + isolation against a temp instance
#   make prove_installcheck       the TAP tests (test/t) against the installed extension
# The full test suite (all layers) is test/run-tests.sh; see README.md.

EXTENSION    = pg_claim
MODULE_big   = pg_claim
PG_CONFIG   ?= pg_config

# Layers, each including only the ones before it (docs/development.md, "Layout"):
# src/core, src/pg, src/shmem, src/api, src/worker, then src/module.cpp.
LAYERS = core pg shmem api worker
SRCS = $(sort $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.cpp))) src/module.cpp
OBJS = $(SRCS:.cpp=.o)

# Install and upgrade scripts. A released script is never edited: 0.1.0 is
# installed as released, and everything since is in the upgrade script. The
# 0.2.0 install script is built from a guard (sql/install-guard.sql: refuse a
# schema "claim" that another role controls), the 0.1.0 script and the
# upgrade, so a fresh install and an updated one are the same; TAP test
# 007_upgrade compares their catalogs.
DATA         = sql/pg_claim--0.1.0.sql sql/pg_claim--0.1.0--0.2.0.sql sql/pg_claim--0.2.0--0.3.0.sql \
               sql/pg_claim--0.3.0--0.4.0.sql
DATA_built   = sql/pg_claim--0.2.0.sql sql/pg_claim--0.3.0.sql sql/pg_claim--0.4.0.sql

# Regression inputs test/sql/*.sql, expected outputs expected/*.out (top
# level). pg_regress looks for expected/NAME.out in its output directory
# first and in its input directory second, so with --outputdir=. it reads
# ./expected while the inputs come from --inputdir=test (test/sql). Results
# land in ./results.
REGRESS      = $(sort $(patsubst test/sql/%.sql,%,$(wildcard test/sql/*.sql)))
REGRESS_OPTS = --temp-instance=tmp_check --temp-config=test/regress.conf \
               --inputdir=test --outputdir=. \
               --encoding=UTF8 --no-locale

ISOLATION      = $(sort $(patsubst test/isolation/specs/%.spec,%,$(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --temp-instance=tmp_check_iso --temp-config=test/regress.conf \
                 --encoding=UTF8 --no-locale \
                 --inputdir=test/isolation --outputdir=output_iso

PG_CPPFLAGS  = -Isrc
PG_CXXFLAGS  = -std=c++17 -Wno-register -fno-omit-frame-pointer
SHLIB_LINK   = -lstdc++

# No LLVM bitcode for the C++ sources: the JIT gains nothing from it here.
override with_llvm = no

# TAP tests under test/t: make prove_installcheck, against the installed
# extension (not part of installcheck, which runs pg_regress and the
# isolation tester only).
PROVE_TESTS  = test/t/*.pl

EXTRA_CLEAN  = $(OBJS:.o=.d) sql/pg_claim--0.2.0.sql sql/pg_claim--0.3.0.sql sql/pg_claim--0.4.0.sql output_iso tmp_check tmp_check_iso results regression.diffs regression.out

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: prove_installcheck
prove_installcheck:
	$(prove_installcheck)

# What an install script leaves out of the scripts it is built from: their
# "\echo Use ..." lines, the two comments of the released 0.1.0 script that
# cite the folder of sources it was once assembled from (gone), and the
# update scripts' schema guard (the DO block $pg_claim_update_guard$ and its
# comment), which sql/install-guard.sql, at the head of the install script,
# covers with a stricter check.
INSTALL_SED = -e '/^\\echo Use /d' \
              -e '/^-- Refuse to update into a schema "claim"/,/^-- replaced by them\.$$/d' \
              -e '/^DO \$$pg_claim_update_guard\$$$$/,/^\$$pg_claim_update_guard\$$;$$/d' \
              -e '/^-- Part of the install script; sql\/pg_claim--0\.1\.0\.sql is assembled from$$/,/^-- sql\/install\/\*\.sql in file-name order by the Makefile\.$$/d' \
              -e '/^-- Part of the install script (assembled from sql\/install\/\*\.sql in name order)\.$$/d'

sql/pg_claim--0.2.0.sql: sql/install-guard.sql sql/pg_claim--0.1.0.sql sql/pg_claim--0.1.0--0.2.0.sql Makefile
	{ echo '-- pg_claim 0.2.0, built by make from sql/install-guard.sql, sql/pg_claim--0.1.0.sql'; \
	  echo '-- and sql/pg_claim--0.1.0--0.2.0.sql (edit those, not this file).'; \
	  printf '%s\n' '\echo Use "CREATE EXTENSION pg_claim" to load this file. \quit'; \
	  cat sql/install-guard.sql; \
	  sed $(INSTALL_SED) sql/pg_claim--0.1.0.sql sql/pg_claim--0.1.0--0.2.0.sql; } > $@

sql/pg_claim--0.3.0.sql: sql/install-guard.sql sql/pg_claim--0.1.0.sql sql/pg_claim--0.1.0--0.2.0.sql sql/pg_claim--0.2.0--0.3.0.sql Makefile
	{ echo '-- pg_claim 0.3.0, built by make from sql/install-guard.sql, sql/pg_claim--0.1.0.sql,'; \
	  echo '-- sql/pg_claim--0.1.0--0.2.0.sql and sql/pg_claim--0.2.0--0.3.0.sql (edit those, not this file).'; \
	  printf '%s\n' '\echo Use "CREATE EXTENSION pg_claim" to load this file. \quit'; \
	  cat sql/install-guard.sql; \
	  sed $(INSTALL_SED) sql/pg_claim--0.1.0.sql sql/pg_claim--0.1.0--0.2.0.sql sql/pg_claim--0.2.0--0.3.0.sql; } > $@

sql/pg_claim--0.4.0.sql: sql/install-guard.sql sql/pg_claim--0.1.0.sql sql/pg_claim--0.1.0--0.2.0.sql sql/pg_claim--0.2.0--0.3.0.sql sql/pg_claim--0.3.0--0.4.0.sql Makefile
	{ echo '-- pg_claim 0.4.0, built by make from sql/install-guard.sql, sql/pg_claim--0.1.0.sql,'; \
	  echo '-- sql/pg_claim--0.1.0--0.2.0.sql, sql/pg_claim--0.2.0--0.3.0.sql and sql/pg_claim--0.3.0--0.4.0.sql'; \
	  echo '-- (edit those, not this file).'; \
	  printf '%s\n' '\echo Use "CREATE EXTENSION pg_claim" to load this file. \quit'; \
	  cat sql/install-guard.sql; \
	  sed $(INSTALL_SED) sql/pg_claim--0.1.0.sql sql/pg_claim--0.1.0--0.2.0.sql sql/pg_claim--0.2.0--0.3.0.sql sql/pg_claim--0.3.0--0.4.0.sql; } > $@

# Dependencies per object: each compile writes the headers it read into a
# .d file next to its object (src/core/fair.d, src/shmem/fair.d and
# src/api/fair.d: three layers have a fair.cpp, so the file is named by its
# path, not by its stem as PGXS's own autodepend would, in .deps/fair.Po).
# -MP adds an empty rule per header, so a deleted header does not stop the
# build. A header edit rebuilds the objects that include it, and no others.
# This rule replaces the default (and PGXS's autodepend) one for C++.
%.o: %.cpp
	$(CXX) $(CXXFLAGS) $(CPPFLAGS) -MMD -MP -MF $*.d -c -o $@ $<

-include $(OBJS:.o=.d)

# The layer rule (docs/development.md, "Layout"): only src/pg touches heap and index
# scans, heavyweight locks, snapshots and transactions directly. The build
# stops when src/shmem, src/api, src/worker or src/module.cpp calls one of
# these functions (as src/core never compiles with postgres.h, CMakeLists.txt).
PG_ONLY_CALLS = heap_beginscan|heap_getnext|table_beginscan[a-z_]*|table_open|relation_open|index_open|index_beginscan|systable_beginscan|LockDatabaseObject|UnlockDatabaseObject|LockRelationOid|LockRelation|LockAcquire|LockTuple|XactLockTableWait|PushActiveSnapshot|PopActiveSnapshot|GetTransactionSnapshot|GetLatestSnapshot|RegisterSnapshot|StartTransactionCommand|CommitTransactionCommand|XLogInsert|XLogFlush
PG_ONLY_USERS = $(wildcard src/shmem/*.[ch]pp src/api/*.[ch]pp src/worker/*.[ch]pp) src/module.cpp

.PHONY: layer-check
layer-check:
	@if grep -nE '(^|[^A-Za-z0-9_])($(PG_ONLY_CALLS))[[:space:]]*\(' $(PG_ONLY_USERS); then \
	  echo 'layer rule: only src/pg may call these (docs/development.md, "Layout"); move the call into src/pg' >&2; exit 1; fi

$(OBJS): | layer-check

# The version is pg_claim.control's default_version; META.json (PGXN) and
# debian/changelog repeat it, and test/version_check.py holds them to it.
# make installcheck (the regress layer of test/run-tests.sh) runs it first.
.PHONY: version-check
version-check:
	@python3 test/version_check.py

# The SQLSTATEs are kept in four places (src/core/error.hpp, docs/errors.md and
# the clients' maps); test/sqlstates_check.py holds them to each other.
.PHONY: sqlstate-check
sqlstate-check:
	@python3 test/sqlstates_check.py

installcheck: version-check sqlstate-check
