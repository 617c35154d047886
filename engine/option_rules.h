// The valid range of each numeric SessionOptions field, defined once.
// ValidateOptions checks every rule; ramferry_options_set takes a number
// by the rule's name (dashes for underscores) and checks only that rule,
// so a value the C setter takes is one the session accepts, and the
// other way round. The tools' flags land in the same fields and meet the
// same checks in ValidateOptions.
#ifndef RAMFERRY_ENGINE_OPTION_RULES_H_
#define RAMFERRY_ENGINE_OPTION_RULES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ramferry/options.h"

namespace ramferry::engine {

struct NumericOptionRule {
  const char* name;  // the field's name, as errors say it: "packet_pages"
  int64_t min;
  int64_t max;
  bool power_of_two;
  const char* why;  // what the range is, for the error ("" if nothing)
  int64_t (*get)(const SessionOptions&);
  void (*set)(SessionOptions&, int64_t);
};

// Every rule, in the order ValidateOptions checks them.
absl::Span<const NumericOptionRule> NumericOptionRules();

// The rule named `name` (underscores or dashes), or nullptr.
const NumericOptionRule* FindNumericOptionRule(absl::string_view name);

// OK when `value` is in the rule's range; otherwise INVALID_ARGUMENT that
// names the field, the value and the range.
absl::Status CheckNumericOption(const NumericOptionRule& rule, int64_t value);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_OPTION_RULES_H_
