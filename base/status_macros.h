// Status propagation in one line, named as Abseil's (status_macros.h,
// which Debian 12's Abseil lacks), so that a sed swaps the prefix when the
// distribution catches up:
//
//   RAMFERRY_RETURN_IF_ERROR(limiter_->Acquire(bytes));
//   RAMFERRY_ASSIGN_OR_RETURN(const Region* region, ReadHeaderWords(h));
//
// The explicit form stays where an error is annotated, or changes state on
// its way out: these return it as it came.
#ifndef RAMFERRY_BASE_STATUS_MACROS_H_
#define RAMFERRY_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status) once; returns it if it is an error.
#define RAMFERRY_RETURN_IF_ERROR(expr)                                    \
  do {                                                                    \
    if (::absl::Status ramferry_status_ = (expr); !ramferry_status_.ok()) \
      return ramferry_status_;                                            \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>) once; returns its status if it
// is an error, else moves its value into `lhs` (a declaration, as
// `T name`, or an lvalue). `lhs` must hold no unparenthesised comma.
#define RAMFERRY_ASSIGN_OR_RETURN(lhs, rexpr)                            \
  RAMFERRY_ASSIGN_OR_RETURN_IMPL_(                                       \
      RAMFERRY_STATUS_MACROS_CONCAT_(ramferry_statusor_, __LINE__), lhs, \
      rexpr)

// `statusor` is a name and `lhs` a declaration: neither takes parentheses.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define RAMFERRY_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();    \
  lhs = std::move(statusor).value()
// NOLINTEND(bugprone-macro-parentheses)

#define RAMFERRY_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define RAMFERRY_STATUS_MACROS_CONCAT_(x, y) \
  RAMFERRY_STATUS_MACROS_CONCAT_INNER_(x, y)

#endif  // RAMFERRY_BASE_STATUS_MACROS_H_
