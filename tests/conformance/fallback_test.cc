// uring-zc on a kernel that cannot run io_uring, made real with a seccomp
// filter in a forked child: io_uring_setup fails with ENOSYS there, as on
// a kernel built without it. Without the fallback the session fails with
// the probe's reason; with it, the session runs on tcp-zerocopy, byte
// exact, and says so in Sender::warnings().
//
// The child reports through its exit code (one per check) and a line of
// detail; the parent asserts.
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <map>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "channels/uring_zerocopy.h"
#include "gtest/gtest.h"
#include "ramferry/sender.h"
#include "tests/conformance/conformance_support.h"
#include "tests/support/test_support.h"

namespace ramferry::conformance {
namespace {

using testing::MakeRegion;
using testing::SameBytes;
using testing::ScaledBytes;
using testing::ServingReceiver;

// One exit code per check the child makes.
enum Check : int {
  kAllPassed = 0,
  kFilterNotInstalled = 10,
  kProbeSucceeded = 11,
  kProbeMessageWithoutIoUring = 12,
  kConnectedWithoutFallback = 13,
  kErrorLacksProbeMessage = 14,
  kFallbackConnectFailed = 15,
  kFallbackRoundFailed = 16,
  kFallbackVerifyFailed = 17,
  kFallbackFinishFailed = 18,
  kFallbackReceiverFailed = 19,
  kFallbackBytesDiffer = 20,
  kNoFallbackWarning = 21,
  kFallbackNotTcpZeroCopy = 22,
};

const std::map<int, std::string>& CheckNames() {
  static const auto* names = new std::map<int, std::string>{
      {kFilterNotInstalled, "installing the seccomp filter"},
      {kProbeSucceeded, "ProbeUringZeroCopy() must fail under the filter"},
      {kProbeMessageWithoutIoUring, "the probe's error must name io_uring"},
      {kConnectedWithoutFallback,
       "uring-zc without fallback must fail to connect"},
      {kErrorLacksProbeMessage,
       "the connect error must carry the probe's message"},
      {kFallbackConnectFailed, "uring-zc with fallback must connect"},
      {kFallbackRoundFailed, "rounds with the fallback must succeed"},
      {kFallbackVerifyFailed, "Verify with the fallback must match"},
      {kFallbackFinishFailed, "Finish with the fallback must succeed"},
      {kFallbackReceiverFailed, "the receiver must end OK"},
      {kFallbackBytesDiffer, "the destination must equal the source"},
      {kNoFallbackWarning, "Sender::warnings() must name the fallback"},
      {kFallbackNotTcpZeroCopy,
       "the fallback session must behave like tcp-zerocopy"},
  };
  return *names;
}

#if defined(__x86_64__)
// io_uring_setup -> ENOSYS; everything else allowed.
int DenyIoUringSetup() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K,
               SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]),
                  filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return errno;
  return 0;
}
#endif

