// Fuzzes a real destination (Receiver, on loopback) with the source's
// side of a session written by hand (FakeSource): rounds, FINISH, and the
// post-copy messages (MISSING_PAGES, PAGE_DATA, any control frame) in any
// order and any phase, to a destination that negotiated post-copy or not,
// over one channel or two.
//
// Input: a config byte (bit 0: the destination allows post-copy; bit 1:
// two channels), then steps, each an op byte and its operands:
//   0 a round: a page (the next byte picks it) and a SYNC per channel
//   1 a control frame: type byte, length byte, that many payload bytes
//   2 MISSING_PAGES for the region: first page byte, count byte, `last`
//   3 FINISH on every channel, then on control
//   4 read what the destination said (up to 20 ms)
//   5 raw bytes on a channel: length byte, bytes
//   6 close a channel
//   7 PAGE_DATA on control: first page byte, count byte (zero or 0x5a)
//
// Properties: no crash and no hang: Serve returns once the source is gone
// (its connections closed), within the stall and resume bounds set here;
// the session ends OK only where the source sent FINISH.
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/control.h"
#include "proto/handshake.h"
#include "proto/packet.h"
#include "proto/postcopy.h"
#include "ramferry/options.h"
#include "ramferry/receiver.h"
#include "ramferry/region.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/support/fake_source.h"

namespace ramferry::fuzz {
namespace {

constexpr uint64_t kPages = 32;
constexpr uint64_t kPage = 4096;

// The destination's memory: anonymous and private, as post-copy needs;
// made anew for each input (post-copy leaves it registered).
struct Memory {
  Memory() {
    void* m = mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FUZZ_CHECK(m != MAP_FAILED);
    base = m;
  }
  ~Memory() { munmap(base, kPages * kPage); }
  void* base;
};

class Steps {
 public:
  Steps(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::vector<uint8_t> Bytes(size_t n) {
    n = std::min(n, size_ - std::min(at_, size_));
    std::vector<uint8_t> out(data_ + at_, data_ + at_ + n);
    at_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

void Run(const uint8_t* data, size_t size) {
  Steps in(data, size);
  const uint8_t config = in.Byte();
  const uint32_t channels = (config & 2) ? 2 : 1;
  SessionOptions opt;
  opt.insecure = true;
  opt.channels = channels;
  opt.postcopy = (config & 1) != 0;
  opt.postcopy_urgent_channel = false;  // the fake source has none
  opt.stall_timeout = absl::Seconds(2);
  opt.handshake_timeout = absl::Seconds(1);
  opt.postcopy_resume_timeout = absl::Milliseconds(50);
  Memory memory;
  const Region region{1, "fuzz", memory.base, kPages * kPage, kPage};
  absl::StatusOr<std::unique_ptr<Receiver>> rx =
      Receiver::Listen(opt, {&region, 1});
  FUZZ_CHECK(rx.ok());
  std::future<absl::Status> served =
      std::async(std::launch::async, [r = rx->get()] { return r->Serve(); });
  bool finished = false;
  {
    testing::FakeSource src((*rx)->port(), channels);
    // What a Sender offers, without an urgent connection (the fake source
    // opens none) or a sealed stream (it writes packets as they are).
    src.set_capabilities(proto::kKnownFeatures &
                         ~(proto::kFeatureSurviveChannelLoss |
                           proto::kFeatureSealMac | proto::kFeatureSealEncrypt |
                           proto::kFeaturePostcopyResume |
                           proto::kFeaturePostcopyUrgent));
    const proto::RegionInfo info{1, kPage, kPages * kPage, "fuzz"};
    if (src.OpenControl({&info, 1}).ok() && src.OpenAllChannels().ok()) {
      uint64_t packet[2] = {0, 0}, round = 0;
      bool open[2] = {true, channels > 1};
      // FakeSource sends on open channels only.
      auto send = [&](uint32_t ch, const std::vector<uint8_t>& bytes) {
        if (open[ch]) (void)src.Send(ch, bytes);
      };
      while (!in.done()) {
        const uint8_t op = in.Byte();
        const uint32_t c = (op >> 3) % channels;
        switch (op % 8) {
          case 0: {
            const uint64_t page = in.Byte() % kPages;
            for (uint32_t ch = 0; ch < channels; ++ch) {
              proto::PacketHeader h;
              h.channel = ch;
              h.packet_num = packet[ch]++;
              h.round = round;
              h.region_id = 1;
              h.page_size = kPage;
              h.page_count = 1;
              // Each channel its own half of the region: two channels
              // writing one page in one round is a race the source makes
              // (the destination's memory is the source's to fill), which
              // would only report itself under TSan.
              const uint64_t offset =
                  (page + ch * (kPages / channels)) % kPages * kPage;
              send(ch, testing::FakeSource::DataPacket(h, {&offset, 1}, 0x5a));
              send(ch, testing::FakeSource::Marker(proto::kPacketSync, ch,
                                                   packet[ch]++, round));
            }
            ++round;
            break;
          }
          case 1: {
            std::vector<uint8_t> frame = proto::StartFrame(
                static_cast<proto::ControlType>(in.Byte() % 20));
            const std::vector<uint8_t> payload = in.Bytes(in.Byte());
            frame.insert(frame.end(), payload.begin(), payload.end());
            proto::FinishFrame(frame);
            (void)src.SendControl(frame);
            break;
          }
          case 2: {
            proto::MissingPages m;
            m.region_id = 1;
            const uint64_t first = in.Byte() % kPages;
            const uint64_t count = 1 + in.Byte() % (kPages - first);
            m.ranges.push_back({first, count});
            m.last = (op & 0x40) == 0;
            (void)src.SendControl(proto::EncodeMissingPagesFrame(m));
            break;
          }
          case 3:
            for (uint32_t ch = 0; ch < channels; ++ch) {
              send(ch, testing::FakeSource::Marker(proto::kPacketFinish, ch,
                                                   packet[ch]++, round));
            }
            finished = src.SendControl(proto::EncodeFinish()).ok() || finished;
            break;
          case 4:
            (void)src.ReadControl(absl::Milliseconds(20));
            break;
          case 5:
            send(c, in.Bytes(in.Byte()));
            break;
          case 6:
            if (open[c]) src.CloseChannel(c);
            open[c] = false;
            break;
          default: {
            const uint64_t first = in.Byte() % kPages;
            const uint32_t count =
                static_cast<uint32_t>(1 + in.Byte() % (kPages - first));
            std::vector<uint8_t> bytes(count * kPage, 0x5a);
            (void)src.SendControl(proto::EncodePageData(
                1, first, count, (op & 0x40) ? nullptr : bytes.data()));
            break;
          }
        }
      }
    }
  }  // the source is gone: every connection closed
  FUZZ_CHECK(served.wait_for(std::chrono::seconds(30)) ==
             std::future_status::ready);
  const absl::Status s = served.get();
  // RAMFERRY_FUZZ_VERBOSE=1: how each input ended (which phase a seed
  // reaches).
  if (std::getenv("RAMFERRY_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "  served: %s\n", s.ToString().c_str());
  }
  FUZZ_CHECK(!s.ok() || finished);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  ramferry::fuzz::Run(data, size);
  return 0;
}
