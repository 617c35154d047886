#include "engine/channel_receiver.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "engine/delta/delta_apply.h"
#include "engine/page_runs.h"
#include "engine/pages/region_file.h"
#include "proto/page_delta.h"

namespace ramferry::engine {

ChannelReceiver::ChannelReceiver(uint32_t index,
                                 std::unique_ptr<channels::Transport> transport,
                                 const RegionTable* regions,
                                 const Config& config, RoundBarrier* barrier,
                                 SessionFailure* failure, ErrorHandler on_error,
                                 std::unique_ptr<proto::Sealer> opener)
    : index_(index),
      transport_(std::move(transport)),
      regions_(regions),
      max_pages_(config.max_pages),
      next_header_size_(config.next_header_size),
      zero_pages_(config.landings.zeros),
      compressed_pages_(config.compressed_pages),
      held_(config.landings.held),
      postcopy_(config.postcopy),
      streams_(config.streams),
      landings_(config.landings),
      opener_(std::move(opener)),
      barrier_(barrier),
      failure_(failure),
      on_error_(std::move(on_error)),
      header_(proto::PacketHeaderBytes(config.max_pages)),
      offsets_(config.max_pages),
      ranges_(proto::MaxZeroRangesPerPacket(config.max_pages)) {}

ChannelReceiver::~ChannelReceiver() { Join(); }

void ChannelReceiver::Start() {
  thread_ = std::thread([this] {
    Run();
    stopped_.Notify();
  });
}

void ChannelReceiver::Join() {
  if (thread_.joinable()) thread_.join();
}

void ChannelReceiver::Run() {
  // The thread's CPU clock is a syscall, not a vDSO call: sampled once a
  // round (and at the end), not once a packet.
  auto sample_cpu = [this] {
    counters_.thread_cpu_ns.Add(base::ThreadCpuNs() -
                                counters_.thread_cpu_ns.get());
  };
  uint64_t sampled_round = round_;
  while (true) {
    absl::StatusOr<Step> step = ReceiveOne();
    if (!step.ok()) {
      sample_cpu();
      // Once the session failed elsewhere, this channel's error is only
      // the echo of the teardown: the first error is the one to report.
      absl::Status annotated =
          base::Annotate(step.status(), absl::StrCat("channel ", index_));
      if (on_error_ != nullptr) {
        on_error_({index_, round_, annotated, connection_failed_});
      } else {
        failure_->Fail(annotated);
      }
      return;
    }
    if (*step == Step::kFinished) {
      sample_cpu();
      return;
    }
    if (round_ != sampled_round) {
      sample_cpu();
      sampled_round = round_;
    }
  }
}

absl::Status ChannelReceiver::ConnectionError(absl::Status s) {
  connection_failed_ = true;
  if (!absl::IsUnavailable(s)) return s;
  return absl::UnavailableError(
      absl::StrFormat("%s before FINISH (after packet %d, in round %d)",
                      s.message(), next_packet_, round_));
}

absl::StatusOr<proto::PacketHeader> ChannelReceiver::NextHeader() {
  if (header_ahead_ == 0) {
    if (absl::Status s =
            transport_->ReadExact(absl::MakeSpan(header_.data(), header_next_),
                                  /*at_packet_boundary=*/true);
        !s.ok()) {
      return ConnectionError(s);
    }
    // All of it: at a boundary the announcement comes from a header-only
    // packet, whose tag checked out before it was acted on.
    header_ahead_ = header_next_;
  }
  const size_t have = header_ahead_;
  current_bytes_ = have;
  header_ahead_ = 0;
  header_next_ = proto::kPacketFixedBytes;
  absl::StatusOr<proto::PacketHeader> h = proto::DecodePacketFixed(
      absl::MakeConstSpan(header_.data(), proto::kPacketFixedBytes), index_,
      max_pages_,
      proto::PacketFeatures{.next_header_size = next_header_size_,
                            .zero_pages = zero_pages_ != nullptr,
                            .compressed_pages = compressed_pages_,
                            .sealed = opener_ != nullptr,
                            .streams = streams_ != nullptr});
  if (!h.ok()) return base::Annotate(h.status(), "bad packet header");
  // An announcement that does not match the header it announced is a
  // lying or broken peer; nothing of the packet is used.
  if (have > proto::kPacketFixedBytes &&
      have != proto::PacketHeaderBytes(h->page_count)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad packet header: packet %d was announced as %d header bytes but "
        "carries %d pages (%d bytes)",
        h->packet_num, have, h->page_count,
        proto::PacketHeaderBytes(h->page_count)));
  }
  if (h->next_header_bytes != 0) header_next_ = h->next_header_bytes;
  return h;
}

