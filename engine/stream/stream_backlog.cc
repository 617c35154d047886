#include "engine/stream/stream_backlog.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace ramferry::engine {

absl::Status StreamBacklog::Append(absl::Span<const uint8_t> bytes) {
  if (bytes.size() > room()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "stream backlog: %d bytes do not fit; %d of %d are free until the "
        "destination acknowledges more",
        bytes.size(), room(), ring_.size()));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const size_t at = (end_ + done) % ring_.size();
    const size_t n = std::min(bytes.size() - done, ring_.size() - at);
    std::memcpy(ring_.data() + at, bytes.data() + done, n);
    done += n;
  }
  end_ += bytes.size();
  return absl::OkStatus();
}

absl::Span<uint8_t> StreamBacklog::Writable(uint64_t at_most) {
  const size_t at = end_ % ring_.size();
  const uint64_t n =
      std::min({at_most, room(), static_cast<uint64_t>(ring_.size() - at)});
  return absl::MakeSpan(ring_.data() + at, n);
}

absl::Status StreamBacklog::Commit(uint64_t bytes) {
  const size_t at = end_ % ring_.size();
  if (bytes > room() || bytes > ring_.size() - at) {
    return absl::OutOfRangeError(absl::StrFormat(
        "stream backlog: %d bytes committed where %d fit before the wrap "
        "and %d are free",
        bytes, ring_.size() - at, room()));
  }
  end_ += bytes;
  return absl::OkStatus();
}

absl::Status StreamBacklog::Ack(uint64_t offset) {
  if (offset > end_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stream acknowledged to offset %d, but only %d bytes were sent", offset,
        end_));
  }
  acked_ = std::max(acked_, offset);
  return absl::OkStatus();
}

absl::StatusOr<std::array<absl::Span<const uint8_t>, 2>> StreamBacklog::Since(
    uint64_t from) const {
  if (from < acked_ || from > end_) {
    return absl::OutOfRangeError(absl::StrFormat(
        "stream backlog holds [%d, %d), not from %d", acked_, end_, from));
  }
  std::array<absl::Span<const uint8_t>, 2> out;
  const uint64_t total = end_ - from;
  if (total == 0) return out;
  const size_t at = from % ring_.size();
  const size_t first = std::min<uint64_t>(total, ring_.size() - at);
  out[0] = absl::MakeConstSpan(ring_.data() + at, first);
  out[1] = absl::MakeConstSpan(ring_.data(), total - first);
  return out;
}

}  // namespace ramferry::engine
