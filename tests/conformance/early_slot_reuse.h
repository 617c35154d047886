// A deliberately broken header-slot reuse, for tests only: proof that a
// test can see the bug that zero-copy header slots exist to prevent.
//
// While installed, every data channel a Sender opens is wrapped so that,
// just before each data packet goes to the real transport, that packet's
// header is also written into the slot of the packet sent before it, the
// newest one the kernel has already taken (for tcp-zerocopy the previous
// sendmsg returned; for uring-zc the last Submit returned). That is what a
// HeaderSlots that handed a slot out again without waiting for its
// zero-copy completion would do: the next header lands in memory the
// kernel may still hold. Where the kernel no longer reads that slot (its
// completion came back, or the bytes were already copied, as on loopback)
// the write is harmless and the session ends byte-exact; where it still
// holds the slot, the wire carries the wrong header for the earlier packet
// and the destination ends with pages missing (or rejects the header).
// Under the `each` policy the transport waits for every completion before
// SendPacket returns, so there the write is always harmless.
//
// Why a wrapper in the test binary and not a broken build of the library
// (a RAMFERRY_BROKEN_SLOT_REUSE define in channels/header_slots.cc): that
// would be a second build of the library and of every test binary linking
// it, minutes on the 2-core CI for one check, and a flag a normal build
// could be configured with by mistake. This wrapper is compiled into the
// conformance test only, goes through the engine's test-only transport
// decorator hook (engine/transport_decorator.h), and the library's normal
// path has no trace of it.
#ifndef RAMFERRY_TESTS_CONFORMANCE_EARLY_SLOT_REUSE_H_
#define RAMFERRY_TESTS_CONFORMANCE_EARLY_SLOT_REUSE_H_

#include <atomic>
#include <cstdint>

namespace ramferry::conformance {

// RAMFERRY_TEST_EARLY_SLOT_REUSE=1 in the environment: RunSession (the
// conformance sessions) installs an EarlySlotReuse for every session, so a
// person can watch the ordinary tests fail (or not) with the bug.
inline constexpr char kEarlySlotReuseEnv[] = "RAMFERRY_TEST_EARLY_SLOT_REUSE";
bool EarlySlotReuseRequested();

// Installs the wrapper for the source's data channels for its lifetime
// (process-wide, one at a time, as testing::FaultInjector; they cannot be
// combined). Must outlive the sessions opened meanwhile.
class EarlySlotReuse {
 public:
  EarlySlotReuse();
  ~EarlySlotReuse();
  EarlySlotReuse(const EarlySlotReuse&) = delete;
  EarlySlotReuse& operator=(const EarlySlotReuse&) = delete;

  // Headers written into an earlier packet's slot so far.
  uint64_t rewrites() const { return rewrites_.load(); }

 private:
  std::atomic<uint64_t> rewrites_{0};
};

}  // namespace ramferry::conformance

#endif  // RAMFERRY_TESTS_CONFORMANCE_EARLY_SLOT_REUSE_H_
