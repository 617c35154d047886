// What the proof and key-schedule tests bind to: a key and a data
// channel's Hello as it goes on the wire.
#ifndef RAMFERRY_TESTS_PROTO_KEYED_HELLO_H_
#define RAMFERRY_TESTS_PROTO_KEYED_HELLO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "proto/auth.h"
#include "proto/handshake.h"

namespace ramferry::proto {

inline const std::string kKey = "0123456789abcdef0123456789abcdef";

inline std::vector<uint8_t> HelloBytes(uint32_t channel_index,
                                       uint8_t session_byte) {
  Hello h;
  h.role = Role::kData;
  h.session.bytes.fill(session_byte);
  h.channel_index = channel_index;
  h.channel_count = 4;
  h.max_packet_pages = 128;
  h.transport = 1;
  h.auth = kAuthHmacSha256;
  std::vector<uint8_t> out(kHelloBytes);
  EncodeHello(h, absl::MakeSpan(out));
  return out;
}

}  // namespace ramferry::proto

#endif  // RAMFERRY_TESTS_PROTO_KEYED_HELLO_H_
