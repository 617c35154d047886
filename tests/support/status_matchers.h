// Status assertions that say why they failed: EXPECT_OK(x) and
// ASSERT_OK(x) take an absl::Status, an absl::StatusOr<T>, or any other
// result with ok(), and on failure gtest prints the status (code and
// message) instead of "false". Debian 12's Abseil predates
// absl/status/status_matchers.h; these are the part of it the tests use.
#ifndef RAMFERRY_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define RAMFERRY_TESTS_SUPPORT_STATUS_MATCHERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace ramferry::testing {

inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}
// A helper's own result type with ok() (a saved namespace, a testbed).
template <typename T>
const T& StatusOf(const T& result) {
  return result;
}

MATCHER(IsOk, negation ? "is not OK" : "is OK") { return arg.ok(); }

// StatusIs(code[, message matcher]): a Status or StatusOr with that code
// and a message the matcher takes. `code` may be a matcher too, for a
// refusal that may come with one of several codes, e.g.
// StatusIs(AnyOf(kUnavailable, kDataLoss), HasSubstr("channel")).
MATCHER_P(StatusIs, code,
          std::string(negation ? "isn't" : "is") + " a status whose code " +
              ::testing::DescribeMatcher<absl::StatusCode>(code)) {
  const absl::Status& s = StatusOf(arg);
  *result_listener << "which is " << s;
  return ::testing::Matches(code)(s.code());
}
MATCHER_P2(StatusIs, code, message,
           std::string(negation ? "isn't" : "is") + " a status whose code " +
               ::testing::DescribeMatcher<absl::StatusCode>(code) +
               " and whose message " +
               ::testing::DescribeMatcher<std::string>(message)) {
  const absl::Status& s = StatusOf(arg);
  *result_listener << "which is " << s;
  return ::testing::Matches(code)(s.code()) &&
         ::testing::Matches(message)(std::string(s.message()));
}

}  // namespace ramferry::testing

#define EXPECT_OK(expr) \
  EXPECT_THAT(::ramferry::testing::StatusOf(expr), ::ramferry::testing::IsOk())
#define ASSERT_OK(expr) \
  ASSERT_THAT(::ramferry::testing::StatusOf(expr), ::ramferry::testing::IsOk())

#endif  // RAMFERRY_TESTS_SUPPORT_STATUS_MATCHERS_H_
