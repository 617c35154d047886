// The C API's options handle: its typed setters, and ramferry_options_set
// (ramferry.h), every SessionOptions field the typed setters leave out, by
// name, from a string, so that a binding reaches all of them through one
// call. The numbers are the validator's own rules
// (engine/option_rules.h), so a value taken here is one a session
// accepts; the rest have a table row each: the name, what the value must
// look like, and how it lands in SessionOptions.
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
#include "absl/time/time.h"
#include "capi/c_api_util.h"
#include "engine/option_rules.h"
#include "ramferry/auth_key.h"
#include "ramferry/options.h"
#include "ramferry/ramferry.h"
#include "ramferry/transport.h"

using namespace ramferry::capi;  // NOLINT(google-build-using-namespace)

namespace {

using ramferry::SessionOptions;

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
absl::Status Endpoints(absl::string_view v,
                       std::vector<ramferry::Endpoint>* out) {
  std::vector<ramferry::Endpoint> list;
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
         absl::StatusOr<ramferry::CompletionPolicy> p =
             ramferry::ParseCompletionPolicy(v);
         if (!p.ok()) return p.status();
         o.completion = *p;
         return absl::OkStatus();
       }},
      {"delta", "off|on|auto",
       [](absl::string_view v, SessionOptions& o) {
         absl::StatusOr<ramferry::Delta> d = ramferry::ParseDelta(v);
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

ramferry_status ramferry_options_set(ramferry_options* options,
                                     const char* name, const char* value) {
  if (options == nullptr) return NullArgument("options");
  if (name == nullptr) return NullArgument("name");
  if (value == nullptr) return NullArgument("value");
  return Guard(&options->error, [&] {
    if (const ramferry::engine::NumericOptionRule* rule =
            ramferry::engine::FindNumericOptionRule(name);
        rule != nullptr) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        return Fail(&options->error,
                    absl::InvalidArgumentError(absl::StrCat(
                        name, ": want a whole number, not '", value, "'")));
      }
      if (absl::Status s = ramferry::engine::CheckNumericOption(*rule, n);
          !s.ok()) {
        return Fail(&options->error, s);
      }
      rule->set(options->options, n);
      return RAMFERRY_OK;
    }
    for (const Option& opt : Options()) {
      if (name != absl::string_view(opt.name)) continue;
      // Set on a copy: a value refused leaves the options as they were.
      SessionOptions updated = options->options;
      if (absl::Status s = opt.set(value, updated); !s.ok()) {
        return Fail(&options->error, s);
      }
      options->options = std::move(updated);
      return RAMFERRY_OK;
    }
    std::vector<std::string> names;
    for (const ramferry::engine::NumericOptionRule& rule :
         ramferry::engine::NumericOptionRules()) {
      names.push_back(absl::StrCat(
          absl::StrReplaceAll(rule.name, {{"_", "-"}}), " (", rule.min, "..",
          rule.max, rule.power_of_two ? ", a power of two" : "", ")"));
    }
    for (const Option& opt : Options()) {
      names.push_back(absl::StrCat(opt.name, " (", opt.value, ")"));
    }
    return Fail(&options->error,
                absl::NotFoundError(absl::StrCat(
                    "no option '", name, "'; ramferry_options_set knows: ",
                    absl::StrJoin(names, ", "),
                    "; the rest have setters of their own")));
  });
}

// ---- options ----

ramferry_options* ramferry_options_new(void) {
  return new (std::nothrow) ramferry_options();
}

void ramferry_options_free(ramferry_options* options) { delete options; }

const char* ramferry_options_last_error(const ramferry_options* options) {
  return options == nullptr ? "" : options->error.c_str();
}

namespace {
// Runs `set` on a non-NULL options handle, recording its error there.
template <typename Fn>
ramferry_status SetOption(ramferry_options* options, Fn&& set) {
  if (options == nullptr) return NullArgument("options");
  return Guard(&options->error,
               [&] { return Check(&options->error, set(*options)); });
}
}  // namespace

ramferry_status ramferry_options_set_host(ramferry_options* options,
                                          const char* host) {
  return SetOption(options, [&](ramferry_options& o) {
    if (host == nullptr || *host == '\0') {
      return absl::InvalidArgumentError("host is NULL or empty");
    }
    o.options.host = host;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_port(ramferry_options* options,
                                          uint16_t port) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.port = port;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_transport(ramferry_options* options,
                                               const char* name) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (name == nullptr) return absl::InvalidArgumentError("transport is NULL");
    if (absl::string_view(name) == "auto") {
      o.auto_transport = true;
      return absl::OkStatus();
    }
    absl::StatusOr<ramferry::TransportKind> kind =
        ramferry::ParseTransportKind(name);
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown transport \"", name,
                       "\" (tcp, tcp-zerocopy, uring-zc, rdma or auto)"));
    }
    o.auto_transport = false;
    o.options.transport = *kind;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_channels(ramferry_options* options,
                                              uint32_t channels) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (absl::Status s = ramferry::engine::CheckNumericOption(
            *ramferry::engine::FindNumericOptionRule("channels"), channels);
        !s.ok()) {
      return s;
    }
    o.options.channels = channels;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_key_file(ramferry_options* options,
                                              const char* path) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (path == nullptr) return absl::InvalidArgumentError("path is NULL");
    absl::StatusOr<std::string> key = ramferry::ReadAuthKeyFile(path);
    if (!key.ok()) return key.status();
    o.options.auth_key = *std::move(key);
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_key(ramferry_options* options,
                                         const void* key, size_t length) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (key == nullptr && length != 0) {
      return absl::InvalidArgumentError("key is NULL");
    }
    if (length < 16 || length > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("a key must be 16 to 1024 bytes, not ", length));
    }
    o.options.auth_key.assign(static_cast<const char*>(key), length);
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_insecure(ramferry_options* options,
                                              int insecure) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.insecure = insecure != 0;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_protect(ramferry_options* options,
                                             const char* protection) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (protection == nullptr) {
      return absl::InvalidArgumentError("protection is NULL");
    }
    absl::StatusOr<ramferry::Protection> p =
        ramferry::ParseProtection(protection);
    if (!p.ok()) return p.status();
    o.options.protect = *p;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_compression(ramferry_options* options,
                                                 const char* compression) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (compression == nullptr) {
      return absl::InvalidArgumentError("compression is NULL");
    }
    absl::StatusOr<ramferry::Compression> c =
        ramferry::ParseCompression(compression);
    if (!c.ok()) return c.status();
    o.options.compression = *c;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_verify(ramferry_options* options,
                                            const char* mode) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (mode == nullptr) return absl::InvalidArgumentError("mode is NULL");
    absl::StatusOr<ramferry::VerifyMode> m = ramferry::ParseVerifyMode(mode);
    if (!m.ok()) return m.status();
    o.options.verify = *m;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_max_bandwidth(ramferry_options* options,
                                                   uint64_t bytes_per_second) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.max_bandwidth = bytes_per_second;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_postcopy(ramferry_options* options,
                                              int postcopy) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.postcopy = postcopy != 0;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_postcopy_urgent_channel(
    ramferry_options* options, int urgent) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.postcopy_urgent_channel = urgent != 0;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_postcopy_resume_timeout_ms(
    ramferry_options* options, uint64_t milliseconds) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.postcopy_resume_timeout =
        absl::Milliseconds(static_cast<int64_t>(milliseconds));
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_connect_timeout_ms(
    ramferry_options* options, uint64_t milliseconds) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.connect_timeout =
        absl::Milliseconds(static_cast<int64_t>(milliseconds));
    return absl::OkStatus();
  });
}