absl::StatusOr<ChannelReceiver::Step> ChannelReceiver::ReceiveOne() {
  RAMFERRY_ASSIGN_OR_RETURN(proto::PacketHeader h, NextHeader());
  counters_.header_bytes.Add(proto::PacketHeaderBytes(h.page_count));
  if (h.packet_num != next_packet_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad packet header: packet number %d, expected %d",
                        h.packet_num, next_packet_));
  }
  ++next_packet_;
  if (h.is_stream()) {
    RAMFERRY_RETURN_IF_ERROR(ReceiveStream(h));
    return Step::kContinue;
  }
  if (h.round != round_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad packet header: packet %d is for round %d, channel is in round %d",
        h.packet_num, h.round, round_));
  }
  if ((h.flags & (proto::kPacketFinish | proto::kPacketSync)) != 0 &&
      opener_ != nullptr) {
    RAMFERRY_RETURN_IF_ERROR(OpenHeaderOnly(h));
  }
  if (h.flags & proto::kPacketFinish) {
    counters_.finishes.Add();
    finished_.store(true, std::memory_order_release);
    return Step::kFinished;
  }
  if (h.flags & proto::kPacketSync) {
    counters_.syncs.Add();
    RAMFERRY_ASSIGN_OR_RETURN(bool round_done,
                              barrier_->Arrive(index_, round_, round_pages_));
    // Not done: a channel was lost in this round, and its batches come
    // again on this one (still round_) before another SYNC.
    if (round_done) ++round_;
    round_pages_ = 0;
    return Step::kContinue;
  }
  // Before the switch arms, pages land by plain writes: only while no
  // switch has begun (PagePlacer::BeginLanding). Armed, they are
  // placed, and no such write is made.
  const bool plain = postcopy_ != nullptr && !postcopy_->armed();
  if (plain) {
    RAMFERRY_RETURN_IF_ERROR(postcopy_->BeginLanding());
  }
  absl::Status s = h.is_zero_ranges() ? ReceiveZeroRanges(h) : ReceiveData(h);
  if (plain) postcopy_->EndLanding();
  if (!s.ok()) return s;
  return Step::kContinue;
}

absl::StatusOr<const Region*> ChannelReceiver::ReadHeaderWords(
    const proto::PacketHeader& h) {
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
  const size_t header_bytes = proto::PacketHeaderBytes(h.page_count);
  if (current_bytes_ < header_bytes) {
    if (absl::Status s = transport_->ReadExact(
            absl::MakeSpan(header_.data() + current_bytes_,
                           header_bytes - current_bytes_),
            /*at_packet_boundary=*/false);
        !s.ok()) {
      return ConnectionError(s);
    }
  }
  return region;
}

