#include "engine/channel_sender.h"

#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "base/zero_page.h"
#include "engine/page_runs.h"
#include "engine/pages/region_file.h"
#include "engine/stream/carried_stream.h"
#include "proto/packet.h"
#include "proto/page_delta.h"
#include "proto/stream.h"

namespace ramferry::engine {

ChannelSender::ChannelSender(uint32_t index,
                             std::unique_ptr<channels::Transport> transport,
                             absl::Span<const Region> regions,
                             const Config& config, SessionFailure* failure,
                             LossHandler on_loss,
                             std::unique_ptr<proto::Sealer> sealer)
    : index_(index),
      transport_(std::move(transport)),
      regions_(regions),
      ring_(config.ring_entries, config.max_pages),
      failure_(failure),
      on_loss_(std::move(on_loss)),
      announce_next_header_(config.announce_next_header),
      sent_digests_(config.sent_digests),
      memory_frozen_(config.memory_frozen),
      frozen_digests_(config.frozen_digests),
      zero_pages_(config.zero_pages),
      limiter_(config.limiter),
      sealer_(std::move(sealer)),
      compression_(
          (transport_->capabilities() & channels::kCapRemotePlacement) != 0
              ? Compression::kOff
              : config.compression),
      delta_(config.delta),
      delta_allowed_(config.delta_allowed),
      peer_on_this_host_(config.peer_on_this_host) {
  if (config.delta_cache != nullptr && config.delta != Delta::kOff &&
      (transport_->capabilities() & channels::kCapRemotePlacement) == 0) {
    packer_ = std::make_unique<DeltaPacker>(config.delta_cache);
  }
  if (zero_pages_ || packer_ != nullptr) {
    wire_offsets_.resize(config.max_pages);
  }
  if (compression_ != Compression::kOff) {
    absl::StatusOr<std::unique_ptr<PacketCompressor>> c =
        PacketCompressor::Create(config.compression_level);
    // Without a compressor (out of memory) the pages go as they are.
    if (c.ok()) compressor_ = std::move(*c);
  }
}

ChannelSender::~ChannelSender() { Join(); }

void ChannelSender::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ChannelSender::Join() {
  if (thread_.joinable()) thread_.join();
}

void ChannelSender::Run() {
  while (true) {
    const uint32_t n = ring_.Peek(kMaxDrain);
    if (n == 0) {
      // Idle: let completions drain, and the transport check that what it
      // sent is being taken, while waiting for work.
      if (absl::Status s = transport_->Poll(); !s.ok()) {
        Fail(s).IgnoreError();
        return;
      }
      if (!ring_.WaitForWork(transport_->idle_poll_interval())) return;
      continue;
    }
    absl::StatusOr<bool> finished = ProcessBatch(n);
    // This thread's CPU so far (a vDSO call per batch).
    counters_.thread_cpu_ns.Add(base::ThreadCpuNs() -
                                counters_.thread_cpu_ns.get());
    if (!finished.ok() || *finished) return;
  }
}

absl::Status ChannelSender::DrainInline() {
  while (const uint32_t n = ring_.Peek(kMaxDrain)) {
    RAMFERRY_ASSIGN_OR_RETURN(bool finished, ProcessBatch(n));
    if (finished) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ChannelSender::ProcessBatch(uint32_t n) {
  bool finished = false;
  for (uint32_t i = 0; i < n; ++i) {
    const Command& c = ring_.At(i);
    // The last command of the batch may already have a successor queued.
    const Command* next =
        i + 1 < n || ring_.Peek(n + 1) > n ? &ring_.At(i + 1) : nullptr;
    if (absl::Status s = Execute(c, next); !s.ok()) return Fail(s);
    if (c.barrier_seq != 0) ring_.CompleteBarrier(c.barrier_seq);
    if (c.type == CommandType::kFinish) {
      finished = true;
      n = i + 1;
      break;
    }
  }
  // Queued sends go out together: one submission for the whole batch
  // where the transport batches.
  if (absl::Status s = transport_->Submit(); !s.ok()) return Fail(s);
  ring_.Release(n);
  return finished;
}

absl::Status ChannelSender::Fail(const absl::Status& status) {
  absl::Status annotated =
      base::Annotate(status, absl::StrCat("channel ", index_));
  // The loss is queued before the abort wakes the producer, so a producer
  // woken by the abort finds it.
  if (on_loss_ != nullptr && !failure_->failed()) {
    on_loss_(index_, annotated);
  } else {
    failure_->Fail(annotated);
  }
  ring_.Abort();
  return annotated;
}

uint32_t ChannelSender::NextHeaderBytes(const Command* next) const {
  if (!announce_next_header_ || next == nullptr) return 0;
  const bool carries_words = next->type == CommandType::kWrite ||
                             next->type == CommandType::kZeroRanges;
  return static_cast<uint32_t>(
      proto::PacketHeaderBytes(carries_words ? next->page_count : 0));
}

absl::Status ChannelSender::Execute(const Command& c, const Command* next) {
  switch (c.type) {
    case CommandType::kWrite:
      return SendData(c, NextHeaderBytes(next));
    case CommandType::kZeroRanges:
      return SendZeroRanges(c, NextHeaderBytes(next));
    case CommandType::kStream:
    case CommandType::kStreamEnd:
      return SendStream(c, NextHeaderBytes(next));
    case CommandType::kSync:
      // Every page of the round must be out of the kernel's hands before
      // the round counts as sent: flush, then mark the boundary.
      RAMFERRY_RETURN_IF_ERROR(transport_->Flush());
      counters_.syncs.Add();
      return SendMarker(proto::kPacketSync, c.round, NextHeaderBytes(next));
    case CommandType::kFinish:
      RAMFERRY_RETURN_IF_ERROR(transport_->Flush());
      counters_.finishes.Add();
      // Nothing follows FINISH, so it announces nothing.
      RAMFERRY_RETURN_IF_ERROR(SendMarker(proto::kPacketFinish, c.round, 0));
      return transport_->Flush();
  }
  return absl::InternalError("unknown command type");
}

proto::PacketHeader ChannelSender::RegionHeader(uint16_t flags,
                                                const Command& c,
                                                const Region& region,
                                                uint32_t next_header_bytes) {
  proto::PacketHeader h;
  h.flags = flags;
  h.channel = index_;
  h.page_count = c.page_count;
  h.packet_num = packet_num_++;
  h.round = c.round;
  h.region_id = region.id;
  h.page_size = region.page_size;
  h.next_header_bytes = next_header_bytes;
  return h;
}

// One data packet on its way out, as SendData's steps build it.
struct ChannelSender::OutgoingData {
  const Command& c;
  const Region& region;
  // The wire's page entries (zero pages flagged where they are elided).
  absl::Span<const uint64_t> offsets;
  // Frozen memory (Sender::NoteMemoryFrozen) cannot change between the
  // tag and the send: a mac needs no copy to be over the bytes that go.
  bool frozen = false;
  uint32_t zeros = 0;
  // Where the pages are read from: a copy the region's file gave, which
  // is this channel's own (nothing writes it, so it is sealed where it
  // is), or null: the region's memory.
  uint8_t* copy = nullptr;
  // Through the delta cache (PackDelta): the payload is `copy`, and the
  // pages as sent lie in sent_runs_.
  bool delta = false;
  // The payload before compression: the pages that are not zero or,
  // through the delta cache, the whole pages and then the records.
  uint64_t page_bytes = 0;
  size_t compressed = 0;  // the compressed payload's size, or 0
  // When the pages' digests are taken (BuildPayload decides, once).
  DigestPoint digests = DigestPoint::kAfterSend;
  proto::PacketHeader h;              // BeginPacket's, encoded by Protect
  absl::Span<uint8_t> header_buffer;  // the transport's slot for it
  absl::Span<uint8_t> header;         // as encoded
  channels::OutgoingPacket packet;    // what Transmit hands the transport
  // A payload staged apart from iov_ (compressed or sealed), or none.
  iovec staged{nullptr, 0};
  uint64_t start_ns = 0;       // SendData's start
  uint64_t wire_start_ns = 0;  // Protect's: the link's share from here
  // --delta=auto judges the link by the CPU a send takes: the thread's
  // CPU clock at wire_start_ns, or 0 when not judging.
  bool judge_delta = false;
  uint64_t cpu_start_ns = 0;
};

// What the destination will hold for the packet's pages unless a later
// round re-sends them (a page written meanwhile is dirty, so it is sent
// again): the runs, where `pages`, and the zero pages, whatever the memory
// holds now.
template <typename Digests>
void ChannelSender::RecordSent(Digests* digests, const OutgoingData& p,
                               bool pages) {
  if (pages && p.delta) {
    digests->Record(p.c.region, sent_offsets_, sent_runs_);
  } else if (pages) {
    digests->Record(p.c.region, run_offsets_, iov_);
  }
  if (p.zeros == 0) return;
  for (uint64_t entry : p.offsets) {
    if (!proto::IsZeroPageEntry(entry)) continue;
    digests->RecordZero(p.c.region,
                        proto::PageOffsetOf(entry) / p.region.page_size, 1);
  }
}

void ChannelSender::RecordSent(const OutgoingData& p) {
  if (sent_digests_ != nullptr) RecordSent(sent_digests_, p, true);
  if (p.frozen && frozen_digests_ != nullptr) {
    RecordSent(frozen_digests_, p, true);
  }
}

absl::Status ChannelSender::GatherPages(OutgoingData& p) {
  absl::StatusOr<uint8_t*> copy =
      ReadThroughFile(p.region, p.offsets, p.frozen);
  if (!copy.ok()) return copy.status();
  p.copy = *copy;
  if (zero_pages_) {
    p.zeros = FlagZeroPages(p.region, p.offsets, p.copy);
    p.offsets = absl::MakeConstSpan(wire_offsets_.data(), p.c.page_count);
  }
  if (p.copy != nullptr) {
    BuildCopyRuns(p.region.page_size, p.offsets, p.copy, &iov_, &run_offsets_);
  } else {
    BuildPageRuns(p.region, p.offsets, &iov_, &run_offsets_);
  }
  return absl::OkStatus();
}

bool ChannelSender::UseDelta(const Command& c) {
  // A page's first send has no copy to be a delta of: round 0 fills no
  // cache (most pages are sent once, ever).
  // A packet over the bound (none, as the scheduler cuts them) goes whole.
  if (packer_ == nullptr || c.round == 0 ||
      regions_[c.region].page_size != packer_->page_size() ||
      uint64_t{c.page_count} * packer_->page_size() >
          proto::kMaxDeltaPayloadBytes ||
      (delta_allowed_ != nullptr &&
       !delta_allowed_->load(std::memory_order_acquire))) {
    return false;
  }
  return delta_ == Delta::kOn || delta_choice_.Next();
}

absl::Status ChannelSender::PackDelta(OutgoingData& p) {
  const uint64_t start = base::MonotonicNs();
  // kAuto judges the encoder by its CPU, as it judges the sends (a thread
  // preempted meanwhile did not encode any slower), and leaves out the
  // cache fills, a cost paid once per slot; not where the peer shares the
  // CPUs (Config::peer_on_this_host).
  const uint64_t cpu_start = delta_ == Delta::kAuto ? base::ThreadCpuNs() : 0;
  const uint32_t count = p.c.page_count;
  if (zero_pages_) {
    p.zeros = FlagZeroPages(p.region, p.offsets, nullptr);
  } else {
    std::copy(p.offsets.begin(), p.offsets.end(), wire_offsets_.begin());
  }
  auto entries = absl::MakeSpan(wire_offsets_.data(), count);
  absl::StatusOr<uint8_t*> out =
      StagingBuffer(uint64_t{count - p.zeros} * p.region.page_size);
  if (!out.ok()) return out.status();
  UseStagingBuffer();
  const DeltaPacker::Packed packed = packer_->Pack(
      p.region, p.c.region, entries, *out, &sent_runs_, &sent_offsets_);
  p.delta = true;
  p.offsets = entries;
  p.copy = *out;
  p.page_bytes = packed.payload_bytes;
  iov_.clear();
  run_offsets_.clear();
  if (packed.payload_bytes != 0) iov_.push_back({*out, packed.payload_bytes});
  const uint64_t ns = base::MonotonicNs() - start;
  if (delta_ == Delta::kAuto) {
    delta_choice_.Compressed(
        uint64_t{count - p.zeros} * p.region.page_size,
        std::max<uint64_t>(packed.payload_bytes, 1),
        peer_on_this_host_ ? ns : base::ThreadCpuNs() - cpu_start,
        peer_on_this_host_ ? 0 : packed.fill_cpu_ns);
  }
  counters_.delta_ns.Add(ns);
  counters_.delta_pages.Add(packed.delta_pages);
  counters_.delta_record_bytes.Add(packed.record_bytes);
  counters_.delta_cache_hits.Add(packed.cache.hits);
  counters_.delta_cache_misses.Add(packed.cache.misses);
  counters_.delta_cache_evictions.Add(packed.cache.evictions);
  return absl::OkStatus();
}

absl::Status ChannelSender::SealPayload(OutgoingData& p) {
  if (p.digests == DigestPoint::kWhileSealing) {
    RAMFERRY_RETURN_IF_ERROR(Seal(p.header, p.h.packet_num, iov_, nullptr,
                                  frozen_digests_, p.c.region, run_offsets_));
    if (sent_digests_ != nullptr) RecordSent(sent_digests_, p, true);
    if (frozen_digests_ != nullptr) RecordSent(frozen_digests_, p, false);
    counters_.sealed_in_place_bytes.Add(p.page_bytes);
    return absl::OkStatus();
  }
  if (p.copy != nullptr && p.compressed == 0) {
    return Seal(p.header, p.h.packet_num, iov_, nullptr);
  }
  // A compressed frame is sealed where it lies; pages are sealed into a
  // buffer of their own, which is what goes on the wire.
  if (p.compressed == 0) {
    RAMFERRY_ASSIGN_OR_RETURN(uint8_t * out, StagingBuffer(p.page_bytes));
    p.staged = {out, p.page_bytes};
  }
  return Seal(p.header, p.h.packet_num,
              p.compressed != 0 ? absl::MakeConstSpan(&p.staged, 1)
                                : absl::MakeConstSpan(iov_),
              static_cast<uint8_t*>(p.staged.iov_base));
}

absl::Status ChannelSender::SendData(const Command& c,
                                     uint32_t next_header_bytes) {
  OutgoingData p{c, regions_[c.region],
                 absl::MakeConstSpan(c.offsets, c.page_count)};
  RAMFERRY_RETURN_IF_ERROR(BeginPacket(p, next_header_bytes));
  // Pages sent through the cache stay pinned there until the payload is
  // handed to the transport, and are forgotten if it never is.
  bool delivered = false;
  absl::Cleanup finish_delta = [&] {
    if (p.delta) packer_->Finish(delivered, index_, c.round);
  };
  RAMFERRY_RETURN_IF_ERROR(BuildPayload(p));
  RAMFERRY_RETURN_IF_ERROR(Protect(p));
  RAMFERRY_RETURN_IF_ERROR(Transmit(p));
  delivered = true;
  Account(p);
  return absl::OkStatus();
}

absl::Status ChannelSender::BeginPacket(OutgoingData& p,
                                        uint32_t next_header_bytes) {
  p.start_ns = base::MonotonicNs();
  RAMFERRY_ASSIGN_OR_RETURN(p.header_buffer, transport_->AcquireHeader());
  p.h = RegionHeader(proto::kPacketData, p.c, p.region, next_header_bytes);
  p.frozen = Frozen();
  return absl::OkStatus();
}

absl::Status ChannelSender::BuildPayload(OutgoingData& p) {
  if (UseDelta(p.c)) {
    RAMFERRY_RETURN_IF_ERROR(PackDelta(p));
  } else {
    RAMFERRY_RETURN_IF_ERROR(GatherPages(p));
    // Sent as they are: any copies of them in the cache are stale now.
    // (Round 0 caches nothing, so it has nothing to forget.)
    if (packer_ != nullptr && p.c.round != 0) {
      packer_->Forget(p.region, p.c.region, p.offsets);
    }
  }
  if (!p.delta) {
    p.page_bytes = uint64_t{p.c.page_count - p.zeros} * p.region.page_size;
  }
  RAMFERRY_ASSIGN_OR_RETURN(p.compressed, MaybeCompress(p.page_bytes));
  p.digests = DigestPointFor(p);
  // A copy is recorded now, from cache, before a seal may encrypt it.
  if (p.digests == DigestPoint::kFromCopy) RecordSent(p);
  return absl::OkStatus();
}

ChannelSender::DigestPoint ChannelSender::DigestPointFor(
    const OutgoingData& p) const {
  if (p.copy != nullptr) return DigestPoint::kFromCopy;
  // Frozen memory is sealed in place, not copied: the mac's pass over it
  // takes the digests from cache.
  if (sealer_ != nullptr && p.frozen && p.compressed == 0 &&
      sealer_->mode() == proto::SealMode::kMac) {
    return DigestPoint::kWhileSealing;
  }
  return DigestPoint::kAfterSend;
}

absl::Status ChannelSender::Protect(OutgoingData& p) {
  p.wire_start_ns = base::MonotonicNs();
  // --delta=auto tells a link that waits from one that works by the CPU
  // its sends take (a clock_gettime per packet), judged from round 1 on:
  // round 0 sends no delta, and goes exactly as without them.
  p.judge_delta =
      delta_ == Delta::kAuto && packer_ != nullptr && p.c.round != 0;
  p.cpu_start_ns = p.judge_delta ? base::ThreadCpuNs() : 0;
  p.h.compressed_bytes = static_cast<uint32_t>(p.compressed);
  p.header = p.header_buffer.subspan(
      0, proto::EncodePacketHeader(p.h, p.offsets, p.header_buffer));
  p.packet = channels::OutgoingPacket{p.header.size(), p.region.id, iov_,
                                      run_offsets_};
  // A copy is not region memory: no registered buffer holds it.
  if (p.copy != nullptr) p.packet.payload_offsets = {};
  p.staged = {nullptr, p.compressed};
  if (p.compressed != 0) p.staged.iov_base = staging_[next_staging_].data();
  if (sealer_ != nullptr) {
    RAMFERRY_RETURN_IF_ERROR(SealPayload(p));
  }
  if (p.staged.iov_base != nullptr) {
    p.packet.payload = {&p.staged, 1};
    p.packet.payload_offsets = {};
    UseStagingBuffer();
  }
  return absl::OkStatus();
}

uint64_t ChannelSender::OutgoingBytes(const OutgoingData& p) {
  return p.compressed != 0 ? p.compressed : p.page_bytes;
}

absl::Status ChannelSender::Transmit(OutgoingData& p) {
  if (limiter_ != nullptr) {
    RAMFERRY_RETURN_IF_ERROR(
        limiter_->Acquire(p.header.size() + OutgoingBytes(p)));
  }
  return transport_->SendPacket(p.packet);
}

void ChannelSender::Account(const OutgoingData& p) {
  const uint64_t payload_bytes = OutgoingBytes(p);
  // How long the link took this packet's bytes (kAuto judges the link by
  // it): sealing them, waiting for the rate limit, sending.
  if (p.page_bytes != 0) {
    const uint64_t ns = base::MonotonicNs() - p.wire_start_ns;
    if (compression_ == Compression::kAuto) choice_.Sent(payload_bytes, ns);
    if (p.judge_delta) {
      // Preparing the packet (encoding it, filling cache slots) counts as
      // the link's time where the send then waited for it.
      delta_choice_.Sent(payload_bytes, ns,
                         base::ThreadCpuNs() - p.cpu_start_ns,
                         peer_on_this_host_ ? 0 : p.wire_start_ns - p.start_ns);
    }
  }
  // From memory the send path just read.
  if (p.digests == DigestPoint::kAfterSend) RecordSent(p);
  send_latency_.Record(base::MonotonicNs() - p.start_ns);
  counters_.packets.Add();
  counters_.pages.Add(p.c.page_count);
  counters_.zero_pages.Add(p.zeros);
  counters_.payload_bytes.Add(payload_bytes);
  counters_.header_bytes.Add(p.header.size());
}

absl::StatusOr<uint8_t*> ChannelSender::ReadThroughFile(
    const Region& region, absl::Span<const uint64_t> offsets, bool frozen) {
  if (region.fd < 0 ||
      (transport_->capabilities() & channels::kCapRemotePlacement) != 0) {
    return nullptr;
  }
  // A zero-copy transport sends pages from the mapping as they are; the
  // file is worth a read there only where the payload is copied anyway:
  // sealed while the memory changes, or encrypted.
  const bool copied_anyway =
      (transport_->capabilities() & channels::kCapZeroCopy) == 0 ||
      (sealer_ != nullptr &&
       (!frozen || sealer_->mode() == proto::SealMode::kEncrypt));
  if (!copied_anyway) return nullptr;
  BuildPageRuns(region, offsets, &iov_, &run_offsets_);
  const uint64_t bytes = uint64_t{offsets.size()} * region.page_size;
  if (!ThroughFile(region, iov_.size(), offsets.size(), bytes)) return nullptr;
  absl::StatusOr<uint8_t*> buffer = StagingBuffer(bytes);
  if (!buffer.ok()) return buffer.status();
  RAMFERRY_RETURN_IF_ERROR(ReadRuns(region, run_offsets_, iov_, *buffer));
  UseStagingBuffer();
  counters_.file_bytes.Add(bytes);
  return *buffer;
}

absl::StatusOr<size_t> ChannelSender::MaybeCompress(uint64_t payload_bytes) {
  if (compressor_ == nullptr || payload_bytes == 0 ||
      payload_bytes > kMaxCompressedPayload) {
    return 0;
  }
  if (compression_ == Compression::kAuto && !choice_.Next()) return 0;
  absl::StatusOr<uint8_t*> out = StagingBuffer(kMaxCompressedPayload);
  if (!out.ok()) return out.status();
  const uint64_t start = base::MonotonicNs();
  const size_t n =
      compressor_->Compress(iov_, absl::MakeSpan(*out, kMaxCompressedPayload));
  const uint64_t ns = base::MonotonicNs() - start;
  counters_.compress_ns.Add(ns);
  choice_.Compressed(payload_bytes, n != 0 ? n : payload_bytes, ns);
  if (n != 0) {
    counters_.compressed_packets.Add();
    counters_.compressed_input_bytes.Add(payload_bytes);
    counters_.compressed_output_bytes.Add(n);
  }
  return n;
}

absl::StatusOr<uint8_t*> ChannelSender::StagingBuffer(size_t bytes) {
  if (staging_.empty()) staging_.resize(kStagingBuffers);
  // The buffer about to be reused may still be in a zero-copy send.
  if (next_staging_ == 0 && staging_wrapped_ &&
      (transport_->capabilities() & channels::kCapZeroCopy) != 0) {
    RAMFERRY_RETURN_IF_ERROR(transport_->Flush());
  }
  std::vector<uint8_t>& buffer = staging_[next_staging_];
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

void ChannelSender::UseStagingBuffer() {
  next_staging_ = (next_staging_ + 1) % kStagingBuffers;
  staging_wrapped_ |= next_staging_ == 0;
}

// Reads pages the workload may be writing, by design, as the send does: not
// instrumented for TSan, like the workload's own writers. The tag is over
// the copy, never over the pages, so a write meanwhile cannot break it;
// without a copy (`out` null) the memory is frozen.
__attribute__((no_sanitize("thread"))) absl::Status ChannelSender::Seal(
    absl::Span<uint8_t> header, uint64_t packet_num,
    absl::Span<const iovec> payload, uint8_t* out, FrozenDigests* digests,
    size_t region, absl::Span<const uint64_t> run_offsets) {
  const uint64_t start = base::MonotonicNs();
  sealer_->Begin(packet_num);
  sealer_->Associate(header);  // its tag bytes are zero, as encoded
  // In place, a piece at a time, so the digest reads what the tag just
  // read, from cache: one pass over memory for both. Whole pages each.
  size_t done = 0;
  for (size_t i = 0; i < payload.size(); ++i) {
    const iovec& v = payload[i];
    auto* in = static_cast<uint8_t*>(v.iov_base);
    if (out != nullptr) {
      sealer_->SealBody(in, out + done, v.iov_len);
    } else {
      const size_t piece =
          std::max<size_t>(kSealPieceBytes, regions_[region].page_size);
      for (size_t at = 0; at < v.iov_len; at += piece) {
        const size_t n = std::min(piece, v.iov_len - at);
        sealer_->SealBody(in + at, in + at, n);
        if (digests != nullptr) {
          const iovec one{in + at, n};
          const uint64_t offset = run_offsets[i] + at;
          digests->Record(region, {&offset, 1}, {&one, 1});
        }
      }
    }
    done += v.iov_len;
  }
  RAMFERRY_ASSIGN_OR_RETURN(proto::SealTag tag, sealer_->FinishSeal());
  std::memcpy(header.data() + proto::kPacketTagOffset, tag.data(), tag.size());
  counters_.sealed_bytes.Add(header.size() + done);
  counters_.seal_ns.Add(base::MonotonicNs() - start);
  return absl::OkStatus();
}

absl::Status ChannelSender::SealHeader(absl::Span<uint8_t> header,
                                       uint64_t packet_num) {
  if (sealer_ == nullptr) return absl::OkStatus();
  return Seal(header, packet_num, {}, nullptr);
}

// Reads pages the workload may be writing, by design, as the send does: not
// instrumented for TSan, like the workload's own writers.
__attribute__((no_sanitize("thread"))) uint32_t ChannelSender::FlagZeroPages(
    const Region& region, absl::Span<const uint64_t> offsets,
    const uint8_t* copy) {
  // On the channel thread, so the scheduler never reads a page. A page
  // written after its test is dirty again and goes next round, as a page
  // written after a data send does.
  uint32_t zeros = 0;
  const auto* base = static_cast<const uint8_t*>(region.base);
  for (size_t i = 0; i < offsets.size(); ++i) {
    const uint8_t* page =
        copy != nullptr ? copy + i * region.page_size : base + offsets[i];
    const bool zero = base::IsAllZero(page, region.page_size);
    wire_offsets_[i] = offsets[i] | (zero ? proto::kZeroPageFlag : 0);
    zeros += zero ? 1 : 0;
  }
  return zeros;
}

absl::Status ChannelSender::SendZeroRanges(const Command& c,
                                           uint32_t next_header_bytes) {
  const Region& region = regions_[c.region];
  RAMFERRY_ASSIGN_OR_RETURN(absl::Span<uint8_t> header,
                            transport_->AcquireHeader());
  const proto::PacketHeader h =
      RegionHeader(proto::kPacketZeroRanges, c, region, next_header_bytes);
  auto words = absl::MakeConstSpan(c.offsets, c.page_count);
  size_t header_bytes = proto::EncodePacketHeader(h, words, header);
  RAMFERRY_RETURN_IF_ERROR(
      SealHeader(header.subspan(0, header_bytes), h.packet_num));
  if (absl::Status s =
          transport_->SendPacket({header_bytes, region.id, {}, {}});
      !s.ok()) {
    return s;
  }
  uint64_t pages = 0;
  for (size_t i = 0; i + 1 < words.size(); i += 2) {
    const uint64_t first = words[i] / region.page_size;
    const uint64_t count = words[i + 1] / region.page_size;
    if (sent_digests_ != nullptr) {
      sent_digests_->RecordZero(c.region, first, count);
    }
    if (frozen_digests_ != nullptr && Frozen()) {
      frozen_digests_->RecordZero(c.region, first, count);
    }
    pages += count;
  }
  counters_.zero_range_packets.Add();
  counters_.untouched_pages.Add(pages);
  counters_.header_bytes.Add(header_bytes);
  return absl::OkStatus();
}

absl::Status ChannelSender::SendStream(const Command& c,
                                       uint32_t next_header_bytes) {
  const bool end = c.type == CommandType::kStreamEnd;
  RAMFERRY_ASSIGN_OR_RETURN(absl::Span<uint8_t> header,
                            transport_->AcquireHeader());
  proto::PacketHeader h = proto::StreamHeader({.stream = c.region,
                                               .offset = c.round,
                                               .bytes = c.page_count,
                                               .end = end},
                                              index_, packet_num_++);
  h.next_header_bytes = next_header_bytes;
  header = header.first(proto::EncodePacketHeader(h, {}, header));
  const iovec in{const_cast<uint8_t*>(c.bytes), c.page_count};
  iovec out = in;
  // The payload goes from the stream's backlog, whose room the reader
  // reuses once Sent: only a send that copies it at once may read it
  // there. A sealed payload, or one a zero-copy or batching transport
  // reads later, goes from a staging copy (the seal writes it).
  const bool copy =
      sealer_ != nullptr ||
      (transport_->capabilities() &
       (channels::kCapZeroCopy | channels::kCapBatchedSubmit)) != 0;
  if (!end && copy) {
    RAMFERRY_ASSIGN_OR_RETURN(uint8_t * staged, StagingBuffer(in.iov_len));
    UseStagingBuffer();
    if (sealer_ != nullptr) {
      RAMFERRY_RETURN_IF_ERROR(Seal(header, h.packet_num, {&in, 1}, staged));
    } else {
      std::memcpy(staged, in.iov_base, in.iov_len);
    }
    out.iov_base = staged;
    c.stream->Sent(c.round + c.page_count);
  } else {
    RAMFERRY_RETURN_IF_ERROR(SealHeader(header, h.packet_num));
  }
  if (limiter_ != nullptr) {
    RAMFERRY_RETURN_IF_ERROR(limiter_->Acquire(header.size() + h.page_size));
  }
  const absl::Span<const iovec> payload =
      end ? absl::Span<const iovec>() : absl::MakeConstSpan(&out, 1);
  RAMFERRY_RETURN_IF_ERROR(
      transport_->SendPacket({header.size(), c.region, payload, {}}));
  if (end) {
    c.stream->EndSent();
  } else if (!copy) {
    c.stream->Sent(c.round + c.page_count);
  }
  counters_.packets.Add();
  counters_.payload_bytes.Add(h.page_size);
  counters_.header_bytes.Add(header.size());
  return absl::OkStatus();
}

absl::Status ChannelSender::SendMarker(uint16_t flags, uint64_t round,
                                       uint32_t next_header_bytes) {
  RAMFERRY_ASSIGN_OR_RETURN(absl::Span<uint8_t> header,
                            transport_->AcquireHeader());
  proto::PacketHeader h;
  h.flags = flags;
  h.channel = index_;
  h.packet_num = packet_num_++;
  h.round = round;
  h.next_header_bytes = next_header_bytes;
  size_t header_bytes = proto::EncodePacketHeader(h, {}, header);
  counters_.header_bytes.Add(header_bytes);
  RAMFERRY_RETURN_IF_ERROR(
      SealHeader(header.subspan(0, header_bytes), h.packet_num));
  return transport_->SendPacket({header_bytes, 0, {}, {}});
}

void ChannelSender::ExportStats(ChannelStats* out) const {
  transport_->stats().ExportTo(out);
  out->channel = index_;
  counters_.ExportTo(out);
  out->ring_max_occupancy = ring_.max_occupancy();
  out->producer_wait_ns = ring_.producer_wait_ns();
  out->producer_wait_max_ns = ring_.producer_wait_max_ns();
  out->consumer_idle_max_ns = ring_.consumer_idle_max_ns();
  out->send_latency_p50_ns = send_latency_.Quantile(0.5);
  out->send_latency_p99_ns = send_latency_.Quantile(0.99);
}

}  // namespace ramferry::engine
