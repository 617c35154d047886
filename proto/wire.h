// Big-endian field access for fixed wire layouts. Bounds are the caller's
// job (every layout has a fixed size checked before any field is touched);
// WireReader/WireWriter add a cursor for variable-length messages and fail
// softly instead of reading past the end.
#ifndef RAMFERRY_PROTO_WIRE_H_
#define RAMFERRY_PROTO_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ramferry::proto {

inline void Store16(uint8_t* p, uint16_t v) {
  v = __builtin_bswap16(v);
  std::memcpy(p, &v, sizeof v);
}
inline void Store32(uint8_t* p, uint32_t v) {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof v);
}
inline void Store64(uint8_t* p, uint64_t v) {
  v = __builtin_bswap64(v);
  std::memcpy(p, &v, sizeof v);
}
inline uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap16(v);
}
inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap32(v);
}
inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap64(v);
}

// Appends big-endian fields to a growing buffer.
class WireWriter {
 public:
  explicit WireWriter(std::vector<uint8_t>* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(v); }
  void U16(uint16_t v) {
    Grow(2, [&](uint8_t* p) { Store16(p, v); });
  }
  void U32(uint32_t v) {
    Grow(4, [&](uint8_t* p) { Store32(p, v); });
  }
  void U64(uint64_t v) {
    Grow(8, [&](uint8_t* p) { Store64(p, v); });
  }
  void Bytes(absl::Span<const uint8_t> b) {
    out_->insert(out_->end(), b.begin(), b.end());
  }
  // A u16 length followed by the bytes; callers bound the length first.
  void Str16(absl::string_view s) {
    U16(static_cast<uint16_t>(s.size()));
    out_->insert(out_->end(), s.begin(), s.end());
  }

 private:
  template <typename F>
  void Grow(size_t n, F store) {
    size_t at = out_->size();
    out_->resize(at + n);
    store(out_->data() + at);
  }
  std::vector<uint8_t>* out_;
};

// Reads big-endian fields from a bounded buffer. Once a read would run past
// the end, ok() turns false and every later read returns zero, so a decoder
// checks ok() once per logical step instead of after every field.
class WireReader {
 public:
  explicit WireReader(absl::Span<const uint8_t> in) : in_(in) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ ? in_.size() - pos_ : 0; }
  uint8_t U8() { return Take(1) ? in_[pos_ - 1] : 0; }
  uint16_t U16() { return Take(2) ? Load16(in_.data() + pos_ - 2) : 0; }
  uint32_t U32() { return Take(4) ? Load32(in_.data() + pos_ - 4) : 0; }
  uint64_t U64() { return Take(8) ? Load64(in_.data() + pos_ - 8) : 0; }
  std::string Str16() {
    uint16_t n = U16();
    if (!Take(n)) return {};
    return std::string(reinterpret_cast<const char*>(in_.data() + pos_ - n), n);
  }

 private:
  bool Take(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }
  absl::Span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_WIRE_H_
