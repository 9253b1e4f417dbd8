// The databases of the cluster, as the launcher and the database hook see
// them: the list a worker may serve, and who may take one over.
#pragma once

#include "pg/pg.hpp"

namespace pgclaim::pg {

struct DatabaseEntry {
    Oid db;
    NameData name;
};

// Connectable, valid, non-template databases, read from pg_database (a
// shared catalog) in a transaction of its own; the array is allocated in
// `cxt`. For a process connected to no database (the launcher).
DatabaseEntry *list_databases(MemoryContext cxt, int *n);

// May the current user run a statement that needs database `db` to itself
// (DROP, ALTER ... RENAME or SET TABLESPACE: owner; CREATE DATABASE with it
// as template: CREATEDB and either a template database or its owner)?
// PostgreSQL checks the same later; the worker is paused only for those who
// pass, so nobody else can make it restart.
bool may_take_over_database(Oid db, bool as_template);

}  // namespace pgclaim::pg
