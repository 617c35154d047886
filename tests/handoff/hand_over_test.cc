// A local migration by hand-over (HandOverAttached, ramferry/memory_handoff.h)
// against the real kernel, in one process: an export that consented, an
// adopter on a thread, the workload's very pages passed on. The consent,
// the grant and the digest check over real sockets, from raw peers where
// a misbehaving one is the point; the commit point's rule: resumed before
// the adopter's acknowledgement, never after.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/owned_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "handoff/handoff_io.h"
#include "handoff/unix_seqpacket.h"
#include "proto/memory_handoff.h"
#include "ramferry/memory_handoff.h"
#include "ramferry/ramferry.h"
#include "tests/support/status_matchers.h"
#include "tests/support/uffd_skip.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Outcome = HandOverReport::Outcome;

constexpr uint64_t kPage = 4096;

class HandOverAttachedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = testing::UserfaultfdSkipReason();
    if (!why.empty()) GTEST_SKIP() << why;
    std::string tmpl = ::testing::TempDir() + "/handoverXXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    fd_ = memfd_create("hand_over_test", MFD_CLOEXEC);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(ftruncate(fd_, 24 * kPage), 0);
    void* p =
        mmap(nullptr, 24 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    ASSERT_NE(p, MAP_FAILED);
    mem_ = static_cast<uint8_t*>(p);
    for (uint64_t i = 0; i < 24 * kPage; ++i)
      mem_[i] = static_cast<uint8_t>(i * 7);
    regions_ = {{1, "low", mem_, 16 * kPage, fd_, 0},
                {2, "high", mem_ + 16 * kPage, 8 * kPage, fd_, 16 * kPage}};
  }
  void TearDown() override {
    exp_.reset();
    if (mem_ != nullptr) munmap(mem_, 24 * kPage);
    if (fd_ >= 0) close(fd_);
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& n) const { return dir_ + "/" + n; }

  void Export(bool allow) {
    ExportOptions o;
    o.allow_hand_over = allow;
    absl::StatusOr<std::unique_ptr<MemoryExport>> e = MemoryExport::Listen(
        Path("export.sock"), regions_,
        [this](ExportEvent ev) {
          std::lock_guard<std::mutex> lock(mu_);
          events_.push_back(std::string(ExportEventName(ev)));
        },
        o);
    ASSERT_OK(e);
    exp_ = *std::move(e);
  }
  std::vector<std::string> Events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  HandOverOptions Options(bool verify) {
    HandOverOptions o;
    o.verify = verify;
    o.adopt_timeout = absl::Seconds(5);
    return o;
  }

  std::string dir_;
  int fd_ = -1;
  uint8_t* mem_ = nullptr;
  std::vector<SharedRegion> regions_;
  std::unique_ptr<MemoryExport> exp_;
  std::mutex mu_;
  std::vector<std::string> events_;
};

