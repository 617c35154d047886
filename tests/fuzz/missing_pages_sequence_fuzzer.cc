// Fuzzes a whole post-copy switch as the destination takes it: a sequence
// of MISSING_PAGES payloads, each through DecodeMissingPages and one
// MissingPagesChecker, the way PostcopyTarget::OnMissingPages applies
// them. The checker guards the order rules a single message cannot show;
// a hole or an overlap across messages would drop the wrong pages of a
// running workload.
//
// Input: messages, each a u16 length (big-endian) and that many payload
// bytes; a last message cut short is decoded as it is.
//
// Properties, against a model kept here: per region, every accepted range
// starts past the end of the previous accepted one plus a gap of a page;
// nothing is accepted for a region after its last message; a refused
// message leaves the checker as it was (its page count and completeness,
// and a message the model accepts next is still accepted); complete() is
// true exactly when every region of the table had its last message; the
// checker's page count is the sum of the accepted ranges.
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/postcopy.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

struct Model {
  bool seen = false;
  uint64_t next = 0;  // lowest page the next range may start at
  bool done = false;
};

void FuzzMissingPagesSequence(absl::Span<const uint8_t> in) {
  static const std::vector<proto::RegionInfo> table = FuzzMissingPagesTable();
  proto::MissingPagesChecker checker(table);
  std::map<uint32_t, Model> model;
  for (const proto::RegionInfo& r : table) model[r.id];
  size_t done = 0;
  uint64_t sum = 0;
  size_t at = 0;
  while (at < in.size()) {
    size_t len = in[at];
    if (at + 1 < in.size()) len = (len << 8) | in[at + 1];
    at += 2;
    if (at > in.size()) break;
    len = std::min(len, in.size() - at);
    absl::StatusOr<proto::MissingPages> m =
        proto::DecodeMissingPages(in.subspan(at, len), table);
    at += len;
    if (!m.ok()) continue;
    Model& state = model[m->region_id];
    bool fits = !state.done;
    uint64_t next = state.next;
    uint64_t pages = 0;
    for (const proto::PageRange& r : m->ranges) {
      fits = fits && r.first >= next;
      next = r.end() + 1;
      pages += r.count;
    }
    const bool was_complete = checker.complete();
    const uint64_t before = checker.missing_pages();
    const absl::Status s = checker.Accept(*m);
    FUZZ_CHECK(s.ok() == fits);
    if (!s.ok()) {
      FUZZ_CHECK(checker.missing_pages() == before);
      FUZZ_CHECK(checker.complete() == was_complete);
      continue;
    }
    state.next = next;
    sum += pages;
    if (m->last) {
      state.done = true;
      ++done;
    }
    FUZZ_CHECK(checker.missing_pages() == sum);
    FUZZ_CHECK(checker.complete() == (done == table.size()));
  }
  FUZZ_CHECK(checker.missing_pages() == sum);
  FUZZ_CHECK(checker.complete() == (done == table.size()));
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzMissingPagesSequence({data, size});
  return 0;
}
