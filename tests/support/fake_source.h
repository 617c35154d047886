// Speaks the source side of the wire protocol by hand, so tests can feed a
// real Receiver what a correct Sender never sends: malformed headers, wrong
// sessions, a channel closed mid-packet.
#ifndef RAMFERRY_TESTS_SUPPORT_FAKE_SOURCE_H_
#define RAMFERRY_TESTS_SUPPORT_FAKE_SOURCE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/control.h"
#include "proto/control.h"
#include "proto/handshake.h"
#include "proto/packet.h"
#include "ramferry/transport.h"

namespace ramferry::testing {

class FakeSource {
 public:
  FakeSource(uint16_t port, uint32_t channels, uint32_t max_pages = 128);
  ~FakeSource();

  const proto::SessionId& session() const { return session_; }
  // Where Connect() dials (127.0.0.1 unless set).
  void set_host(std::string host) { host_ = std::move(host); }
  // What the hellos name as the session's transport (tcp unless set), and
  // the chunk size a chunk-registering one (rdma) must name.
  void set_transport(TransportKind kind, uint64_t rdma_chunk_bytes = 0) {
    transport_ = kind;
    rdma_chunk_bytes_ = rdma_chunk_bytes;
  }
  // The key Connect() authenticates with (empty: none).
  void set_key(std::string key) { key_ = std::move(key); }
  // What the hellos offer: by default what a Sender with default options
  // offers (everything but surviving channel loss).
  void set_capabilities(uint64_t caps) { capabilities_ = caps; }
  // A hello as the real Sender would send it.
  proto::Hello MakeHello(proto::Role role, uint32_t index) const;

  // Connects a fresh socket and exchanges `hello`; returns the fd (owned
  // by this object) or the refusal.
  absl::StatusOr<int> Connect(const proto::Hello& hello);
  // Control connection + region table; fails unless accepted.
  absl::Status OpenControl(absl::Span<const proto::RegionInfo> regions);
  // Opens data channel `index` with a correct hello.
  absl::Status OpenChannel(uint32_t index);
  absl::Status OpenAllChannels();

  absl::Status Send(uint32_t channel, absl::Span<const uint8_t> bytes);
  void CloseChannel(uint32_t channel);
  // The next control message from the destination.
  absl::StatusOr<engine::ControlChannel::Message> ReadControl(
      absl::Duration timeout = absl::Seconds(10));
  absl::Status SendControl(absl::Span<const uint8_t> frame);

  // Header + payload bytes of one data packet; each page is filled with
  // `fill`.
  static std::vector<uint8_t> DataPacket(const proto::PacketHeader& h,
                                         absl::Span<const uint64_t> offsets,
                                         uint8_t fill);
  static std::vector<uint8_t> Marker(uint16_t flags, uint32_t channel,
                                     uint64_t packet_num, uint64_t round);

 private:
  uint16_t port_;
  std::string host_ = "127.0.0.1";
  TransportKind transport_ = TransportKind::kTcp;
  uint64_t rdma_chunk_bytes_ = 0;
  uint32_t channels_;
  uint32_t max_pages_;
  // It writes packets as they are: no sealed stream; and it opens fresh
  // sessions (kFeaturePostcopyResume would make its Hello a resume).
  uint64_t capabilities_ =
      proto::kKnownFeatures &
      ~(proto::kFeatureSurviveChannelLoss | proto::kFeatureSealMac |
        proto::kFeatureSealEncrypt | proto::kFeaturePostcopyResume);
  proto::SessionId session_;
  std::string key_;
  std::unique_ptr<engine::ControlChannel> control_;
  std::map<uint32_t, int> data_fds_;
  std::vector<int> other_fds_;
};

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_FAKE_SOURCE_H_
