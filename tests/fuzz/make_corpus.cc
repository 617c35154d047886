// Writes the seed corpus of every fuzz target: valid messages made by the
// real encoders, plus edge cases (each an encoder's output with one field
// pushed just past a bound), so the fuzzer starts from what peers actually
// send instead of discovering magic numbers and lengths by itself.
//
//   fuzz_make_corpus --write tests/fuzz/corpus   regenerate (commit it)
//   fuzz_make_corpus --check tests/fuzz/corpus   fail if it differs
//
// Deterministic: the same build writes the same bytes. Crash reproducers do
// not belong here but in tests/fuzz/regressions/<target>/.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "base/page_size.h"
#include "engine/compress/compressor.h"
#include "proto/auth.h"
#include "proto/control.h"
#include "proto/handshake.h"
#include "proto/packet.h"
#include "proto/postcopy.h"
#include "proto/rdma_control.h"
#include "proto/stream.h"
#include "proto/stream_control.h"
#include "proto/wire.h"
#include "ramferry/transport.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
// target -> file name -> contents.
using Corpus = std::map<std::string, std::map<std::string, Bytes>>;

Bytes Payload(const Bytes& frame) {
  return Bytes(frame.begin() + proto::kFrameHeaderBytes, frame.end());
}

Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// --- data-channel packets ---

proto::PacketHeader Data(uint32_t channel, uint64_t num, uint64_t round,
                         uint32_t region, uint32_t page_size, uint32_t pages) {
  proto::PacketHeader h;
  h.flags = proto::kPacketData;
  h.channel = channel;
  h.page_count = pages;
  h.packet_num = num;
  h.round = round;
  h.region_id = region;
  h.page_size = page_size;
  return h;
}

proto::PacketHeader Marker(uint16_t flags, uint32_t channel, uint64_t num,
                           uint64_t round) {
  proto::PacketHeader h;
  h.flags = flags;
  h.channel = channel;
  h.packet_num = num;
  h.round = round;
  return h;
}

// `h` announcing a next header of `bytes` (kFeatureNextHeaderSize).
proto::PacketHeader Announcing(proto::PacketHeader h, uint32_t bytes) {
  h.next_header_bytes = bytes;
  return h;
}

Bytes Header(const proto::PacketHeader& h, const std::vector<uint64_t>& offs) {
  Bytes out(proto::PacketHeaderBytes(h.page_count));
  proto::EncodePacketHeader(h, offs, absl::MakeSpan(out));
  return out;
}

std::vector<uint64_t> Run(uint32_t pages, uint64_t first, uint64_t step) {
  std::vector<uint64_t> o;
  for (uint32_t i = 0; i < pages; ++i) o.push_back(first + i * step);
  return o;
}

// Header, offsets and the pages, each page filled with a distinct byte.
// A zero page (kFeatureZeroPages) is named but has no bytes in the payload.
Bytes Packet(const proto::PacketHeader& h, const std::vector<uint64_t>& offs) {
  Bytes out = Header(h, offs);
  for (uint32_t i = 0; i < h.page_count; ++i) {
    if (proto::IsZeroPageEntry(offs[i])) continue;
    out.insert(out.end(), h.page_size, static_cast<uint8_t>(0x10 + i));
  }
  return out;
}

// `packet` (one whole packet: header, offsets, payload) sealed as a
// source seals packet `num` under FuzzSealKey: payload encrypted, tag in
// the header.
Bytes Sealed(Bytes packet, uint64_t num) {
  const size_t header =
      proto::PacketHeaderBytes(proto::Load32(packet.data() + 12));
  auto sealer = *proto::Sealer::Create(proto::SealMode::kEncrypt, FuzzSealKey(),
                                       proto::Sealer::Use::kSeal);
  sealer->Begin(num);
  sealer->Associate(absl::MakeConstSpan(packet.data(), header));
  sealer->SealBody(packet.data() + header, packet.data() + header,
                   packet.size() - header);
  const proto::SealTag tag = *sealer->FinishSeal();
  std::copy(tag.begin(), tag.end(), packet.begin() + proto::kPacketTagOffset);
  return packet;
}

// A ZERO_RANGES packet: `words` are (offset, length) pairs.
proto::PacketHeader ZeroRanges(uint32_t channel, uint64_t num, uint64_t round,
                               uint32_t region, uint32_t page_size,
                               uint32_t words) {
  proto::PacketHeader h = Data(channel, num, round, region, page_size, words);
  h.flags = proto::kPacketZeroRanges;
  return h;
}
constexpr uint64_t kZ = proto::kZeroPageFlag;

// `h` saying its payload is a frame of `bytes` (kFeatureCompressedPages).
proto::PacketHeader Compressed(proto::PacketHeader h, uint32_t bytes) {
  h.compressed_bytes = bytes;
  return h;
}

// A real frame of `pages` pages of `page_size` bytes of text, as the
// source's compressor makes it.
Bytes TextFrame(uint32_t pages, uint32_t page_size) {
  Bytes text(size_t{pages} * page_size);
  const char* w = "seed corpus text ";
  for (size_t i = 0; i < text.size(); ++i) text[i] = w[i % 17];
  iovec run{text.data(), text.size()};
  Bytes frame(engine::kMaxCompressedPayload);
  auto c = engine::PacketCompressor::Create(1);
  frame.resize(c.ok() ? (*c)->Compress({&run, 1}, absl::MakeSpan(frame)) : 0);
  return frame;
}

