#include "proto/page_delta.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace ramferry::proto {
namespace {

constexpr size_t kMaxVarintBytes = 5;
// A gap of this many unchanged bytes or fewer inside a run costs less than
// ending the run and starting another (two varints of at least a byte).
constexpr size_t kMergeGap = 2;

size_t PutVarint(uint32_t v, uint8_t* out) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  out[n++] = static_cast<uint8_t>(v);
  return n;
}

// Reads a minimal varint of at most kMaxVarintBytes at `*at`, advancing it.
// False when it runs past `end`, is too long, is not minimal or does not
// fit 32 bits.
bool GetVarint(const uint8_t*& at, const uint8_t* end, uint32_t* v) {
  uint64_t value = 0;
  for (size_t i = 0; i < kMaxVarintBytes; ++i) {
    if (at == end) return false;
    const uint8_t b = *at++;
    value |= uint64_t{b & 0x7fu} << (7 * i);
    if ((b & 0x80) == 0) {
      // A last byte of 0 after others would make the same value shorter.
      if (i > 0 && b == 0) return false;
      if (value > UINT32_MAX) return false;
      *v = static_cast<uint32_t>(value);
      return true;
    }
  }
  return false;
}

// The first non-zero byte of `p` at or after `from`, or `size`.
size_t NextChanged(const uint8_t* p, size_t from, size_t size) {
  while (from < size && (from & 7) != 0) {
    if (p[from] != 0) return from;
    ++from;
  }
  for (; from + 8 <= size; from += 8) {
    uint64_t w;
    std::memcpy(&w, p + from, 8);
    if (w != 0) return from + static_cast<size_t>(__builtin_ctzll(w)) / 8;
  }
  for (; from < size; ++from) {
    if (p[from] != 0) return from;
  }
  return size;
}

}  // namespace

// Reads the page the workload may be writing, by design, as a send does:
// not instrumented for TSan, like the workload's own writers. Each word is
// loaded once (an atomic load the compiler may not repeat), so the XOR
// and the refreshed copy agree on what the word was.
__attribute__((no_sanitize("thread"))) bool RefreshCopy(const uint8_t* live,
                                                        uint8_t* copy,
                                                        uint8_t* xor_out,
                                                        size_t page_size) {
  const auto* src = reinterpret_cast<const uint64_t*>(live);
  auto* dst = reinterpret_cast<uint64_t*>(copy);
  auto* x = reinterpret_cast<uint64_t*>(xor_out);
  uint64_t any = 0;
  for (size_t i = 0; i < page_size / 8; ++i) {
    const uint64_t w = __atomic_load_n(src + i, __ATOMIC_RELAXED);
    const uint64_t d = w ^ dst[i];
    x[i] = d;
    if (d != 0) dst[i] = w;
    any |= d;
  }
  return any != 0;
}

size_t EncodeDelta(absl::Span<const uint8_t> xor_page,
                   absl::Span<uint8_t> out) {
  const uint8_t* p = xor_page.data();
  const size_t size = xor_page.size();
  size_t written = 0, pos = 0;
  for (size_t start = NextChanged(p, 0, size); start < size;
       start = NextChanged(p, pos, size)) {
    // The run ends after its last changed byte, before a gap too long to
    // carry along.
    // A page changed everywhere stops at the budget, not at its end.
    const size_t room = out.size() - written;
    size_t end = start + 1;
    for (size_t i = end; i < size && i - end <= kMergeGap; ++i) {
      if (p[i] == 0) continue;
      end = i + 1;
      if (end - start > room) return 0;
    }
    const size_t length = end - start;
    uint8_t head[2 * kMaxVarintBytes];
    size_t h = PutVarint(static_cast<uint32_t>(start - pos), head);
    h += PutVarint(static_cast<uint32_t>(length), head + h);
    if (out.size() - written < h + length) return 0;
    std::memcpy(out.data() + written, head, h);
    std::memcpy(out.data() + written + h, p + start, length);
    written += h + length;
    pos = end;
  }
  if (written == 0) {
    if (out.size() < 2) return 0;
    out[0] = 0;
    out[1] = 0;
    return 2;
  }
  return written;
}

absl::Status CheckDelta(absl::Span<const uint8_t> record, uint32_t page_size) {
  const uint8_t* at = record.data();
  const uint8_t* const end = at + record.size();
  uint64_t pos = 0;
  bool first = true;
  if (record.empty()) return absl::InvalidArgumentError("empty delta record");
  while (at != end) {
    uint32_t skip = 0, length = 0;
    if (!GetVarint(at, end, &skip) || !GetVarint(at, end, &length)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "delta record: bad or truncated run header at byte %d",
          record.size() - static_cast<size_t>(end - at)));
    }
    if (length == 0 && !(first && skip == 0 && at == end)) {
      return absl::InvalidArgumentError(
          "delta record: an empty run that is not the whole record (0, 0)");
    }
    if (skip > page_size - pos || length > page_size - pos - skip) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "delta record: a run of %d bytes at page byte %d runs past the "
          "%d-byte page",
          length, pos + skip, page_size));
    }
    if (length > static_cast<size_t>(end - at)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "delta record truncated: a run wants %d bytes, %d are left", length,
          end - at));
    }
    pos += uint64_t{skip} + length;
    at += length;
    first = false;
  }
  return absl::OkStatus();
}

void ApplyDelta(absl::Span<const uint8_t> record, uint8_t* page,
                uint32_t page_size) {
  const uint8_t* at = record.data();
  const uint8_t* const end = at + record.size();
  size_t pos = 0;
  while (at != end) {
    uint32_t skip = 0, length = 0;
    if (!GetVarint(at, end, &skip) || !GetVarint(at, end, &length)) return;
    pos += skip;
    if (pos + length > page_size) return;  // CheckDelta refused it already
    for (uint32_t i = 0; i < length; ++i) page[pos + i] ^= at[i];
    at += length;
    pos += length;
  }
}

}  // namespace ramferry::proto