// The child's side: every check, in order; the first that fails ends it.
int RunChecks(int report_fd) {
  auto fail = [&](Check c, const std::string& detail) {
    std::string line = absl::StrCat(detail, "\n");
    (void)!write(report_fd, line.data(), line.size());
    return static_cast<int>(c);
  };
#if defined(__x86_64__)
  if (int err = DenyIoUringSetup(); err != 0) {
    return fail(kFilterNotInstalled, strerror(err));
  }
#endif
  const absl::Status probe = channels::ProbeUringZeroCopy();
  if (probe.ok()) return fail(kProbeSucceeded, "probe OK");
  const std::string probe_message(probe.message());
  if (probe_message.find("io_uring") == std::string::npos) {
    return fail(kProbeMessageWithoutIoUring, probe.ToString());
  }

  const uint64_t bytes = ScaledBytes(32ull << 20);
  auto src = MakeRegion(1, bytes, 808, /*fill=*/true);
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.transport = TransportKind::kUringZeroCopy;
  opt.channels = 2;
  opt.header_slots = 8;
  {
    auto dst = MakeRegion(1, bytes);
    opt.fallback_to_tcp_zerocopy = false;
    ServingReceiver rx(opt, {dst.region});
    opt.port = rx.port();
    auto sender = Sender::Connect(opt, {&src.region, 1});
    if (sender.ok()) return fail(kConnectedWithoutFallback, "connected");
    if (std::string(sender.status().message()).find(probe_message) ==
        std::string::npos) {
      return fail(kErrorLacksProbeMessage, sender.status().ToString());
    }
  }

  auto dst = MakeRegion(1, bytes);
  opt.fallback_to_tcp_zerocopy = true;
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  if (!sender.ok()) {
    return fail(kFallbackConnectFailed, sender.status().ToString());
  }
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  std::mt19937_64 rng(808);
  for (int round = 0; round < 2; ++round) {
    if (round > 0) {
      RewriteRandomPages(src.region, src.region.page_count() / 16, rng, dirty);
    }
    absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
    if (!r.ok()) return fail(kFallbackRoundFailed, r.status().ToString());
  }
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  if (!v.ok() || !v->ok() || v->pages_checked != src.region.page_count()) {
    return fail(kFallbackVerifyFailed,
                v.ok() ? absl::StrCat(v->pages_mismatched, " mismatched")
                       : v.status().ToString());
  }
  if (absl::Status s = (*sender)->Finish(); !s.ok()) {
    return fail(kFallbackFinishFailed, s.ToString());
  }
  if (absl::Status s = rx.result(); !s.ok()) {
    return fail(kFallbackReceiverFailed, s.ToString());
  }
  if (!SameBytes(src.region, dst.region)) {
    return fail(kFallbackBytesDiffer, "destination differs");
  }
  const std::vector<std::string> warnings = (*sender)->warnings();
  if (warnings.size() != 1 ||
      warnings[0].find("uring-zc unavailable") == std::string::npos ||
      warnings[0].find("using tcp-zerocopy") == std::string::npos ||
      warnings[0].find(probe_message) == std::string::npos) {
    std::string all;
    for (const std::string& w : warnings) absl::StrAppend(&all, "[", w, "] ");
    return fail(kNoFallbackWarning,
                absl::StrCat(warnings.size(), " warnings: ", all));
  }
  // tcp-zerocopy's signature: one sendmsg (and syscall) per packet, data
  // packets zero-copy.
  const ChannelStats t = (*sender)->stats().Total();
  const uint64_t all_packets = t.packets + t.syncs + t.finishes;
  if (t.zc_sends != t.packets || t.send_calls != all_packets ||
      t.submit_calls != t.send_calls || t.zc_completions != t.zc_sends) {
    return fail(kFallbackNotTcpZeroCopy,
                absl::StrFormat("packets %d, zc_sends %d, send_calls %d, "
                                "submit_calls %d, zc_completions %d",
                                t.packets, t.zc_sends, t.send_calls,
                                t.submit_calls, t.zc_completions));
  }
  return kAllPassed;
}

TEST(UringFallback, WithoutIoUringFailsOrFallsBackToTcpZeroCopy) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the seccomp filter here is written for x86_64";
#endif
  ASSERT_TRUE(SingleThreaded())
      << ThreadCount() << " threads: fork needs a single-threaded process";
  ForkedChild child(RunChecks);
  ForkedChild::Result r = child.Wait(
      testing::UnderSanitizer() ? absl::Minutes(4) : absl::Seconds(60));
  ASSERT_FALSE(r.timed_out) << "the child did not finish: " << r.report;
  auto name = CheckNames().find(r.exit_code);
  EXPECT_EQ(r.exit_code, kAllPassed)
      << "check failed: "
      << (name != CheckNames().end() ? name->second
                                     : absl::StrCat("exit ", r.exit_code))
      << "\n"
      << r.report;
}

}  // namespace
}  // namespace ramferry::conformance