void PacketHeaderSeeds(std::map<std::string, Bytes>* out) {
  auto seed = [&](const char* name, uint8_t cfg, Bytes header) {
    header.insert(header.begin(), cfg);
    (*out)[name] = std::move(header);
  };
  // Config: channel, max pages index (1, 3, 128, 4096), region length
  // index (0, 4 KiB, 12 KiB, 1 MiB, 1 TiB, 2^64-4096, 2^64-1, 512).
  const uint8_t mib = EncodePacketHeaderConfig(0, 2, 3);
  seed("data_1_page", mib, Header(Data(0, 0, 0, 1, 4096, 1), {0}));
  seed("data_3_pages_scattered", EncodePacketHeaderConfig(1, 2, 3),
       Header(Data(1, 7, 2, 1, 4096, 3), {4096 * 9, 0, 4096 * 255}));
  seed("data_128_pages_run", mib,
       Header(Data(0, 1, 0, 3, 4096, 128), Run(128, 0, 4096)));
  seed("data_4096_pages", EncodePacketHeaderConfig(2, 3, 4),
       Header(Data(2, 5, 1, 1, 4096, 4096), Run(4096, 1ull << 30, 4096)));
  seed("data_last_page", mib,
       Header(Data(0, 0, 0, 1, 4096, 1), {(1 << 20) - 4096}));
  seed("data_512_byte_pages", EncodePacketHeaderConfig(3, 1, 7),
       Header(Data(3, 0, 0, 9, 512, 1), {0}));
  seed("data_1g_pages", EncodePacketHeaderConfig(0, 0, 4),
       Header(Data(0, 0, 0, 2, 1u << 30, 1), {1023ull << 30}));
  seed("data_top_of_address_space", EncodePacketHeaderConfig(0, 2, 5),
       Header(Data(0, 0, 0, 1, 4096, 2), {~0ull - 8191, ~0ull - 4095}));
  seed("sync", mib, Header(Marker(proto::kPacketSync, 0, 4, 0), {}));
  seed("finish", mib, Header(Marker(proto::kPacketFinish, 0, 5, 1), {}));
  // Edge cases, each just past one rule.
  seed("edge_offset_one_past_end", mib,
       Header(Data(0, 0, 0, 1, 4096, 1), {1 << 20}));
  seed("edge_offset_unaligned", mib, Header(Data(0, 0, 0, 1, 4096, 1), {2048}));
  seed("edge_offset_wraps", EncodePacketHeaderConfig(0, 2, 6),
       Header(Data(0, 0, 0, 1, 4096, 1), {~0ull - 4095}));
  seed("edge_region_smaller_than_page", EncodePacketHeaderConfig(0, 2, 7),
       Header(Data(0, 0, 0, 1, 4096, 1), {0}));
  seed("edge_region_empty", EncodePacketHeaderConfig(0, 2, 0),
       Header(Data(0, 0, 0, 1, 4096, 1), {0}));
  seed("edge_pages_over_max", EncodePacketHeaderConfig(0, 1, 3),
       Header(Data(0, 0, 0, 1, 4096, 4), Run(4, 0, 4096)));
  seed("edge_wrong_channel", EncodePacketHeaderConfig(1, 2, 3),
       Header(Data(2, 0, 0, 1, 4096, 1), {0}));
  seed("edge_sync_and_finish", mib,
       Header(Marker(proto::kPacketSync | proto::kPacketFinish, 0, 0, 0), {}));
  Bytes bad = Header(Data(0, 0, 0, 1, 4096, 1), {0});
  bad[63] = 1;
  seed("edge_reserved_byte", mib, bad);
  bad = Header(Data(0, 0, 0, 1, 4096, 2), {0, 4096});
  bad.resize(bad.size() - 1);
  seed("edge_offsets_truncated", mib, bad);
  bad.resize(proto::kPacketFixedBytes - 1);
  seed("edge_fixed_truncated", mib, bad);
  // The next header's size, announced (kFeatureNextHeaderSize in bit 7).
  const uint8_t next = EncodePacketHeaderConfig(0, 2, 3, true);
  seed("next_announced", next,
       Header(Announcing(Data(0, 0, 0, 1, 4096, 1), 64 + 8 * 128), {0}));
  seed("next_announced_by_sync", next,
       Header(Announcing(Marker(proto::kPacketSync, 0, 4, 0), 72), {}));
  seed("edge_next_without_capability", mib,
       Header(Announcing(Data(0, 0, 0, 1, 4096, 1), 72), {0}));
  seed("edge_next_after_finish", next,
       Header(Announcing(Marker(proto::kPacketFinish, 0, 5, 1), 64), {}));
  seed("edge_next_not_a_header_size", next,
       Header(Announcing(Data(0, 0, 0, 1, 4096, 1), 68), {0}));
  seed("edge_next_over_max", next,
       Header(Announcing(Data(0, 0, 0, 1, 4096, 1), 64 + 8 * 129), {0}));
  seed("edge_next_below_fixed", next,
       Header(Announcing(Data(0, 0, 0, 1, 4096, 1), 56), {0}));
  // Zero pages and ranges (kFeatureZeroPages: every input is decoded with and
  // without it).
  seed("zero_pages_mixed", mib,
       Header(Data(0, 0, 0, 1, 4096, 3), {0 | kZ, 4096, 4096 * 2 | kZ}));
  seed("zero_ranges", mib,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 4), {0, 4096, 4096 * 8, 4096 * 4}));
  seed("zero_ranges_whole_region", mib,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 2), {0, 1 << 20}));
  seed("edge_zero_flag_unaligned", mib,
       Header(Data(0, 0, 0, 1, 4096, 1), {4096 | 3}));
  seed("edge_zero_page_past_end", mib,
       Header(Data(0, 0, 0, 1, 4096, 1), {(1 << 20) | kZ}));
  seed("edge_zero_ranges_odd_words", mib,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 3), {0, 4096, 8192}));
  seed("edge_zero_ranges_overlap", mib,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 4), {0, 8192, 4096, 4096}));
  seed("edge_zero_ranges_descend", mib,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 4), {8192, 4096, 0, 4096}));
  seed("edge_zero_range_past_end", mib,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 2), {(1 << 20) - 4096, 8192}));
  seed("edge_zero_range_wraps", EncodePacketHeaderConfig(0, 2, 5),
       Header(ZeroRanges(0, 0, 0, 1, 4096, 2), {4096, ~0ull - 4095}));
  seed("edge_zero_range_empty", mib,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 2), {4096, 0}));
  seed("edge_zero_range_unaligned", mib,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 2), {4096, 100}));
  // Compressed payloads (kFeatureCompressedPages, the second pass).
  seed("compressed_data", mib,
       Header(Compressed(Data(0, 0, 0, 1, 4096, 2), 300), {0, 4096}));
  seed("edge_compressed_on_sync", mib,
       Header(Compressed(Marker(proto::kPacketSync, 0, 4, 0), 300), {}));
  seed("edge_compressed_over_max", mib,
       Header(Compressed(Data(0, 0, 0, 1, 4096, 2),
                         proto::kMaxCompressedBytes + 1),
              {0, 4096}));
}

// --- handshake ---

proto::SessionId Session() {
  proto::SessionId s;
  for (int i = 0; i < 16; ++i) s.bytes[i] = static_cast<uint8_t>(0xA0 + i);
  return s;
}

Bytes HelloBytes(const proto::Hello& h) {
  Bytes out(proto::kHelloBytes);
  proto::EncodeHello(h, absl::MakeSpan(out));
  return out;
}

void HelloSeeds(std::map<std::string, Bytes>* out) {
  proto::Hello h;
  h.role = proto::Role::kControl;
  h.session = Session();
  h.channel_count = 4;
  h.capabilities = proto::kKnownFeatures & ~proto::kFeatureSealEncrypt;
  h.max_packet_pages = proto::kDefaultPacketPages;
  h.transport = 1;
  (*out)["control"] = HelloBytes(h);
  h.role = proto::Role::kData;
  h.channel_index = 3;
  h.transport = 2;
  (*out)["data_channel_3_of_4"] = HelloBytes(h);
  h.channel_index = proto::kMaxChannels - 1;
  h.channel_count = proto::kMaxChannels;
  h.max_packet_pages = proto::kMaxPacketPagesLimit;
  h.capabilities = ~0ull;  // unknown bits are offered, never granted
  (*out)["data_max_channels_max_pages"] = HelloBytes(h);
  h.channel_index = 0;
  h.channel_count = 2;
  h.max_packet_pages = 1;
  h.capabilities = proto::kFeatureRdmaPinAll | proto::kFeatureRdmaRegBatch;
  h.transport = static_cast<uint16_t>(TransportKind::kRdma);
  h.rdma_chunk_bytes = 1 << 20;
  (*out)["rdma_1mib_chunks"] = HelloBytes(h);
  h.rdma_chunk_bytes = proto::kMaxRdmaChunkBytes;
  (*out)["rdma_max_chunks"] = HelloBytes(h);
  h.rdma_chunk_bytes = proto::kMaxRdmaChunkBytes + proto::kMinRdmaChunkBytes;
  (*out)["edge_rdma_chunk_not_power_of_two"] = HelloBytes(h);
  h.transport = 1;
  h.rdma_chunk_bytes = 4096;
  (*out)["edge_chunk_bytes_without_rdma"] = HelloBytes(h);
  h.rdma_chunk_bytes = 0;
  h.channel_index = 2;
  (*out)["edge_index_not_below_count"] = HelloBytes(h);
  h.channel_index = 0;
  h.max_packet_pages = proto::kMaxPacketPagesLimit + 1;
  (*out)["edge_max_pages_over_limit"] = HelloBytes(h);
  h.max_packet_pages = 8;
  h.session = {};
  (*out)["edge_zero_session"] = HelloBytes(h);
  h.session = Session();
  Bytes b;
  h.auth = proto::kAuthHmacSha256;
  (*out)["keyed"] = HelloBytes(h);
  b = HelloBytes(h);
  b[46] = 2;
  (*out)["edge_auth_method_unknown"] = b;
  h.auth = proto::kAuthNone;
  b = HelloBytes(h);
  b[5] = proto::kProtocolVersion + 1;
  (*out)["edge_version_next"] = b;
  b[5] = proto::kProtocolVersion - 1;
  (*out)["edge_version_previous"] = b;
  b = HelloBytes(h);
  b.resize(proto::kHelloBytes - 1);
  (*out)["edge_truncated"] = b;
}

