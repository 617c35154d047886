#include "engine/channel_receiver.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/page_runs.h"
#include "engine/status_util.h"

namespace ramferry::engine {

ChannelReceiver::ChannelReceiver(uint32_t index,
                                 std::unique_ptr<channels::Transport> transport,
                                 const RegionTable* regions, uint32_t max_pages,
                                 RoundBarrier* barrier, SessionFailure* failure,
                                 ErrorHandler on_error)
    : index_(index),
      transport_(std::move(transport)),
      regions_(regions),
      max_pages_(max_pages),
      barrier_(barrier),
      failure_(failure),
      on_error_(std::move(on_error)),
      raw_offsets_(sizeof(uint64_t) * max_pages),
      offsets_(max_pages) {}

ChannelReceiver::~ChannelReceiver() { Join(); }

void ChannelReceiver::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ChannelReceiver::Join() {
  if (thread_.joinable()) thread_.join();
}

void ChannelReceiver::Run() {
  while (true) {
    absl::StatusOr<Step> step = ReceiveOne();
    if (!step.ok()) {
      // Once the session failed elsewhere, this channel's error is only
      // the echo of the teardown: the first error is the one to report.
      absl::Status annotated =
          Annotate(step.status(), absl::StrCat("channel ", index_));
      if (on_error_ != nullptr) {
        on_error_({index_, round_, annotated, connection_failed_});
      } else {
        failure_->Fail(annotated);
      }
      return;
    }
    // Cheap (a vDSO call): keeps the thread's CPU visible while it runs.
    thread_cpu_ns_.Add(channels::ThreadCpuNs() - thread_cpu_ns_.get());
    if (*step == Step::kFinished) return;
  }
}

absl::StatusOr<ChannelReceiver::Step> ChannelReceiver::ReceiveOne() {
  if (absl::Status s = transport_->ReadExact(absl::MakeSpan(fixed_),
                                             /*at_packet_boundary=*/true);
      !s.ok()) {
    connection_failed_ = true;
    if (absl::IsUnavailable(s)) {
      return absl::UnavailableError(
          absl::StrFormat("%s before FINISH (after packet %d, in round %d)",
                          s.message(), next_packet_, round_));
    }
    return s;
  }
  absl::StatusOr<proto::PacketHeader> h =
      proto::DecodePacketFixed(fixed_, index_, max_pages_);
  if (!h.ok()) return Annotate(h.status(), "bad packet header");
  header_bytes_.Add(proto::PacketHeaderBytes(h->page_count));
  if (h->packet_num != next_packet_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad packet header: packet number %d, expected %d",
                        h->packet_num, next_packet_));
  }
  ++next_packet_;
  if (h->round != round_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad packet header: packet %d is for round %d, channel is in round %d",
        h->packet_num, h->round, round_));
  }
  if (h->flags & proto::kPacketFinish) {
    finishes_.Add();
    finished_.store(true, std::memory_order_release);
    return Step::kFinished;
  }
  if (h->flags & proto::kPacketSync) {
    syncs_.Add();
    absl::StatusOr<bool> round_done =
        barrier_->Arrive(index_, round_, round_pages_);
    if (!round_done.ok()) return round_done.status();
    // Not done: a channel was lost in this round, and its batches come
    // again on this one (still round_) before another SYNC.
    if (*round_done) ++round_;
    round_pages_ = 0;
    return Step::kContinue;
  }
  if (absl::Status s = ReceiveData(*h); !s.ok()) return s;
  return Step::kContinue;
}

absl::Status ChannelReceiver::ReceiveData(const proto::PacketHeader& h) {
  const Region* region = regions_->Find(h.region_id);
  if (region == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad packet header: unknown region id %d", h.region_id));
  }
  if (h.page_size != region->page_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad packet header: page size %d, region %d has %d-byte pages",
        h.page_size, h.region_id, region->page_size));
  }
  auto raw = absl::MakeSpan(raw_offsets_.data(), 8 * size_t{h.page_count});
  if (absl::Status s = transport_->ReadExact(raw, /*at_packet_boundary=*/false);
      !s.ok()) {
    connection_failed_ = true;
    return s;
  }
  auto offsets = absl::MakeSpan(offsets_.data(), h.page_count);
  if (absl::Status s =
          proto::DecodePageOffsets(h, raw, region->length, offsets);
      !s.ok()) {
    return Annotate(s, "bad packet");
  }
  // Only validated offsets reach this point: every span lies inside the
  // region.
  BuildPageRuns(*region, offsets, &iov_, &run_offsets_);
  if (absl::Status s = transport_->ReadPayload(iov_); !s.ok()) {
    connection_failed_ = true;
    return s;
  }
  packets_.Add();
  pages_.Add(h.page_count);
  payload_bytes_.Add(uint64_t{h.page_count} * h.page_size);
  round_pages_ += h.page_count;
  return absl::OkStatus();
}

void ChannelReceiver::ExportStats(ChannelStats* out) const {
  transport_->stats().ExportTo(out);
  out->channel = index_;
  out->packets = packets_.get();
  out->pages = pages_.get();
  out->payload_bytes = payload_bytes_.get();
  out->header_bytes = header_bytes_.get();
  out->syncs = syncs_.get();
  out->finishes = finishes_.get();
  out->thread_cpu_ns = thread_cpu_ns_.get();
}

}  // namespace ramferry::engine
