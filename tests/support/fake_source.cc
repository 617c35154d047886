#include "tests/support/fake_source.h"

#include <unistd.h>

#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "ramferry/transport.h"

namespace ramferry::testing {

FakeSource::FakeSource(uint16_t port, uint32_t channels, uint32_t max_pages)
    : port_(port),
      channels_(channels),
      max_pages_(max_pages),
      session_(engine::NewSessionId()) {}

FakeSource::~FakeSource() {
  for (auto& [i, fd] : data_fds_) close(fd);
  for (int fd : other_fds_) close(fd);
}

proto::Hello FakeSource::MakeHello(proto::Role role, uint32_t index) const {
  proto::Hello h;
  h.role = role;
  h.session = session_;
  h.channel_index = index;
  h.channel_count = channels_;
  h.capabilities = capabilities_;
  h.max_packet_pages = max_pages_;
  h.transport = static_cast<uint16_t>(transport_);
  h.rdma_chunk_bytes = rdma_chunk_bytes_;
  return h;
}

absl::StatusOr<int> FakeSource::Connect(const proto::Hello& hello) {
  RAMFERRY_ASSIGN_OR_RETURN(
      int fd, channels::ConnectWithRetry(host_, port_, absl::Seconds(5)));
  other_fds_.push_back(fd);
  RAMFERRY_ASSIGN_OR_RETURN(
      proto::HelloReply reply,
      channels::ExchangeHello(fd, hello, key_, absl::Now() + absl::Seconds(5)));
  return fd;
}

absl::Status FakeSource::OpenControl(
    absl::Span<const proto::RegionInfo> regions) {
  RAMFERRY_ASSIGN_OR_RETURN(int fd,
                            Connect(MakeHello(proto::Role::kControl, 0)));
  other_fds_.pop_back();  // owned by the ControlChannel now
  control_ = std::make_unique<engine::ControlChannel>(fd, absl::Seconds(5));
  RAMFERRY_RETURN_IF_ERROR(control_->Send(proto::EncodeRegionTable(regions)));
  RAMFERRY_ASSIGN_OR_RETURN(
      std::vector<uint8_t> payload,
      engine::ReceiveExpected(*control_, proto::ControlType::kRegionReply,
                              absl::Now() + absl::Seconds(5)));
  RAMFERRY_ASSIGN_OR_RETURN(proto::RegionReply reply,
                            proto::DecodeRegionReply(payload));
  if (!reply.accepted) return absl::FailedPreconditionError(reply.reason);
  return absl::OkStatus();
}

absl::Status FakeSource::OpenChannel(uint32_t index) {
  RAMFERRY_ASSIGN_OR_RETURN(int fd,
                            Connect(MakeHello(proto::Role::kData, index)));
  other_fds_.pop_back();
  data_fds_[index] = fd;
  return absl::OkStatus();
}

absl::Status FakeSource::OpenAllChannels() {
  for (uint32_t i = 0; i < channels_; ++i) {
    RAMFERRY_RETURN_IF_ERROR(OpenChannel(i));
  }
  return absl::OkStatus();
}

absl::Status FakeSource::Send(uint32_t channel,
                              absl::Span<const uint8_t> bytes) {
  return channels::WriteWithDeadline(data_fds_.at(channel), bytes,
                                     absl::Now() + absl::Seconds(10));
}

void FakeSource::CloseChannel(uint32_t channel) {
  close(data_fds_.at(channel));
  data_fds_.erase(channel);
}

absl::StatusOr<engine::ControlChannel::Message> FakeSource::ReadControl(
    absl::Duration timeout) {
  return control_->Receive(absl::Now() + timeout);
}

absl::Status FakeSource::SendControl(absl::Span<const uint8_t> frame) {
  return control_->Send(frame);
}

std::vector<uint8_t> FakeSource::DataPacket(const proto::PacketHeader& h,
                                            absl::Span<const uint64_t> offsets,
                                            uint8_t fill) {
  std::vector<uint8_t> out(proto::PacketHeaderBytes(h.page_count));
  proto::EncodePacketHeader(h, offsets, absl::MakeSpan(out));
  out.resize(out.size() + size_t{h.page_count} * h.page_size, fill);
  return out;
}

std::vector<uint8_t> FakeSource::Marker(uint16_t flags, uint32_t channel,
                                        uint64_t packet_num, uint64_t round) {
  proto::PacketHeader h;
  h.flags = flags;
  h.channel = channel;
  h.packet_num = packet_num;
  h.round = round;
  std::vector<uint8_t> out(proto::kPacketFixedBytes);
  proto::EncodePacketHeader(h, {}, absl::MakeSpan(out));
  return out;
}

}  // namespace ramferry::testing