Bytes ReplyBytes(const proto::HelloReply& r) {
  Bytes out(proto::kHelloReplyBytes);
  proto::EncodeHelloReply(r, absl::MakeSpan(out));
  return out;
}

void HelloReplySeeds(std::map<std::string, Bytes>* out) {
  proto::HelloReply r;
  r.capabilities = proto::kFeatureVerify;
  (*out)["accepted"] = ReplyBytes(r);
  r.status = static_cast<uint16_t>(absl::StatusCode::kFailedPrecondition);
  r.capabilities = 0;
  r.reason = "channel 2 of session a0a1 is already connected";
  (*out)["refused"] = ReplyBytes(r);
  r.status = static_cast<uint16_t>(absl::StatusCode::kUnauthenticated);
  r.reason = std::string(proto::kHelloReasonBytes - 1, 'r');
  (*out)["refused_longest_reason"] = ReplyBytes(r);
  Bytes b = ReplyBytes(r);
  b[proto::kHelloReplyBytes - 1] = 'r';
  (*out)["edge_reason_unterminated"] = b;
  b = ReplyBytes(r);
  b[16] = 0x01;
  b[17] = 0xff;
  (*out)["edge_reason_unprintable"] = b;
  r.status = static_cast<uint16_t>(absl::StatusCode::kUnauthenticated) + 1;
  (*out)["edge_status_not_a_code"] = ReplyBytes(r);
  b = ReplyBytes(r);
  b.resize(proto::kHelloReplyBytes - 1);
  (*out)["edge_truncated"] = b;
}

// --- authentication (first byte: 0 challenge, 1 proof) ---

void AuthSeeds(std::map<std::string, Bytes>* out) {
  proto::AuthChallenge c;
  for (size_t i = 0; i < c.nonce.size(); ++i) c.nonce[i] = uint8_t(0x30 + i);
  for (size_t i = 0; i < c.proof.size(); ++i) c.proof[i] = uint8_t(0xC0 + i);
  Bytes b(1 + proto::kAuthChallengeBytes, 0);
  proto::EncodeAuthChallenge(c, absl::MakeSpan(b).subspan(1));
  (*out)["challenge"] = b;
  Bytes e = b;
  e[1 + 6] = 2;
  (*out)["edge_challenge_method_unknown"] = e;
  e = b;
  e[1 + 56] = 1;
  (*out)["edge_challenge_reserved"] = e;
  e = b;
  e.pop_back();
  (*out)["edge_challenge_truncated"] = e;

  proto::AuthProof p;
  p.proof = c.proof;
  b.assign(1 + proto::kAuthProofBytes, 0);
  b[0] = 1;
  proto::EncodeAuthProof(p, absl::MakeSpan(b).subspan(1));
  (*out)["proof"] = b;
  e = b;
  e[1] ^= 1;
  (*out)["edge_proof_magic"] = e;
  e = b;
  e[1 + 40] = 1;
  (*out)["edge_proof_reserved"] = e;
  e = b;
  e.pop_back();
  (*out)["edge_proof_truncated"] = e;
}

// --- control messages ---

std::vector<proto::RegionInfo> Regions(uint32_t n) {
  std::vector<proto::RegionInfo> t;
  for (uint32_t i = 0; i < n; ++i) {
    t.push_back(
        {i + 1, 4096, uint64_t{4096} * (i + 1), "ram-" + std::to_string(i)});
  }
  return t;
}