TEST_F(HandOverAttachedTest, TheAdopterGetsTheWorkloadsOwnPagesVerified) {
  Export(true);
  absl::StatusOr<std::unique_ptr<AdoptedMemory>> adopt =
      AdoptedMemory::Listen(Path("adopt.sock"));
  ASSERT_OK(adopt);
  absl::Status waited;
  std::thread t([&] { waited = (*adopt)->Wait(absl::Seconds(10)); });
  const HandOverReport r =
      HandOverAttached(Path("export.sock"), Path("adopt.sock"), Options(true));
  t.join();
  ASSERT_EQ(r.outcome, Outcome::kMigrated) << r.status;
  EXPECT_OK(r.status);
  ASSERT_OK(waited);
  EXPECT_EQ(r.workload_pid, getpid());
  EXPECT_EQ(r.regions, 2u);
  EXPECT_EQ(r.bytes, 24 * kPage);
  EXPECT_EQ(r.pause_method, "handler");
  EXPECT_GT(r.verify_ns, 0);
  EXPECT_GE(r.downtime_ns,
            r.pause_ns + r.grant_ns + r.verify_ns + r.hand_over_ns);
  EXPECT_OK(exp_->WaitMigrated(absl::Seconds(5)));
  EXPECT_THAT(Events(), ElementsAre("pause", "migrated"));
  absl::Span<const SharedRegion> got = (*adopt)->regions();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_EQ(got[0].length, 16 * kPage);
  EXPECT_EQ(got[1].id, 2u);
  EXPECT_EQ(got[1].length, 8 * kPage);
  EXPECT_EQ(std::memcmp(got[1].base, mem_ + 16 * kPage, 8 * kPage), 0);
  // Not a copy: a write by the adopter is in the workload's memory.
  static_cast<uint8_t*>(got[0].base)[5] = 0xee;
  EXPECT_EQ(mem_[5], 0xee);
  struct stat a, b;
  ASSERT_EQ(fstat(got[0].fd, &a), 0);
  ASSERT_EQ(fstat(fd_, &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
}

TEST_F(HandOverAttachedTest, AWorkloadWithoutConsentIsNeitherPausedNorAsked) {
  Export(false);
  const HandOverReport r =
      HandOverAttached(Path("export.sock"), Path("adopt.sock"), Options(true));
  EXPECT_EQ(r.outcome, Outcome::kNotPaused);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status.message(), HasSubstr("did not allow hand-over"));
  EXPECT_EQ(r.paused_at_ns, 0);
  EXPECT_TRUE(Events().empty());
}

// The export's side of the protocol, from a raw attacher: REFUSED while
// not paused (or without consent), the files once paused, and the
// connection goes on either way.
TEST_F(HandOverAttachedTest, TheExportGrantsOnlyWithConsentAndWhilePaused) {
  for (bool allow : {false, true}) {
    SCOPED_TRACE(allow);
    exp_.reset();
    Export(allow);
    absl::StatusOr<base::OwnedFd> c =
        handoff::ConnectSeqpacket(Path("export.sock"), absl::Seconds(5));
    ASSERT_OK(c);
    ASSERT_OK(handoff::ReceiveOffer(c->get(), proto::OfferKind::kExport,
                                    absl::Seconds(5)));
    auto ask = [&] {
      EXPECT_OK(handoff::SendCommand(c->get(),
                                     proto::HandoffCommand::kHandOverRequest));
      return handoff::ReceiveCommandWithFds(c->get(), absl::Seconds(5));
    };
    absl::StatusOr<handoff::ReceivedCommand> early = ask();
    ASSERT_OK(early);
    EXPECT_EQ(early->command.type, proto::HandoffCommand::kRefused);
    EXPECT_EQ(early->command.value,
              static_cast<uint64_t>(allow ? proto::RefusalReason::kNotPaused
                                          : proto::RefusalReason::kNotAllowed));
    ASSERT_OK(handoff::SendCommand(c->get(), proto::HandoffCommand::kPause));
    absl::StatusOr<proto::CommandMessage> paused =
        handoff::ReceiveCommand(c->get(), absl::Seconds(5));
    ASSERT_OK(paused);
    EXPECT_EQ(paused->type, proto::HandoffCommand::kPaused);
    absl::StatusOr<handoff::ReceivedCommand> later = ask();
    ASSERT_OK(later);
    if (!allow) {
      EXPECT_EQ(later->command.type, proto::HandoffCommand::kRefused);
      continue;
    }
    ASSERT_EQ(later->command.type, proto::HandoffCommand::kHandOverGrant);
    ASSERT_EQ(later->fds.size(), 2u);
    for (const base::OwnedFd& f : later->fds) {
      EXPECT_EQ(fcntl(f.get(), F_GETFL) & O_ACCMODE, O_RDWR);
    }
  }
}

TEST_F(HandOverAttachedTest, NoAdopterMeansNoPause) {
  Export(true);
  HandOverOptions o = Options(false);
  o.adopt_timeout = absl::Milliseconds(200);
  const HandOverReport r =
      HandOverAttached(Path("export.sock"), Path("nobody.sock"), o);
  EXPECT_EQ(r.outcome, Outcome::kNotPaused);
  EXPECT_THAT(r.status.message(), HasSubstr("no adopter at"));
  EXPECT_TRUE(Events().empty());
}

// An adopter that takes the offer and never answers: the workload is
// resumed, and the adopter's late ADOPTED can no longer land (the
// connection was shut before the last look), so it never runs on memory
// the workload runs on too.
TEST_F(HandOverAttachedTest, ASilentAdopterTimesOutAndCannotAcknowledgeLate) {
  Export(true);
  absl::StatusOr<handoff::SeqpacketListener> l =
      handoff::ListenSeqpacket(Path("adopt.sock"));
  ASSERT_OK(l);
  std::atomic<bool> done{false};
  int late_send = 0;
  std::thread adopter([&] {
    absl::StatusOr<base::OwnedFd> c =
        handoff::AcceptSeqpacket(l->get(), absl::Seconds(5), nullptr);
    ASSERT_OK(c);
    ASSERT_OK(handoff::ReceiveOffer(c->get(), proto::OfferKind::kHandOver,
                                    absl::Seconds(5)));
    while (!done.load()) absl::SleepFor(absl::Milliseconds(5));
    late_send =
        handoff::SendCommand(c->get(), proto::HandoffCommand::kAdopted).ok()
            ? 1
            : -1;
  });
  HandOverOptions o = Options(false);
  o.adopt_timeout = absl::Milliseconds(300);
  const HandOverReport r =
      HandOverAttached(Path("export.sock"), Path("adopt.sock"), o);
  done = true;
  adopter.join();
  EXPECT_EQ(r.outcome, Outcome::kResumed);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(late_send, -1);
  EXPECT_THAT(Events(), ElementsAre("pause", "resume"));
}

// The adopter checks the digests an offer carries and refuses a
// mismatch with its reason; Wait then names the refusal.
TEST_F(HandOverAttachedTest, TheAdopterRefusesADigestMismatch) {
  absl::StatusOr<std::unique_ptr<AdoptedMemory>> adopt =
      AdoptedMemory::Listen(Path("adopt.sock"));
  ASSERT_OK(adopt);
  absl::Status waited;
  std::thread t([&] { waited = (*adopt)->Wait(absl::Seconds(2)); });
  absl::StatusOr<base::OwnedFd> c =
      handoff::ConnectSeqpacket(Path("adopt.sock"), absl::Seconds(5));
  ASSERT_OK(c);
  const std::vector<uint64_t> digests = {
      RegionDigest(regions_[0].base, regions_[0].length),
      RegionDigest(regions_[1].base, regions_[1].length) ^ 1};
  absl::Status s = handoff::OfferToAdopter(c->get(), "the adopter", regions_,
                                           digests, absl::Seconds(5));
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("digest"));
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kDeadlineExceeded,
                               HasSubstr("nobody connected within")));
  EXPECT_THAT(waited.message(), HasSubstr("region 2's digest"));
  EXPECT_TRUE((*adopt)->regions().empty());
}

