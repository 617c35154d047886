// SetOption (ramferry/options.h): every SessionOptions field of a plain
// type, by name, from text. The numbers are the validator's own rules
// (engine/option_rules.h), so a value taken here is one a session
// accepts; the rest have a table row each: the name, what the value must
// look like, and how it lands in SessionOptions. The C API's
// ramferry_options_set and the Python package set options through it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "engine/option_rules.h"
#include "ramferry/options.h"

namespace ramferry {
namespace {

absl::Status Bool(absl::string_view name, absl::string_view v, bool* out) {
  if (v == "1" || v == "true" || v == "on") {
    *out = true;
  } else if (v == "0" || v == "false" || v == "off") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": want 1/0, true/false or on/off, not '", v, "'"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Number(absl::string_view name, absl::string_view v, T lo, T hi,
                    T* out) {
  int64_t n;
  if (!absl::SimpleAtoi(v, &n) || n < static_cast<int64_t>(lo) ||
      n > static_cast<int64_t>(hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": want a whole number from ", lo, " to ", hi,
                     ", not '", v, "'"));
  }
  *out = static_cast<T>(n);
  return absl::OkStatus();
}

absl::Status Millis(absl::string_view name, absl::string_view v,
                    absl::Duration* out) {
  int64_t ms = 0;
  if (absl::Status s = Number<int64_t>(name, v, 1, int64_t{1} << 40, &ms);
      !s.ok()) {
    return s;
  }
  *out = absl::Milliseconds(ms);
  return absl::OkStatus();
}

// "HOST:PORT,HOST:PORT" ([v6]:PORT too); "" clears.
absl::Status Endpoints(absl::string_view v, std::vector<Endpoint>* out) {
  std::vector<Endpoint> list;
  for (absl::string_view item : absl::StrSplit(v, ',', absl::SkipEmpty())) {
    const size_t colon = item.rfind(':');
    uint16_t port = 0;
    absl::string_view host =
        colon == absl::string_view::npos ? "" : item.substr(0, colon);
    if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
    if (host.empty() ||
        !Number<uint16_t>("channel-endpoints", item.substr(colon + 1), 1, 65535,
                          &port)
             .ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "channel-endpoints: want HOST:PORT[,HOST:PORT...], not '", item,
          "'"));
    }
    list.push_back({std::string(host), port});
  }
  *out = std::move(list);
  return absl::OkStatus();
}

struct Option {
  const char* name;
  const char* value;  // what the value looks like, for the error
  std::function<absl::Status(absl::string_view, SessionOptions&)> set;
};

Option BoolOption(const char* key, bool SessionOptions::*field) {
  return {key, "1|0", [key, field](absl::string_view v, SessionOptions& o) {
            return Bool(key, v, &(o.*field));
          }};
}

Option MillisOption(const char* key, absl::Duration SessionOptions::*field) {
  return {key, "milliseconds",
          [key, field](absl::string_view v, SessionOptions& o) {
            return Millis(key, v, &(o.*field));
          }};
}

const std::vector<Option>& Options() {
  static const std::vector<Option>* const kOptions = new std::vector<Option>{
      {"channel-endpoints", "HOST:PORT,...",
       [](absl::string_view v, SessionOptions& o) {
         return Endpoints(v, &o.channel_endpoints);
       }},
      {"completion", "a completion policy name",
       [](absl::string_view v, SessionOptions& o) {
         absl::StatusOr<CompletionPolicy> p = ParseCompletionPolicy(v);
         if (!p.ok()) return p.status();
         o.completion = *p;
         return absl::OkStatus();
       }},
      {"delta", "off|on|auto",
       [](absl::string_view v, SessionOptions& o) {
         absl::StatusOr<Delta> d = ParseDelta(v);
         if (!d.ok()) return d.status();
         o.delta = *d;
         return absl::OkStatus();
       }},
      BoolOption("registered-buffers", &SessionOptions::registered_buffers),
      BoolOption("fallback-to-tcp-zerocopy",
                 &SessionOptions::fallback_to_tcp_zerocopy),
      BoolOption("rdma-pin-all", &SessionOptions::rdma_pin_all),
      BoolOption("rdma-reg-batch", &SessionOptions::rdma_reg_batch),
      BoolOption("survive-channel-loss", &SessionOptions::survive_channel_loss),
      BoolOption("zero-pages", &SessionOptions::zero_pages),
      BoolOption("skip-untouched", &SessionOptions::skip_untouched),
      BoolOption("single-thread", &SessionOptions::single_thread),
      BoolOption("announce-next-header", &SessionOptions::announce_next_header),
      MillisOption("handshake-timeout-ms", &SessionOptions::handshake_timeout),
      MillisOption("stall-timeout-ms", &SessionOptions::stall_timeout),
      MillisOption("round-timeout-ms", &SessionOptions::round_timeout),
  };
  return *kOptions;
}

}  // namespace

absl::Status SetOption(SessionOptions& options, absl::string_view name,
                       absl::string_view value) {
  if (const engine::NumericOptionRule* rule =
          engine::FindNumericOptionRule(name);
      rule != nullptr) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(value, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": want a whole number, not '", value, "'"));
    }
    RAMFERRY_RETURN_IF_ERROR(engine::CheckNumericOption(*rule, n));
    rule->set(options, n);
    return absl::OkStatus();
  }
  const std::string dashed = absl::StrReplaceAll(name, {{"_", "-"}});
  for (const Option& opt : Options()) {
    if (dashed != opt.name) continue;
    // Set on a copy: a value refused leaves the options as they were.
    SessionOptions updated = options;
    RAMFERRY_RETURN_IF_ERROR(opt.set(value, updated));
    options = std::move(updated);
    return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (const engine::NumericOptionRule& rule : engine::NumericOptionRules()) {
    names.push_back(absl::StrCat(
        absl::StrReplaceAll(rule.name, {{"_", "-"}}), " (", rule.min, "..",
        rule.max, rule.power_of_two ? ", a power of two" : "", ")"));
  }
  for (const Option& opt : Options()) {
    names.push_back(absl::StrCat(opt.name, " (", opt.value, ")"));
  }
  return absl::NotFoundError(absl::StrCat(
      "no option '", name,
      "' settable by name; the names are: ", absl::StrJoin(names, ", "),
      "; the other fields (host, port, transport, the key, ...) are set as "
      "themselves"));
}

}  // namespace ramferry