void ControlSeeds(Corpus* c) {
  auto& frame = (*c)["control_frame"];
  auto& table = (*c)["region_table"];
  auto& reply = (*c)["region_reply"];
  auto& done = (*c)["round_done"];
  auto& error = (*c)["error_message"];
  auto& empty = (*c)["empty_message"];
  auto& vreq = (*c)["verify_request"];
  auto& vres = (*c)["verify_result"];
  auto& loss = (*c)["channel_loss"];

  // Region tables.
  Bytes t1 = proto::EncodeRegionTable(Regions(1));
  table["one_region"] = Payload(t1);
  frame["region_table"] = t1;
  std::vector<proto::RegionInfo> mixed = {
      {7, 512, 512 * 3, "small-pages"},
      {0xffffffffu, proto::kMaxPageSize, uint64_t{proto::kMaxPageSize} * 4,
       std::string(proto::kMaxRegionNameBytes, 'n')},
      {0, 4096, 1ull << 40, ""},
  };
  table["mixed_regions"] = Payload(proto::EncodeRegionTable(mixed));
  table["sixteen_regions"] = Payload(proto::EncodeRegionTable(Regions(16)));
  table["edge_duplicate_id"] = Payload(
      proto::EncodeRegionTable({{1, 4096, 4096, "a"}, {1, 4096, 8192, "b"}}));
  table["edge_length_not_page_multiple"] =
      Payload(proto::EncodeRegionTable({{1, 4096, 4097, "a"}}));
  table["edge_page_size_not_power_of_two"] =
      Payload(proto::EncodeRegionTable({{1, 3 * 1024, 3 * 1024, "a"}}));
  table["edge_name_unprintable"] =
      Payload(proto::EncodeRegionTable({{1, 4096, 4096, "a\nb"}}));
  table["no_regions_streams"] = Payload(proto::EncodeRegionTable({}));
  // A session of streams' control messages (proto/stream_control.h).
  frame["stream_open"] = proto::EncodeStreamOpen(0);
  frame["stream_opened"] = proto::EncodeStreamOpened(255);
  const uint8_t back[] = {'Q', 'E', 'V', 'M'};
  frame["stream_back"] = proto::EncodeStreamBack(1, 4096, back);
  frame["stream_back_end"] = proto::EncodeStreamBackEnd({2, 1 << 20});
  frame["stream_ack"] = proto::EncodeStreamAck({3, 5 << 20, true});
  Bytes b = Payload(t1);
  b.push_back(0);
  table["edge_trailing_byte"] = b;

  // Region replies.
  Bytes r = proto::EncodeRegionReply({true, ""});
  reply["accepted"] = Payload(r);
  frame["region_reply"] = r;
  reply["refused"] = Payload(proto::EncodeRegionReply(
      {false, "region 1: source has 8192 bytes, destination 4096"}));
  reply["refused_longest_reason"] = Payload(proto::EncodeRegionReply(
      {false, std::string(proto::kMaxErrorTextBytes, 'x')}));
  b = Payload(r);
  b[0] = 2;
  reply["edge_accepted_flag_2"] = b;
  reply["edge_reason_unprintable"] =
      Payload(proto::EncodeRegionReply({false, "tab\there"}));

  // Round done.
  Bytes d = proto::EncodeRoundDone({3, 262144});
  done["round_3"] = Payload(d);
  frame["round_done"] = d;
  done["max_values"] = Payload(proto::EncodeRoundDone({~0ull, ~0ull}));

  // Errors.
  Bytes e = proto::EncodeError(proto::MakeErrorMessage(
      absl::InvalidArgumentError("bad packet header: packet number 9"), 2));
  error["invalid_argument_channel_2"] = Payload(e);
  frame["error"] = e;
  error["no_channel"] = Payload(proto::EncodeError(
      proto::MakeErrorMessage(absl::UnavailableError("closed"))));
  error["longest_text"] = Payload(proto::EncodeError(proto::MakeErrorMessage(
      absl::DataLossError(std::string(proto::kMaxErrorTextBytes, 'e')))));
  error["text_unprintable"] = Payload(proto::EncodeError(
      proto::MakeErrorMessage(absl::InternalError("line\nbreak\x7f"), 0)));
  proto::ErrorMessage em;
  em.code = 0;
  em.text = "ok is not an error";
  error["edge_code_ok"] = Payload(proto::EncodeError(em));
  em.code = static_cast<uint16_t>(absl::StatusCode::kUnauthenticated) + 1;
  error["edge_code_unknown"] = Payload(proto::EncodeError(em));

  // FINISH, FINISH_ACK.
  frame["finish"] = proto::EncodeFinish();
  frame["finish_ack"] = proto::EncodeFinishAck();
  empty["finish"] = {0};
  empty["finish_ack"] = {1};
  frame["heartbeat"] = proto::EncodeHeartbeat();
  empty["heartbeat"] = {2};
  empty["edge_finish_with_payload"] = {0, 0};
  empty["edge_heartbeat_with_payload"] = {2, 0};

  // Verify.
  Bytes q = proto::EncodeVerifyRequest({1, 0, 1024});
  vreq["first_1024_pages"] = Payload(q);
  frame["verify_request"] = q;
  vreq["max_pages"] = Payload(
      proto::EncodeVerifyRequest({0xffffffffu, ~0ull, proto::kMaxVerifyPages}));
  vreq["edge_zero_pages"] = Payload(proto::EncodeVerifyRequest({1, 0, 0}));
  vreq["edge_pages_over_max"] =
      Payload(proto::EncodeVerifyRequest({1, 0, proto::kMaxVerifyPages + 1}));
  proto::VerifyResult v{1, 64, {}};
  for (uint64_t i = 0; i < 16; ++i) {
    v.page_digests.push_back(0x9E3779B97F4A7C15ull * (i + 1));
  }
  Bytes vr = proto::EncodeVerifyResult(v);
  vres["sixteen_digests"] = Payload(vr);
  frame["verify_result"] = vr;
  vres["no_digests"] = Payload(proto::EncodeVerifyResult({2, 0, {}}));
  b = Payload(vr);
  b.resize(b.size() - 8);
  vres["edge_count_exceeds_digests"] = b;

  // Channel loss: the first byte picks CHANNEL_LOST, CHANNEL_GONE or
  // CHANNEL_GONE_ACK (see channel_loss_fuzzer.cc).
  auto pick = [](uint8_t which, const Bytes& frame) {
    return Cat({{which}, Payload(frame)});
  };
  proto::ChannelLoss cl{2, 5,
                        static_cast<uint16_t>(absl::StatusCode::kUnavailable),
                        "connection reset by peer"};
  Bytes lost = proto::EncodeChannelLost(cl);
  loss["lost_channel_2"] = pick(0, lost);
  frame["channel_lost"] = lost;
  Bytes gone = proto::EncodeChannelGone(cl);
  loss["gone_channel_2"] = pick(1, gone);
  frame["channel_gone"] = gone;
  Bytes ack = proto::EncodeChannelGoneAck({2, 6});
  loss["gone_ack_channel_2"] = pick(2, ack);
  frame["channel_gone_ack"] = ack;
  loss["gone_longest_text"] =
      pick(1, proto::EncodeChannelGone(
                  {0, ~0ull, static_cast<uint16_t>(absl::StatusCode::kInternal),
                   std::string(proto::kMaxErrorTextBytes, 't')}));
  loss["lost_text_unprintable"] =
      pick(0, proto::EncodeChannelLost(
                  {1, 0, static_cast<uint16_t>(absl::StatusCode::kDataLoss),
                   "line\nbreak\x7f"}));
  proto::ChannelLoss bad = cl;
  bad.code = 0;
  loss["edge_lost_code_ok"] = pick(0, proto::EncodeChannelLost(bad));
  bad = cl;
  bad.channel = proto::kNoChannel;
  loss["edge_gone_no_channel"] = pick(1, proto::EncodeChannelGone(bad));
  loss["edge_ack_no_channel"] =
      pick(2, proto::EncodeChannelGoneAck({proto::kNoChannel, 0}));
  b = pick(2, ack);
  b.push_back(0);
  loss["edge_ack_trailing_byte"] = b;
  b = pick(0, lost);
  b.resize(b.size() - 1);
  loss["edge_lost_text_truncated"] = b;

  // Frame headers past their bounds, and an unknown type.
  auto head = [](uint32_t type, uint32_t length) {
    Bytes h(proto::kFrameHeaderBytes);
    proto::Store32(h.data(), type);
    proto::Store32(h.data() + 4, length);
    return h;
  };
  frame["edge_unknown_type"] =
      head(static_cast<uint32_t>(proto::ControlType::kPostcopyComplete) + 1, 0);
  frame["edge_heartbeat_with_payload"] = Cat(
      {head(static_cast<uint32_t>(proto::ControlType::kHeartbeat), 1), {0}});
  frame["edge_round_done_over_bound"] =
      Cat({head(static_cast<uint32_t>(proto::ControlType::kRoundDone), 17),
           Bytes(17, 0)});
  frame["edge_finish_with_payload"] =
      Cat({head(static_cast<uint32_t>(proto::ControlType::kFinish), 1), {0}});
  frame["edge_payload_missing"] =
      head(static_cast<uint32_t>(proto::ControlType::kVerifyRequest), 16);
}

// --- RDMA control ---

