// Status and StatusOr: how every recoverable error in moe-engine travels.
//
// Invalid input (files, configs, CLI flags, requests), I/O failures and, later,
// communication failures are returned as values, never thrown or asserted. The
// message names the offending thing (file, tensor, config field, flag).
// Programming errors (broken invariants) use MOE_CHECK instead (src/moe/core/check.h).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace moe {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad flag, bad request, bad config value
  kNotFound,            // missing file, tensor, field
  kDataLoss,            // truncated or corrupt file
  kFailedPrecondition,  // valid input in the wrong state (e.g. prompt longer than context)
  kOutOfRange,
  kUnimplemented,       // e.g. an architecture we do not support yet
  kInternal,
  kUnavailable,         // peer or device gone
  kDeadlineExceeded,    // timed out
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>", or "OK".
  std::string to_string() const;

  // Returns a copy whose message is "<context>: <message>".
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a non-OK Status. Accessing value() of an error is a bug (asserts).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  StatusOr(T value) : value_(std::move(value)) {}                                   // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace moe

#define MOE_STATUS_CONCAT_INNER(a, b) a##b
#define MOE_STATUS_CONCAT(a, b) MOE_STATUS_CONCAT_INNER(a, b)

// Returns from the current function if `expr` (a Status) is not OK.
#define MOE_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    ::moe::Status moe_status_ = (expr);                \
    if (!moe_status_.ok()) return moe_status_;         \
  } while (0)

// `MOE_ASSIGN_OR_RETURN(auto x, f());` binds x to f()'s value or returns its Status.
#define MOE_ASSIGN_OR_RETURN(lhs, expr) \
  MOE_ASSIGN_OR_RETURN_IMPL(MOE_STATUS_CONCAT(moe_statusor_, __LINE__), lhs, expr)
#define MOE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
