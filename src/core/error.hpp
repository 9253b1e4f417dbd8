// The layers of src/, lowest first; a file includes headers of its own
// layer and of lower ones only (docs/development.md, "Layout"):
//   core    pure C++ (this header): never includes postgres.h;
//   pg      the thin server layer: the error helper, SPI wrappers, and the
//           only code that touches table/index AMs, heap and index scans,
//           heavyweight locks, WAL and snapshots directly;
//   shmem   shared-memory services: waiting and waking, the frontier, the
//           registry of databases, the shared-memory hooks;
//   api     one file per SQL surface: fmgr, SPI (pg::run), SRF helpers, and
//           the layers below;
//   worker  the background workers;
//   src/module.cpp  _PG_init and the GUCs, the only file that knows every
//           layer.
//
// Header-only. The error type of the pure layer. It carries a SQLSTATE so that the server
// boundary (pg::call_core and PGCLAIM_FUNCTION in src/pg/pg.hpp) re-raises it with the right code.
#pragma once

#include <stdexcept>
#include <string>

namespace pgclaim {

// SQLSTATEs the pure layer raises. Standard codes where one fits exactly,
// class "PC" for conditions that only pg_claim has. This is their one
// definition: the server layer takes the integer form of a code from here
// (pg::sqlstate_code in src/pg/pg.hpp). docs/errors.md lists all of them.
namespace sqlstate {
inline constexpr const char *kStaleToken = "PC001";        // token is not a live claim
inline constexpr const char *kLeaseMismatch = "PC002";     // permits differ from live holders
// PC003: a partition the front (pg_claim_proxy) cannot reach (raised there).
inline constexpr const char *kCompacted = "PC004";         // watch revision no longer retained (raised by SQL)
inline constexpr const char *kEventTimedOut = "PC010";     // await_event's wait ended (raised in SQL)
inline constexpr const char *kChildEnded = "PC011";        // a child of a durable run ended dead/cancelled
inline constexpr const char *kUndefinedQueue = "42704";    // undefined_object
inline constexpr const char *kDuplicateQueue = "42710";    // duplicate_object
inline constexpr const char *kInvalidName = "42602";       // invalid_name
inline constexpr const char *kNullValue = "22004";         // null_value_not_allowed
inline constexpr const char *kInvalidValue = "22023";      // invalid_parameter_value
inline constexpr const char *kReadOnly = "25006";          // read_only_sql_transaction
}  // namespace sqlstate

class Error : public std::runtime_error {
public:
    Error(const char *code, std::string message, std::string hint = {}, std::string detail = {})
        : std::runtime_error(message), code_(code), hint_(std::move(hint)),
          detail_(std::move(detail)) {}
    const char *code() const noexcept { return code_; }
    const std::string &hint() const noexcept { return hint_; }
    const std::string &detail() const noexcept { return detail_; }

private:
    const char *code_;
    std::string hint_;
    std::string detail_;
};

}  // namespace pgclaim