void RdmaControlSeeds(std::map<std::string, Bytes>* out) {
  proto::RdmaControl c;
  c.type = proto::RdmaControlType::kRegionKeys;
  c.region_keys = {{1, 0x1234, 0x7f0000000000ull, 1ull << 30},
                   {2, 0x5678, 0x7f0040000000ull, 4096}};
  (*out)["region_keys"] = proto::EncodeRdmaControl(c);
  c.region_keys.assign(proto::kMaxRdmaControlEntries, {9, 1, 2, 3});
  (*out)["region_keys_max"] = proto::EncodeRdmaControl(c);
  c.region_keys.clear();
  c.type = proto::RdmaControlType::kRegisterRequest;
  c.chunks = {{1, 0}};
  (*out)["register_request"] = proto::EncodeRdmaControl(c);
  c.chunks = {{1, 0}, {1, 1}, {2, 0xffffffffu}};
  (*out)["register_request_batch"] = proto::EncodeRdmaControl(c);
  c.type = proto::RdmaControlType::kCompress;
  (*out)["compress"] = proto::EncodeRdmaControl(c);
  c.chunks.assign(proto::kMaxRdmaControlEntries + 1, {1, 1});
  (*out)["edge_compress_over_max"] = proto::EncodeRdmaControl(c);
  c.chunks.clear();
  (*out)["edge_compress_empty"] = proto::EncodeRdmaControl(c);
  c.type = proto::RdmaControlType::kRegisterResult;
  c.results = {{0xabcd, 0x7f0000001000ull}, {0xef01, 0x7f0000002000ull}};
  Bytes b = proto::EncodeRdmaControl(c);
  (*out)["register_result"] = b;
  b[8 + 4] = 1;
  (*out)["edge_result_reserved_word"] = b;
  b = proto::EncodeRdmaControl(c);
  b[5] = 6;
  (*out)["edge_unknown_type"] = b;
  b = proto::EncodeRdmaControl(c);
  b.pop_back();
  (*out)["edge_truncated_entry"] = b;
  c = {};
  c.type = proto::RdmaControlType::kCredits;
  c.credits = 256;
  b = proto::EncodeRdmaControl(c);
  (*out)["credits"] = b;
  b[8 + 3] = 0;
  b[8 + 2] = 0;
  b[8 + 1] = 0;
  (*out)["edge_credits_none"] = b;
  b = proto::EncodeRdmaControl(c);
  b[8 + 7] = 1;
  (*out)["edge_credits_reserved_word"] = b;
  b = proto::EncodeRdmaControl(c);
  b[7] = 2;  // count 2: one grant a message
  b.insert(b.end(), b.begin() + 8, b.end());
  (*out)["edge_credits_two"] = b;
}

// --- the receiver's stream ---

// --- post-copy missing set (decoded against FuzzMissingPagesTable) ---

Bytes Missing(const proto::MissingPages& m) {
  Bytes out;
  proto::EncodeMissingPages(m, &out);
  return out;
}

// A payload with raw fields, for what the encoder never makes.
Bytes RawMissing(uint32_t region, uint32_t flags, uint32_t count,
                 std::initializer_list<uint64_t> words) {
  Bytes out;
  proto::WireWriter w(&out);
  w.U32(region);
  w.U32(flags);
  w.U32(count);
  for (uint64_t x : words) w.U64(x);
  return out;
}

void MissingPagesSeeds(std::map<std::string, Bytes>* out) {
  auto& c = *out;
  const uint64_t big = uint64_t{1} << 28;  // region 3's pages
  c["one_range"] = Missing({1, true, {{1, 2}}});
  c["whole_region"] = Missing({2, true, {{0, 8}}});
  c["top_region_id"] = Missing({0xfffffffeu, true, {{1, 1}}});
  c["big_region_ranges"] =
      Missing({3, false, {{0, 1}, {2, 1000}, {big - 1, 1}}});
  c["empty_last"] = Missing({1, true, {}});
  c["edge_empty_not_last"] = RawMissing(1, 0, 0, {});
  c["edge_unknown_flag"] = RawMissing(1, 3, 1, {0, 1});
  c["edge_unknown_region"] = RawMissing(4, 1, 1, {0, 1});
  c["edge_empty_range"] = RawMissing(1, 1, 1, {0, 0});
  c["edge_past_end"] = RawMissing(1, 1, 1, {3, 2});
  c["edge_end_wraps"] = RawMissing(3, 1, 1, {5, ~uint64_t{0} - 4});
  c["edge_overlap"] = RawMissing(2, 1, 2, {0, 3, 2, 1});
  c["edge_adjacent"] = RawMissing(2, 1, 2, {0, 3, 3, 1});
  c["edge_count_over_bound"] =
      RawMissing(3, 1, proto::kMaxMissingRanges + 1, {0, 1});
  c["edge_count_past_payload"] = RawMissing(3, 1, 2, {0, 1});
  Bytes cut = Missing({3, true, {{7, 9}}});
  cut.pop_back();
  c["edge_truncated"] = cut;
}

// --- post-copy page requests and answers (FuzzMissingPagesTable) ---

Bytes RawRequest(uint32_t region, uint32_t count,
                 std::initializer_list<uint64_t> pages) {
  Bytes out;
  proto::WireWriter w(&out);
  w.U32(region);
  w.U32(count);
  for (uint64_t p : pages) w.U64(p);
  return out;
}

void PageRequestSeeds(std::map<std::string, Bytes>* out) {
  auto& c = *out;
  const uint64_t big = uint64_t{1} << 28;  // region 3's pages
  c["one_page"] = Payload(proto::EncodePageRequest({1, {2}}));
  c["whole_region"] = Payload(proto::EncodePageRequest({1, {0, 1, 2, 3}}));
  c["big_region_edges"] =
      Payload(proto::EncodePageRequest({3, {0, 7, big - 1}}));
  proto::PageRequest most{3, {}};
  for (uint64_t i = 0; i < proto::kMaxPageRequestPages; ++i) {
    most.pages.push_back(3 * i);
  }
  c["most_pages"] = Payload(proto::EncodePageRequest(most));
  c["edge_empty"] = RawRequest(1, 0, {});
  c["edge_count_over_bound"] =
      RawRequest(3, proto::kMaxPageRequestPages + 1, {0});
  c["edge_count_past_payload"] = RawRequest(1, 2, {0});
  c["edge_past_end"] = RawRequest(1, 1, {4});
  c["edge_max_page"] = RawRequest(3, 1, {~uint64_t{0}});
  c["edge_repeated"] = RawRequest(1, 2, {1, 1});
  c["edge_descending"] = RawRequest(1, 2, {2, 1});
  c["edge_unknown_region"] = RawRequest(4, 1, {0});
  c["edge_small_pages"] = RawRequest(2, 1, {0});
  c["edge_large_pages"] = RawRequest(0xfffffffeu, 1, {0});
  Bytes cut = Payload(proto::EncodePageRequest({1, {0, 3}}));
  cut.pop_back();
  c["edge_truncated"] = cut;
}

Bytes RawData(uint32_t region, uint32_t flags, uint64_t first, uint32_t count,
              uint32_t reserved, size_t bytes) {
  Bytes out;
  proto::WireWriter w(&out);
  w.U32(region);
  w.U32(flags);
  w.U64(first);
  w.U32(count);
  w.U32(reserved);
  out.resize(out.size() + bytes, 0xA5);
  return out;
}