absl::Status ChannelReceiver::ReceiveData(const proto::PacketHeader& h) {
  RAMFERRY_ASSIGN_OR_RETURN(const Region* region, ReadHeaderWords(h));
  RAMFERRY_ASSIGN_OR_RETURN(absl::Span<uint64_t> offsets,
                            DecodeOffsets(h, *region));
  // Only validated offsets reach this point: every span lies inside the
  // region. The header buffer is free again (the offsets are decoded), so
  // the next header is read into it with the payload, in one call.
  BuildPageRuns(*region, offsets, &iov_, &run_offsets_);
  RAMFERRY_ASSIGN_OR_RETURN(const DataPlan plan, PlanData(h, *region, offsets));
  if (!plan.in_place()) StageRuns(plan.page_bytes);
  if (opener_ != nullptr) {
    BeginOpen(h, proto::PacketHeaderBytes(h.page_count));
  }
  const size_t index = regions_->IndexOf(*region);
  // Before a byte of the payload is read: what the landing may clear.
  landing_epoch_ = landings_.Epoch();
  RAMFERRY_RETURN_IF_ERROR(
      ReadPayload(h, plan.page_bytes, index, *region, plan.in_place()));
  header_ahead_ = HeaderAhead();
  RAMFERRY_ASSIGN_OR_RETURN(const uint64_t zeros,
                            LandData(h, plan, index, *region, offsets));
  counters_.packets.Add();
  counters_.pages.Add(h.page_count);
  counters_.zero_pages.Add(zeros);
  counters_.payload_bytes.Add(h.compressed_bytes != 0
                                  ? h.compressed_bytes
                                  : plan.page_bytes + record_bytes_);
  if (plan.through_file) counters_.file_bytes.Add(plan.page_bytes);
  round_pages_ += h.page_count;
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<uint64_t>> ChannelReceiver::DecodeOffsets(
    const proto::PacketHeader& h, const Region& region) {
  auto offsets = absl::MakeSpan(offsets_.data(), h.page_count);
  if (absl::Status s = proto::DecodePageOffsets(
          h,
          absl::MakeConstSpan(header_.data() + proto::kPacketFixedBytes,
                              sizeof(uint64_t) * h.page_count),
          region.length,
          proto::PacketFeatures{.zero_pages = zero_pages_ != nullptr,
                                .delta_pages = held_ != nullptr},
          offsets);
      !s.ok()) {
    return base::Annotate(s, "bad packet");
  }
  return offsets;
}

absl::StatusOr<ChannelReceiver::DataPlan> ChannelReceiver::PlanData(
    const proto::PacketHeader& h, const Region& region,
    absl::Span<const uint64_t> offsets) {
  DataPlan plan;
  for (const iovec& v : iov_) plan.page_bytes += v.iov_len;
  record_bytes_ =
      held_ != nullptr ? DeltaRecordBytes(offsets, region.page_size) : 0;
  // The records are read aside, into a buffer sized by them, before the
  // packet is authentic: bounded by what a source sends before anything
  // is sized by them (review F8).
  if (record_bytes_ != 0 &&
      (region.page_size > proto::kMaxDeltaPayloadBytes ||
       plan.page_bytes + record_bytes_ > proto::kMaxDeltaPayloadBytes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad packet %d: %d bytes of %d-byte pages and %d bytes of delta "
        "records; a packet with delta records carries at most %d bytes, of "
        "pages of at most that",
        h.packet_num, plan.page_bytes, region.page_size, record_bytes_,
        proto::kMaxDeltaPayloadBytes));
  }
  // Rounds are ordered and the switch comes between them, so a packet is
  // wholly before it or wholly after.
  plan.placing = postcopy_ != nullptr && postcopy_->armed();
  if (plan.placing && record_bytes_ != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad packet %d: delta records after post-copy's switch, where pages "
        "are placed whole",
        h.packet_num));
  }
  // Long runs of a region with a file are staged and written through it:
  // nothing lands until the whole payload is here and authentic.
  plan.through_file =
      !plan.placing &&
      ThroughFile(region, iov_.size(), plan.page_bytes / region.page_size,
                  plan.page_bytes);
  return plan;
}

absl::StatusOr<uint64_t> ChannelReceiver::LandData(
    const proto::PacketHeader& h, const DataPlan& plan, size_t index,
    const Region& region, absl::Span<const uint64_t> offsets) {
  if (plan.placing) {
    RAMFERRY_RETURN_IF_ERROR(PlaceStaged(index, region));
  } else {
    if (plan.through_file) {
      RAMFERRY_RETURN_IF_ERROR(
          WriteRuns(region, run_offsets_, iov_, placing_.data()));
    }
    landings_.Data(index, region.page_size, run_offsets_, iov_, landing_epoch_);
  }
  if (record_bytes_ != 0) {
    RAMFERRY_RETURN_IF_ERROR(ApplyDeltas(h, index, region, offsets));
  }
  landings_.Held(index, region.page_size, run_offsets_, iov_);
  if (zero_pages_ == nullptr) return 0;
  return ApplyZeroPages(index, region, offsets);
}

