// The fuzz targets the replay binary holds: in the ordinary builds every
// target's LLVMFuzzerTestOneInput is compiled under the name
// RamferryFuzz_<target> (tests/fuzz/CMakeLists.txt), so all of them link
// into one binary, and this table, generated there, names them.
#ifndef RAMFERRY_TESTS_FUZZ_REPLAY_TARGETS_H_
#define RAMFERRY_TESTS_FUZZ_REPLAY_TARGETS_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace ramferry::fuzz {

struct ReplayTarget {
  const char* name;
  int (*run)(const uint8_t* data, size_t size);
};

// Every target, in the order tests/fuzz/CMakeLists.txt declares them.
std::span<const ReplayTarget> ReplayTargets();

}  // namespace ramferry::fuzz

#endif  // RAMFERRY_TESTS_FUZZ_REPLAY_TARGETS_H_
