// Fuzzes CheckDelta and ApplyDelta: a delta record the destination applies
// to a page it holds (proto/page_delta.h), so an accepted record must
// change nothing outside its page.
//
// Input: one byte choosing the page size (bit 0: 512, else 4096), then the
// record. Properties: an accepted record changes only bytes of the page
// (canaries either side stay); applying it twice gives the page back (XOR);
// the change it made, re-encoded (RefreshCopy, EncodeDelta with a page of
// room), is accepted and makes the same page; a record the check refused
// is never applied.
#include <cstdint>
#include <vector>

#include "proto/page_delta.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

constexpr size_t kCanaryBytes = 64;
constexpr uint8_t kCanary = 0xa5;

void FuzzPageDelta(absl::Span<const uint8_t> in) {
  if (in.empty()) return;
  const uint32_t page_size = (in[0] & 1) != 0 ? 512 : 4096;
  const absl::Span<const uint8_t> record = in.subspan(1);
  if (!proto::CheckDelta(record, page_size).ok()) return;

  std::vector<uint8_t> buffer(page_size + 2 * kCanaryBytes, kCanary);
  uint8_t* page = buffer.data() + kCanaryBytes;
  for (uint32_t i = 0; i < page_size; ++i) page[i] = static_cast<uint8_t>(i);
  const std::vector<uint8_t> before(page, page + page_size);
  proto::ApplyDelta(record, page, page_size);
  for (size_t i = 0; i < kCanaryBytes; ++i) {
    FUZZ_CHECK(buffer[i] == kCanary);
    FUZZ_CHECK(buffer[kCanaryBytes + page_size + i] == kCanary);
  }
  const std::vector<uint8_t> after(page, page + page_size);

  std::vector<uint8_t> copy = before, x(page_size), again(page_size);
  FUZZ_CHECK(proto::RefreshCopy(after.data(), copy.data(), x.data(),
                                page_size) == (after != before));
  FUZZ_CHECK(copy == after);
  const size_t n = proto::EncodeDelta(x, absl::MakeSpan(again));
  if (n != 0) {
    again.resize(n);
    FUZZ_CHECK(proto::CheckDelta(again, page_size).ok());
    std::vector<uint8_t> redo = before;
    proto::ApplyDelta(again, redo.data(), page_size);
    FUZZ_CHECK(redo == after);
  }
  proto::ApplyDelta(record, page, page_size);
  FUZZ_CHECK(std::vector<uint8_t>(page, page + page_size) == before);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzPageDelta({data, size});
  return 0;
}