void PageDataSeeds(std::map<std::string, Bytes>* out) {
  auto& c = *out;
  const uint64_t big = uint64_t{1} << 28;
  Bytes pages(4 * base::kSmallPageSize);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<uint8_t>(i);
  c["one_page"] = Payload(proto::EncodePageData(1, 3, 1, pages.data()));
  c["whole_region"] = Payload(proto::EncodePageData(1, 0, 4, pages.data()));
  c["zero_run"] = Payload(proto::EncodePageData(3, big - 64, 64, nullptr));
  c["zero_one"] = Payload(proto::EncodePageData(1, 0, 1, nullptr));
  const size_t page = base::kSmallPageSize;
  c["edge_reserved"] = RawData(1, 0, 0, 1, 1, page);
  c["edge_unknown_flag"] = RawData(1, 2, 0, 1, 0, page);
  c["edge_zero_with_bytes"] = RawData(1, proto::kPageDataZero, 0, 1, 0, page);
  c["edge_no_pages"] = RawData(1, proto::kPageDataZero, 0, 0, 0, 0);
  c["edge_count_over_bound"] =
      RawData(3, proto::kPageDataZero, 0, proto::kMaxPageDataPages + 1, 0, 0);
  c["edge_past_end"] = RawData(1, proto::kPageDataZero, 3, 2, 0, 0);
  c["edge_first_past_end"] = RawData(1, proto::kPageDataZero, 4, 1, 0, 0);
  c["edge_end_wraps"] =
      RawData(3, proto::kPageDataZero, ~uint64_t{0} - 1, 4, 0, 0);
  c["edge_short_bytes"] = RawData(1, 0, 0, 1, 0, page - 1);
  c["edge_long_bytes"] = RawData(1, 0, 0, 1, 0, page + 1);
  c["edge_unknown_region"] = RawData(4, proto::kPageDataZero, 0, 1, 0, 0);
  c["edge_small_pages"] = RawData(2, proto::kPageDataZero, 0, 1, 0, 0);
  c["edge_truncated_head"] = RawData(1, proto::kPageDataZero, 0, 1, 0, 0);
  c["edge_truncated_head"].pop_back();
}

// missing_pages_sequence input: messages, each a u16 length and a
// MISSING_PAGES payload.
Bytes Sequence(std::initializer_list<Bytes> messages) {
  Bytes out;
  for (const Bytes& m : messages) {
    out.push_back(static_cast<uint8_t>(m.size() >> 8));
    out.push_back(static_cast<uint8_t>(m.size()));
    out.insert(out.end(), m.begin(), m.end());
  }
  return out;
}

void MissingPagesSequenceSeeds(std::map<std::string, Bytes>* out) {
  auto& c = *out;
  const uint64_t big = uint64_t{1} << 28;
  const Bytes all_last = Cat({Sequence({Missing({2, true, {}})}),
                              Sequence({Missing({0xfffffffeu, true, {}})})});
  c["complete"] = Cat({Sequence({Missing({1, true, {{0, 1}, {2, 2}}}),
                                 Missing({3, false, {{0, 5}}}),
                                 Missing({3, true, {{6, 1}, {big - 1, 1}}})}),
                       all_last});
  c["all_empty"] = Cat(
      {Sequence({Missing({1, true, {}}), Missing({3, true, {}})}), all_last});
  c["edge_overlap_across"] =
      Sequence({Missing({3, false, {{10, 5}}}), Missing({3, true, {{12, 1}}})});
  c["edge_adjacent_across"] =
      Sequence({Missing({3, false, {{10, 5}}}), Missing({3, true, {{15, 1}}})});
  c["edge_after_last"] =
      Sequence({Missing({1, true, {{0, 1}}}), Missing({1, true, {{2, 1}}})});
  c["edge_refused_then_right"] =
      Sequence({Missing({3, false, {{10, 5}}}), Missing({3, false, {{11, 1}}}),
                Missing({3, true, {{16, 1}}})});
  c["edge_cut_short"] = Sequence({Missing({1, true, {{0, 4}}})});
  c["edge_cut_short"].pop_back();
}

