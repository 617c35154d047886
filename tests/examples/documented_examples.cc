// The documented examples, each as the body of a function with the
// variables its text assumes as parameters. Compiled, never run: the
// documented destination serves forever and its source dials 10.0.0.2.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ramferry/auth_key.h"
#include "ramferry/receiver.h"
#include "ramferry/region.h"
#include "ramferry/sender.h"

namespace ramferry_docs {

// docs/library.md, "Using the library".
void ReadmeExample(void* dst_base, uint64_t dst_len, void* src_base,
                   uint64_t src_len){
#include "readme_example.inc"
}

// include/ramferry/sender.h, its opening comment.
absl::Status SenderHeaderExample(absl::Span<const ramferry::Region> regions,
                                 const std::string& key) {
#include "sender_h_example.inc"
}

}  // namespace ramferry_docs
