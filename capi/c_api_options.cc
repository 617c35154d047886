// The C API's options handle: its typed setters, and ramferry_options_set
// (ramferry.h), every SessionOptions field the typed setters leave out, by
// name, from a string (ramferry::SetOption), so that a binding reaches all
// of them through one call.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "capi/c_api_util.h"
#include "ramferry/auth_key.h"
#include "ramferry/options.h"
#include "ramferry/ramferry.h"
#include "ramferry/transport.h"

using namespace ramferry::capi;  // NOLINT(google-build-using-namespace)

ramferry_status ramferry_options_set(ramferry_options* options,
                                     const char* name, const char* value) {
  if (options == nullptr) return NullArgument("options");
  if (name == nullptr) return NullArgument("name");
  if (value == nullptr) return NullArgument("value");
  return Guard(&options->error, [&] {
    return Check(&options->error,
                 ramferry::SetOption(options->options, name, value));
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
    return ramferry::SetOption(o.options, "channels", absl::StrCat(channels));
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