TEST_F(HandOverAttachedTest, CApiOneCall) {
  ramferry_shared_regions* set = ramferry_shared_regions_new();
  ASSERT_NE(set, nullptr);
  ASSERT_EQ(ramferry_shared_regions_add(set, 1, mem_, 24 * kPage, fd_, 0),
            RAMFERRY_OK);
  ramferry_export* exp = nullptr;
  EXPECT_EQ(ramferry_export_listen_with(Path("export.sock").c_str(), set,
                                        nullptr, nullptr,
                                        RAMFERRY_EXPORT_ALLOW_HAND_OVER, &exp),
            RAMFERRY_INVALID_ARGUMENT);  // consent needs a handler
  EXPECT_EQ(ramferry_export_listen_with(Path("export.sock").c_str(), set,
                                        nullptr, nullptr, 0x80, &exp),
            RAMFERRY_INVALID_ARGUMENT);  // unknown flag
  auto on = [](void*, ramferry_export_event) {};
  ASSERT_EQ(
      ramferry_export_listen_with(Path("export.sock").c_str(), set, on, nullptr,
                                  RAMFERRY_EXPORT_ALLOW_HAND_OVER, &exp),
      RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_adopt* adopt = nullptr;
  ASSERT_EQ(ramferry_adopt_listen(Path("adopt.sock").c_str(), &adopt),
            RAMFERRY_OK);
  std::thread t([&] { ramferry_adopt_wait(adopt, 10000); });
  ramferry_hand_over_report r{};
  r.size = sizeof r;
  EXPECT_EQ(
      ramferry_hand_over_attached(Path("export.sock").c_str(),
                                  Path("adopt.sock").c_str(), 10000, 1, &r),
      RAMFERRY_OK)
      << ramferry_last_error();
  t.join();
  EXPECT_EQ(r.outcome, RAMFERRY_HAND_OVER_MIGRATED);
  EXPECT_EQ(r.regions, 1u);
  EXPECT_EQ(r.bytes, 24 * kPage);
  EXPECT_GT(r.verify_ns, 0);
  EXPECT_GT(r.downtime_ns, 0);
  EXPECT_EQ(ramferry_export_wait_migrated(exp, 5000), RAMFERRY_OK);
  size_t n = 0;
  EXPECT_EQ(ramferry_adopt_region_count(adopt, &n), RAMFERRY_OK);
  EXPECT_EQ(n, 1u);
  // Nobody at the adopter's socket now: failed, the workload not paused.
  ramferry_adopt_free(adopt);
  ramferry_export_free(exp);
  ASSERT_EQ(
      ramferry_export_listen_with(Path("export.sock").c_str(), set, on, nullptr,
                                  RAMFERRY_EXPORT_ALLOW_HAND_OVER, &exp),
      RAMFERRY_OK);
  r = {};
  r.size = sizeof r;
  EXPECT_NE(ramferry_hand_over_attached(Path("export.sock").c_str(),
                                        Path("adopt.sock").c_str(), 200, 0, &r),
            RAMFERRY_OK);
  EXPECT_EQ(r.outcome, RAMFERRY_HAND_OVER_NOT_PAUSED);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("no adopter"));
  ramferry_export_free(exp);
  ramferry_shared_regions_free(set);
}

}  // namespace
}  // namespace ramferry
