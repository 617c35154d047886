// The source's copy of a carried stream's bytes that were sent but not
// yet acknowledged (proto/stream.h), so that after a lost channel the
// stream goes on, on another channel, from the last offset the
// destination acknowledged. Bounded: a stream never has more than
// `capacity` bytes unacknowledged, so its reader takes at most room()
// more from its peer (QEMU), and a slow or silent destination holds the
// peer back instead of growing this.
//
// Pure logic over a ring of `capacity` bytes. Thread-compatible: the
// stream's sending thread appends and reads; acknowledgements are handed
// to it (or the caller holds a lock).
#ifndef RAMFERRY_ENGINE_STREAM_STREAM_BACKLOG_H_
#define RAMFERRY_ENGINE_STREAM_STREAM_BACKLOG_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ramferry::engine {

class StreamBacklog {
 public:
  explicit StreamBacklog(uint64_t capacity) : ring_(capacity) {}

  // Every byte below it was acknowledged.
  uint64_t acked() const { return acked_; }
  // Past the last byte appended: the stream's offset for the next.
  uint64_t end() const { return end_; }
  // How many more bytes fit before an acknowledgement.
  uint64_t room() const { return ring_.size() - (end_ - acked_); }

  // Keeps `bytes`, the stream's next. OUT_OF_RANGE where they pass
  // room(): the caller reads no more than room() from its peer.
  absl::Status Append(absl::Span<const uint8_t> bytes);

  // Where the stream's next bytes go when read straight into the ring:
  // at most `at_most` bytes, contiguous, inside room() (empty when there
  // is none). Fill a prefix, then Commit how many.
  absl::Span<uint8_t> Writable(uint64_t at_most);
  // The first `bytes` of the last Writable() now hold the stream's next
  // bytes. OUT_OF_RANGE past room() or past the ring's wrap.
  absl::Status Commit(uint64_t bytes);

  // The destination holds every byte below `offset`: they are dropped.
  // An offset at or below acked() changes nothing; one past end() is
  // INVALID_ARGUMENT (bytes that were never sent).
  absl::Status Ack(uint64_t offset);

  // The bytes kept from `from` (acked() <= from <= end()) to end(), in
  // order, as at most two spans (the ring may wrap; the second may be
  // empty). They stay valid until the next Append or Ack.
  absl::StatusOr<std::array<absl::Span<const uint8_t>, 2>> Since(
      uint64_t from) const;

 private:
  std::vector<uint8_t> ring_;  // byte at stream offset o: ring_[o % size]
  uint64_t acked_ = 0;
  uint64_t end_ = 0;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_STREAM_BACKLOG_H_