void ChannelReceiverSeeds(std::map<std::string, Bytes>* out) {
  // Regions (kFuzzRegions): 1 = 4 x 4096, 2 = 8 x 512, 0xfffffffe = 2 x 8192.
  const uint32_t big = kFuzzRegions[2].id;
  auto seed = [&](const char* name, uint8_t cfg, Bytes stream) {
    stream.insert(stream.begin(), cfg);
    (*out)[name] = std::move(stream);
  };
  const uint8_t ch0 = EncodeReceiverConfig(0, 2);  // channel 0, 128 pages
  const uint8_t ch3 = EncodeReceiverConfig(3, 1);  // channel 3, 3 pages

  // Deltas (bit 5 negotiates them with zero pages): page 0 lands whole in
  // round 0 and changes by a delta in round 1, after page 1's whole bytes;
  // then a delta for a page never received, and one that runs past its
  // page.
  const uint8_t deltas = EncodeReceiverConfig(0, 2, false, true);
  const Bytes record = {0, 1, 0xff};
  seed("delta_applied", deltas,
       Cat({Packet(Data(0, 0, 0, 1, 4096, 1), {0}),
            Header(Marker(proto::kPacketSync, 0, 1, 0), {}),
            Header(Data(0, 2, 1, 1, 4096, 2),
                   {proto::DeltaPageEntry(0, 3), 4096}),
            Bytes(4096, 0x21), record,
            Header(Marker(proto::kPacketSync, 0, 3, 1), {}),
            Header(Marker(proto::kPacketFinish, 0, 4, 2), {})}));
  seed("edge_delta_never_received", deltas,
       Cat({Header(Data(0, 0, 0, 1, 4096, 1),
                   {proto::DeltaPageEntry(4096 * 2, 3)}),
            record}));
  seed("edge_delta_past_page", deltas,
       Cat({Packet(Data(0, 0, 0, 1, 4096, 1), {0}),
            Header(Marker(proto::kPacketSync, 0, 1, 0), {}),
            Header(Data(0, 2, 1, 1, 4096, 1), {proto::DeltaPageEntry(0, 5)}),
            Bytes{0xff, 0x1f, 2, 1, 2}}));
  // Streams (on with zero pages): a stream packet, a page, a resend that
  // overlaps the first, and the stream's end, outside round 0.
  auto stream = [](proto::StreamFrame f, uint64_t num) {
    return Header(proto::StreamHeader(f, 0, num), {});
  };
  seed(
      "streams_beside_pages", deltas,
      Cat({stream({.stream = 0, .offset = 0, .bytes = 5}, 0),
           Bytes{1, 2, 3, 4, 5}, Packet(Data(0, 1, 0, 1, 4096, 1), {0}),
           stream({.stream = 0, .offset = 3, .bytes = 4}, 2), Bytes{4, 5, 6, 7},
           stream({.stream = 0, .offset = 7, .end = true}, 3),
           Header(Marker(proto::kPacketSync, 0, 4, 0), {}),
           Header(Marker(proto::kPacketFinish, 0, 5, 1), {})}));
  seed("two_rounds", ch0,
       Cat({Packet(Data(0, 0, 0, 1, 4096, 2), {0, 4096 * 2}),
            Packet(Data(0, 1, 0, 2, 512, 3), {512 * 7, 0, 512}),
            Header(Marker(proto::kPacketSync, 0, 2, 0), {}),
            Packet(Data(0, 3, 1, big, 8192, 1), {8192}),
            Header(Marker(proto::kPacketSync, 0, 4, 1), {}),
            Header(Marker(proto::kPacketFinish, 0, 5, 2), {})}));
  seed("channel_3_max_3_pages", ch3,
       Cat({Packet(Data(3, 0, 0, 2, 512, 3), Run(3, 512 * 5, 512)),
            Packet(Data(3, 1, 0, big, 8192, 2), {8192, 0}),
            Header(Marker(proto::kPacketSync, 3, 2, 0), {}),
            Header(Marker(proto::kPacketFinish, 3, 3, 1), {})}));
  seed("whole_region_one_packet", ch0,
       Cat({Packet(Data(0, 0, 0, 1, 4096, 4), Run(4, 0, 4096)),
            Header(Marker(proto::kPacketFinish, 0, 1, 0), {})}));
  seed("same_page_twice", ch0,
       Cat({Packet(Data(0, 0, 0, 1, 4096, 3), {4096, 8192, 4096}),
            Header(Marker(proto::kPacketFinish, 0, 1, 0), {})}));
  seed("one_page_max_1", EncodeReceiverConfig(1, 0),
       Cat({Packet(Data(1, 0, 0, 1, 4096, 1), {4096 * 3}),
            Header(Marker(proto::kPacketSync, 1, 1, 0), {}),
            Packet(Data(1, 2, 1, 1, 4096, 1), {4096 * 3}),
            Header(Marker(proto::kPacketFinish, 1, 3, 1), {})}));
  seed("sync_only", ch0,
       Cat({Header(Marker(proto::kPacketSync, 0, 0, 0), {}),
            Header(Marker(proto::kPacketSync, 0, 1, 1), {}),
            Header(Marker(proto::kPacketFinish, 0, 2, 2), {})}));
  // Edge cases: each stream is valid up to one bad packet.
  const Bytes first = Packet(Data(0, 0, 0, 1, 4096, 1), {0});
  seed("edge_empty_stream", ch0, {});
  Bytes cut = first;
  cut.resize(cut.size() - 100);
  seed("edge_ends_mid_payload", ch0, cut);
  cut.resize(40);
  seed("edge_ends_mid_header", ch0, cut);
  seed("edge_ends_before_finish", ch0, first);
  seed("edge_offset_past_region", ch0,
       Cat({first, Packet(Data(0, 1, 0, 1, 4096, 1), {4096 * 4})}));
  seed("edge_offset_unaligned", ch0,
       Cat({first, Packet(Data(0, 1, 0, 2, 512, 1), {256})}));
  seed("edge_page_size_mismatch", ch0,
       Cat({first, Packet(Data(0, 1, 0, big, 4096, 1), {0})}));
  seed("edge_unknown_region", ch0,
       Cat({first, Packet(Data(0, 1, 0, 3, 4096, 1), {0})}));
  seed("edge_packet_number_skips", ch0,
       Cat({first, Packet(Data(0, 2, 0, 1, 4096, 1), {0})}));
  seed("edge_round_ahead", ch0,
       Cat({first, Packet(Data(0, 1, 1, 1, 4096, 1), {0})}));
  seed("edge_wrong_channel", ch0, Packet(Data(1, 0, 0, 1, 4096, 1), {0}));
  seed("edge_pages_over_max", ch3,
       Packet(Data(3, 0, 0, 2, 512, 4), Run(4, 0, 512)));
  seed("edge_bytes_after_finish", ch0,
       Cat({Header(Marker(proto::kPacketFinish, 0, 0, 0), {}), first}));
  // Headers that announce the next one's size (bit 4 of the config).
  const uint8_t next = EncodeReceiverConfig(0, 2, true);
  seed("next_announced_two_rounds", next,
       Cat({Packet(Announcing(Data(0, 0, 0, 1, 4096, 2), 88), {0, 4096 * 2}),
            Packet(Announcing(Data(0, 1, 0, 2, 512, 3), 64), {512 * 7, 0, 512}),
            Header(Announcing(Marker(proto::kPacketSync, 0, 2, 0), 72), {}),
            Packet(Data(0, 3, 1, big, 8192, 1), {8192}),
            Header(Marker(proto::kPacketSync, 0, 4, 1), {}),
            Header(Marker(proto::kPacketFinish, 0, 5, 2), {})}));
  seed("edge_next_announced_too_small", next,
       Cat({Packet(Announcing(Data(0, 0, 0, 1, 4096, 1), 72), {0}),
            Packet(Data(0, 1, 0, 1, 4096, 2), {4096, 8192}),
            Header(Marker(proto::kPacketFinish, 0, 2, 0), {})}));
  seed("edge_next_announced_too_big", next,
       Cat({Packet(Announcing(Data(0, 0, 0, 1, 4096, 1), 88), {0}),
            Packet(Data(0, 1, 0, 1, 4096, 1), {4096}),
            Header(Marker(proto::kPacketFinish, 0, 2, 0), {})}));
  seed("edge_next_announced_stream_ends", next,
       Packet(Announcing(Data(0, 0, 0, 1, 4096, 1), 64 + 8 * 128), {0}));
  // Zero pages and ranges (bit 5 of the config).
  const uint8_t zero = EncodeReceiverConfig(0, 2, true, true);
  seed("zero_pages_and_ranges", zero,
       Cat({Packet(Announcing(Data(0, 0, 0, 1, 4096, 3), 80),
                   {0 | kZ, 4096, 4096 * 3 | kZ}),
            Header(Announcing(ZeroRanges(0, 1, 0, 2, 512, 2), 64),
                   {512 * 2, 512 * 6}),
            Header(Marker(proto::kPacketSync, 0, 2, 0), {}),
            Packet(Data(0, 3, 1, big, 8192, 2), {0 | kZ, 8192 | kZ}),
            Header(ZeroRanges(0, 4, 1, 1, 4096, 4), {0, 4096, 4096 * 2, 8192}),
            Header(Marker(proto::kPacketSync, 0, 5, 1), {}),
            Header(Marker(proto::kPacketFinish, 0, 6, 2), {})}));
  const Bytes zero_first = Packet(Data(0, 0, 0, 1, 4096, 1), {4096 | kZ});
  seed("edge_zero_flag_without_capability", ch0,
       Cat({zero_first, Header(Marker(proto::kPacketFinish, 0, 1, 0), {})}));
  seed("edge_zero_ranges_without_capability", ch0,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 2), {0, 4096}));
  seed("edge_zero_range_past_region", zero,
       Cat({zero_first,
            Header(ZeroRanges(0, 1, 0, 1, 4096, 2), {4096 * 3, 8192})}));
  seed("edge_zero_ranges_overlap", zero,
       Header(ZeroRanges(0, 0, 0, 1, 4096, 4), {0, 8192, 4096, 4096}));
  Bytes ranges_cut = Header(ZeroRanges(0, 0, 0, 1, 4096, 2), {0, 4096});
  ranges_cut.resize(ranges_cut.size() - 3);
  seed("edge_zero_ranges_truncated", zero, ranges_cut);
  seed("edge_zero_page_past_region", zero,
       Packet(Data(0, 0, 0, 2, 512, 1), {512 * 8 | kZ}));
  // Compressed payloads (bit 6), with zero pages beside them.
  const uint8_t packed = EncodeReceiverConfig(0, 2, true, true, true);
  const Bytes frame = TextFrame(2, 4096);
  const uint32_t n = static_cast<uint32_t>(frame.size());
  seed("compressed_two_rounds", packed,
       Cat({Header(Announcing(Compressed(Data(0, 0, 0, 1, 4096, 3), n), 64),
                   {0, 4096 | kZ, 4096 * 2}),
            frame, Header(Marker(proto::kPacketSync, 0, 1, 0), {}),
            Packet(Data(0, 2, 1, 1, 4096, 1), {4096 * 3}),
            Header(Marker(proto::kPacketSync, 0, 3, 1), {}),
            Header(Marker(proto::kPacketFinish, 0, 4, 2), {})}));
  const Bytes finish = Header(Marker(proto::kPacketFinish, 0, 1, 0), {});
  seed("edge_compressed_into_fewer_pages", packed,
       Cat({Header(Compressed(Data(0, 0, 0, 1, 4096, 1), n), {0}), frame,
            finish}));
  seed("edge_compressed_length_short", packed,
       Cat({Header(Compressed(Data(0, 0, 0, 1, 4096, 2), n - 9), {0, 4096}),
            frame, finish}));
  seed("edge_compressed_not_smaller", packed,
       Cat({Header(Compressed(Data(0, 0, 0, 1, 4096, 2), 8192), {0, 4096}),
            frame, finish}));
  Bytes corrupt = frame;
  for (size_t i = 10; i < corrupt.size(); i += 5) corrupt[i] ^= 0x33;
  seed("edge_compressed_corrupt", packed,
       Cat({Header(Compressed(Data(0, 0, 0, 1, 4096, 2), n), {0, 4096}),
            corrupt, finish}));
  seed("edge_compressed_without_capability", ch0,
       Cat({Header(Compressed(Data(0, 0, 0, 1, 4096, 2), n), {0, 4096}), frame,
            finish}));
  // Sealed streams (bit 7): packets sealed under FuzzSealKey, as a source
  // seals them, so mutations start from streams whose tags check out.
  const uint8_t sealed = EncodeReceiverConfig(0, 2, false, true, false, true);
  seed("sealed_two_rounds", sealed,
       Cat({Sealed(Packet(Data(0, 0, 0, 1, 4096, 2), {0, 4096 | kZ}), 0),
            Sealed(Header(Marker(proto::kPacketSync, 0, 1, 0), {}), 1),
            Sealed(Header(ZeroRanges(0, 2, 1, 1, 4096, 2), {8192, 8192}), 2),
            Sealed(Packet(Data(0, 3, 1, 2, 512, 1), {512}), 3),
            Sealed(Header(Marker(proto::kPacketSync, 0, 4, 1), {}), 4),
            Sealed(Header(Marker(proto::kPacketFinish, 0, 5, 2), {}), 5)}));
  seed("edge_sealed_replayed", sealed,
       Cat({Sealed(Packet(Data(0, 0, 0, 1, 4096, 1), {0}), 0),
            Sealed(Packet(Data(0, 0, 0, 1, 4096, 1), {0}), 0)}));
  Bytes flipped = Sealed(Packet(Data(0, 0, 0, 1, 4096, 1), {4096}), 0);
  flipped.back() ^= 1;
  seed("edge_sealed_payload_bit", sealed, flipped);
  seed("edge_sealed_tag_missing", sealed,
       Packet(Data(0, 0, 0, 1, 4096, 1), {0}));
}