absl::Status ChannelReceiver::ReadPayload(const proto::PacketHeader& h,
                                          uint64_t page_bytes, size_t index,
                                          const Region& region, bool in_place) {
  // The records follow the pages, into a buffer of their own: they are
  // applied only once the whole payload is here and authentic.
  absl::Span<const iovec> payload = iov_;
  if (record_bytes_ != 0) {
    if (records_.size() < record_bytes_) records_.resize(record_bytes_);
    payload_ = iov_;
    payload_.push_back({records_.data(), record_bytes_});
    payload = payload_;
  }
  if (h.compressed_bytes != 0) {
    return ReadCompressed(h, payload, page_bytes + record_bytes_);
  }
  // Read in place, sealed or not, a payload cut or forged may have
  // written any of its pages: see NoteUnfinished.
  if (absl::Status s = transport_->ReadPayloadAndHeader(
          payload, absl::MakeSpan(header_.data(), HeaderAhead()));
      !s.ok()) {
    if (in_place) NoteUnfinished(index, region);
    return ConnectionError(s);
  }
  if (opener_ != nullptr) {
    if (absl::Status s = FinishOpen(h, payload); !s.ok()) {
      if (in_place) NoteUnfinished(index, region);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ChannelReceiver::ApplyDeltas(const proto::PacketHeader& h,
                                          size_t index, const Region& region,
                                          absl::Span<const uint64_t> entries) {
  const uint64_t start = base::MonotonicNs();
  RAMFERRY_RETURN_IF_ERROR(
      ApplyPacketDeltas(region, index, entries,
                        absl::MakeConstSpan(records_.data(), record_bytes_),
                        *held_, h.packet_num, &delta_runs_, &delta_offsets_));
  landings_.Delta(index, delta_offsets_, delta_runs_);
  counters_.delta_pages.Add(delta_runs_.size());
  counters_.delta_record_bytes.Add(record_bytes_);
  counters_.delta_ns.Add(base::MonotonicNs() - start);
  return absl::OkStatus();
}

void ChannelReceiver::NoteUnfinished(size_t index, const Region& region) {
  landings_.Unfinished(index, region.page_size, run_offsets_, iov_,
                       opener_ != nullptr);
}

absl::Status ChannelReceiver::ReadCompressed(const proto::PacketHeader& h,
                                             absl::Span<const iovec> payload,
                                             uint64_t payload_bytes) {
  // Checked before a byte of it is read: a frame must be smaller than the
  // payload it fills, and that must fit one staging buffer.
  if (payload_bytes > kMaxCompressedPayload ||
      h.compressed_bytes >= payload_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad packet: packet %d says %d compressed bytes for %d bytes of "
        "pages; want fewer than the pages, which may hold at most %d",
        h.packet_num, h.compressed_bytes, payload_bytes,
        kMaxCompressedPayload));
  }
  if (decompressor_ == nullptr) {
    RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<PacketDecompressor> d,
                              PacketDecompressor::Create());
    decompressor_ = std::move(d);
    staging_.resize(proto::kMaxCompressedBytes);
  }
  const iovec frame{staging_.data(), h.compressed_bytes};
  if (absl::Status s = transport_->ReadPayloadAndHeader(
          {&frame, 1}, absl::MakeSpan(header_.data(), HeaderAhead()));
      !s.ok()) {
    return ConnectionError(s);
  }
  if (opener_ != nullptr) {
    if (absl::Status s = FinishOpen(h, {&frame, 1}); !s.ok()) return s;
  }
  const uint64_t start = base::MonotonicNs();
  if (absl::Status s = decompressor_->Decompress(
          absl::MakeConstSpan(staging_.data(), h.compressed_bytes), payload);
      !s.ok()) {
    return base::Annotate(s, absl::StrFormat("bad packet %d", h.packet_num));
  }
  counters_.compress_ns.Add(base::MonotonicNs() - start);
  counters_.compressed_packets.Add();
  counters_.compressed_input_bytes.Add(payload_bytes);
  counters_.compressed_output_bytes.Add(h.compressed_bytes);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ChannelReceiver::ApplyZeroPages(
    size_t index, const Region& region, absl::Span<const uint64_t> offsets) {
  // Offsets come in the order the scheduler took them (ascending within
  // a packet), so adjacent zero pages are applied as one run.
  uint64_t zeros = 0, run_first = 0, run_count = 0;
  for (uint64_t entry : offsets) {
    if (!proto::IsZeroPageEntry(entry)) continue;
    ++zeros;
    const uint64_t page = proto::PageOffsetOf(entry) / region.page_size;
    if (run_count != 0 && run_first + run_count == page) {
      ++run_count;
      continue;
    }
    if (run_count != 0) {
      RAMFERRY_RETURN_IF_ERROR(CountZeroed(index, run_first, run_count));
    }
    run_first = page;
    run_count = 1;
  }
  if (run_count != 0) {
    RAMFERRY_RETURN_IF_ERROR(CountZeroed(index, run_first, run_count));
  }
  return zeros;
}

void ChannelReceiver::StageRuns(uint64_t page_bytes) {
  if (placing_.size() < page_bytes) placing_.resize(page_bytes);
  uint8_t* at = placing_.data();
  for (iovec& v : iov_) {
    v.iov_base = at;
    at += v.iov_len;
  }
}

absl::Status ChannelReceiver::PlaceStaged(size_t index, const Region& region) {
  for (size_t i = 0; i < iov_.size(); ++i) {
    if (absl::Status s =
            postcopy_->Place(index, run_offsets_[i] / region.page_size,
                             static_cast<const uint8_t*>(iov_[i].iov_base),
                             iov_[i].iov_len / region.page_size);
        !s.ok()) {
      return base::Annotate(
          s, absl::StrFormat("post-copy placement, region %d", region.id));
    }
  }
  return absl::OkStatus();
}

absl::Status ChannelReceiver::CountZeroed(size_t index, uint64_t first,
                                          uint64_t count) {
  if (postcopy_ != nullptr && postcopy_->armed()) {
    // Counted as written: after the switch a zero page is placed, not
    // skipped, whatever the region read as before.
    if (absl::Status s = postcopy_->PlaceZero(index, first, count); !s.ok()) {
      return base::Annotate(s, "post-copy zero placement");
    }
    counters_.zero_pages_written.Add(count);
    return absl::OkStatus();
  }
  absl::StatusOr<ZeroPages::Applied> a = zero_pages_->Zero(index, first, count);
  if (!a.ok()) return base::Annotate(a.status(), "zero pages");
  counters_.zero_pages_written.Add(a->written);
  landings_.Zero(index, first, count, landing_epoch_);
  return absl::OkStatus();
}

absl::Status ChannelReceiver::ReceiveZeroRanges(const proto::PacketHeader& h) {
  absl::StatusOr<const Region*> found = ReadHeaderWords(h);
  if (!found.ok()) return found.status();
  const Region* region = *found;
  auto ranges = absl::MakeSpan(ranges_.data(), h.page_count / 2);
  if (absl::Status s = proto::DecodeZeroRanges(
          h,
          absl::MakeConstSpan(header_.data() + proto::kPacketFixedBytes,
                              sizeof(uint64_t) * h.page_count),
          region->length, ranges);
      !s.ok()) {
    return base::Annotate(s, "bad packet");
  }
  if (opener_ != nullptr) {
    RAMFERRY_RETURN_IF_ERROR(OpenHeaderOnly(h));
  }
  landing_epoch_ = landings_.Epoch();
  // Nothing follows the header: the next header is read at the boundary.
  const size_t index = regions_->IndexOf(*region);
  uint64_t pages = 0;
  for (const proto::ZeroRange& r : ranges) {
    const uint64_t first = r.offset / region->page_size;
    const uint64_t count = r.length / region->page_size;
    RAMFERRY_RETURN_IF_ERROR(CountZeroed(index, first, count));
    pages += count;
  }
  counters_.zero_range_packets.Add();
  counters_.untouched_pages.Add(pages);
  round_pages_ += pages;
  return absl::OkStatus();
}

absl::Status ChannelReceiver::ReceiveStream(const proto::PacketHeader& h) {
  const proto::StreamFrame frame = proto::StreamFrameOf(h);
  if (frame.end) {
    if (opener_ != nullptr) RAMFERRY_RETURN_IF_ERROR(OpenHeaderOnly(h));
    return streams_->Take(frame, {});
  }
  // A transport that places payloads itself (rdma) reads nothing into a
  // buffer of ours: streams need one that delivers bytes.
  if ((transport_->capabilities() & channels::kCapRemotePlacement) != 0) {
    return absl::UnimplementedError(
        "a stream packet on a transport that places payloads remotely; "
        "streams go over tcp, tcp-zerocopy or uring-zc");
  }
  // The payload goes aside, not where it belongs: a sink delivers it to
  // its peer only once authentic, and only the part not delivered yet.
  stream_payload_.resize(frame.bytes);
  const iovec payload[] = {{stream_payload_.data(), frame.bytes}};
  if (opener_ != nullptr) BeginOpen(h, proto::kPacketFixedBytes);
  if (absl::Status s = transport_->ReadPayloadAndHeader(
          payload, absl::MakeSpan(header_.data(), HeaderAhead()));
      !s.ok()) {
    return ConnectionError(s);
  }
  header_ahead_ = HeaderAhead();
  if (opener_ != nullptr) RAMFERRY_RETURN_IF_ERROR(FinishOpen(h, payload));
  counters_.packets.Add();
  counters_.payload_bytes.Add(frame.bytes);
  return streams_->Take(frame, stream_payload_);
}

void ChannelReceiver::BeginOpen(const proto::PacketHeader& h,
                                size_t header_bytes) {
  uint8_t* tag = header_.data() + proto::kPacketTagOffset;
  std::memcpy(tag_.data(), tag, tag_.size());
  std::memset(tag, 0, tag_.size());  // as it was when the tag was made
  // The number expected, which DecodePacketFixed's caller has checked the
  // header against: a replayed or reordered packet fails one or the other.
  opener_->Begin(h.packet_num);
  opener_->Associate(absl::MakeConstSpan(header_.data(), header_bytes));
  counters_.sealed_bytes.Add(header_bytes);
}

absl::Status ChannelReceiver::FinishOpen(const proto::PacketHeader& h,
                                         absl::Span<const iovec> body) {
  const uint64_t start = base::MonotonicNs();
  for (const iovec& v : body) {
    opener_->OpenBody(static_cast<uint8_t*>(v.iov_base), v.iov_len);
    counters_.sealed_bytes.Add(v.iov_len);
  }
  const bool authentic = opener_->FinishOpen(tag_);
  counters_.seal_ns.Add(base::MonotonicNs() - start);
  if (!authentic && h.is_stream()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "packet %d (stream %d at offset %d) failed its authentication tag: "
        "the channel was altered, injected, replayed, reordered or spliced "
        "on the way; nothing of it was delivered",
        h.packet_num, h.region_id, h.round));
  }
  if (!authentic) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "packet %d (round %d) failed its authentication tag: the stream was "
        "altered, injected, replayed, reordered or spliced on the way; "
        "nothing of round %d is confirmed",
        h.packet_num, h.round, h.round));
  }
  return absl::OkStatus();
}

absl::Status ChannelReceiver::OpenHeaderOnly(const proto::PacketHeader& h) {
  BeginOpen(h, proto::PacketHeaderBytes(h.page_count));
  return FinishOpen(h, {});
}

void ChannelReceiver::ExportStats(ChannelStats* out) const {
  transport_->stats().ExportTo(out);
  out->channel = index_;
  counters_.ExportTo(out);
}

}  // namespace ramferry::engine