void PageDeltaSeeds(std::map<std::string, Bytes>* out) {
  // Byte 0: 0 = 4096-byte pages, 1 = 512.
  (*out)["unchanged"] = {0, 0, 0};
  (*out)["one_store"] = {0, 0x10, 8, 1, 2, 3, 4, 5, 6, 7, 8};
  (*out)["two_runs"] = {0, 0, 1, 0xff, 0x7f, 2, 1, 1};
  (*out)["last_byte"] = {0, 0xff, 0x1f, 1, 9};
  (*out)["small_page_last_byte"] = {1, 0xff, 0x03, 1, 9};
  (*out)["edge_past_end"] = {0, 0xff, 0x1f, 2, 1, 2};
  (*out)["edge_truncated"] = {0, 0, 3, 1, 2};
  (*out)["edge_not_minimal"] = {0, 0x80, 0x00, 1, 7};
  (*out)["edge_empty_run_inside"] = {0, 0, 1, 7, 0, 0};
}

Corpus Generate() {
  Corpus c;
  PacketHeaderSeeds(&c["packet_header"]);
  HelloSeeds(&c["hello"]);
  HelloReplySeeds(&c["hello_reply"]);
  AuthSeeds(&c["auth_message"]);
  ControlSeeds(&c);
  RdmaControlSeeds(&c["rdma_control"]);
  ChannelReceiverSeeds(&c["channel_receiver"]);
  MissingPagesSeeds(&c["missing_pages"]);
  MissingPagesSequenceSeeds(&c["missing_pages_sequence"]);
  PageRequestSeeds(&c["page_request"]);
  PageDataSeeds(&c["page_data"]);
  PageDeltaSeeds(&c["page_delta"]);
  return c;
}

bool ReadFile(const fs::path& p, Bytes* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in),
              std::istreambuf_iterator<char>());
  return !in.bad();
}

bool WriteFile(const fs::path& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()),
            static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(out);
}

// The regular, non-hidden files directly in `dir`.
std::set<std::string> Listing(const fs::path& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    if (e.is_regular_file() && n.rfind('.', 0) != 0) names.insert(n);
  }
  return names;
}

int Write(const fs::path& root, const Corpus& corpus) {
  for (const auto& [target, files] : corpus) {
    const fs::path dir = root / target;
    std::error_code ec;
    fs::create_directories(dir, ec);
    // Stale seeds go: the directory holds exactly what is generated.
    for (const std::string& n : Listing(dir)) {
      if (!files.count(n)) fs::remove(dir / n, ec);
    }
    for (const auto& [name, bytes] : files) {
      if (!WriteFile(dir / name, bytes)) {
        std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
        return 1;
      }
    }
    std::printf("%-18s %3zu seeds\n", target.c_str(), files.size());
  }
  return 0;
}

int Check(const fs::path& root, const Corpus& corpus) {
  int bad = 0;
  for (const auto& [target, files] : corpus) {
    const fs::path dir = root / target;
    for (const std::string& n : Listing(dir)) {
      if (!files.count(n)) {
        std::fprintf(stderr, "%s: not generated (stale seed?)\n",
                     (dir / n).c_str());
        ++bad;
      }
    }
    for (const auto& [name, bytes] : files) {
      Bytes have;
      if (!ReadFile(dir / name, &have) || have != bytes) {
        std::fprintf(stderr, "%s: missing or differs from the encoders\n",
                     (dir / name).c_str());
        ++bad;
      }
    }
  }
  if (bad != 0) {
    std::fprintf(stderr,
                 "%d corpus files out of date; regenerate with "
                 "fuzz_make_corpus --write %s and commit\n",
                 bad, root.c_str());
    return 1;
  }
  std::printf("corpus matches the encoders (%zu targets)\n", corpus.size());
  return 0;
}

}  // namespace
}  // namespace ramferry::fuzz

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "--write") != 0 &&
                    std::strcmp(argv[1], "--check") != 0)) {
    std::fprintf(stderr, "usage: %s --write|--check CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const ramferry::fuzz::Corpus corpus = ramferry::fuzz::Generate();
  return std::strcmp(argv[1], "--write") == 0
             ? ramferry::fuzz::Write(argv[2], corpus)
             : ramferry::fuzz::Check(argv[2], corpus);
}
