// ramferry-migrate --attach and --export as they are meant to be used:
// a workload process (bench/attach/workload.c, through the C API
// only) exports its memfd and keeps storing into it; the tool migrates it
// from another process; the destination hands the received memfd to a
// third process that adopts it. The adopting process's digest of what it
// got must be the exporting process's digest of its memory when it was
// told it had migrated: byte-identical, checked by neither the engine nor
// the tool.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/write_tracker.h"
#include "tests/support/migrate_cli.h"
#include "tests/support/rogue_writer.h"
#include "tests/support/subprocess.h"

namespace ramferry {
namespace {

using testing::BackgroundCommand;
using testing::CommandResult;
using ::testing::HasSubstr;
using testing::kMigrate;
using testing::kWorkload;
using testing::LastJson;
using testing::RogueWriter;
using testing::RunCommand;
using Json = nlohmann::json;

class MigrateAttach : public testing::MigrateDirTest {
 protected:
  void SetUp() override {
    // The export registers async uffd-wp and the tool scans its pagemap.
    void* probe = mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    absl::StatusOr<std::unique_ptr<WriteTracker>> t =
        WriteTracker::Track(probe, 4096);
    const std::string why = t.ok() ? "" : std::string(t.status().message());
    t = absl::UnknownError("released");
    munmap(probe, 4096);
    if (!why.empty()) GTEST_SKIP() << "no write tracking here: " << why;
    MakeDir("ramferry-attach");
  }

  // The exporting workload, once it listens.
  std::unique_ptr<BackgroundCommand> StartExport(
      std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        kWorkload,         "--export=" + Path("export.sock"),
        "--size-mib=32",   "--rate=100000",
        "--pattern=mixed", "--baseline-seconds=0.2",
        "--timeout-s=120"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto w = std::make_unique<BackgroundCommand>(argv);
    EXPECT_TRUE(w->AwaitStderr("listening", absl::Seconds(30))) << w->Stderr();
    return w;
  }
  std::unique_ptr<BackgroundCommand> StartAdopter() {
    auto a = std::make_unique<BackgroundCommand>(std::vector<std::string>{
        kWorkload, "--adopt=" + Path("adopt.sock"), "--seconds=0.2",
        "--rate=100000", "--timeout-s=120"});
    EXPECT_TRUE(a->AwaitStderr("waiting", absl::Seconds(30))) << a->Stderr();
    return a;
  }
  // A demo migration from the export to the adopter with `args`.
  Json Migrate(std::vector<std::string> args, bool adopt = true) {
    std::vector<std::string> argv = {kMigrate, "--demo", "--json",
                                     "--attach=" + Path("export.sock")};
    if (adopt) argv.push_back("--export=" + Path("adopt.sock"));
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = RunCommand(argv, absl::Seconds(300));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return LastJson(r.out);
  }
};

void ExpectMigrated(const Json& j) {
  SCOPED_TRACE(j.dump());
  EXPECT_EQ(j["outcome"], "migrated") << j["error"];
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["destination"]["ok"], true) << j["destination"]["error"];
  EXPECT_THAT(j["dirty_tracking"].get<std::string>(),
              HasSubstr("uffd-wp of pid"));
}

// The workload and the adopter report the same memory, and the tool's
// report says how the workload was paused.
void ExpectSameMemory(BackgroundCommand& exporter, BackgroundCommand& adopter) {
  CommandResult e = exporter.Wait(absl::Seconds(60));
  CommandResult a = adopter.Wait(absl::Seconds(60));
  ASSERT_EQ(e.exit_code, 0) << e.err;
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const Json ej = LastJson(e.out);
  const Json aj = LastJson(a.out);
  EXPECT_EQ(ej["digest"], aj["digest"]) << e.out << a.out;
  EXPECT_EQ(ej["bytes"], aj["bytes"]);
  EXPECT_GT(ej["stores"].get<uint64_t>(), 0u) << "the workload never wrote";
  EXPECT_GT(ej["paused_at_ns"].get<int64_t>(), 0);
  EXPECT_GE(aj["resumed_at_ns"].get<int64_t>(),
            ej["paused_at_ns"].get<int64_t>());
}

class MigrateAttachTransport
    : public MigrateAttach,
      public ::testing::WithParamInterface<const char*> {};

TEST_P(MigrateAttachTransport, AWritingWorkloadMovesToTheAdopterByteForByte) {
  auto exporter = StartExport();
  auto adopter = StartAdopter();
  const Json j = Migrate({absl::StrCat("--transport=", GetParam())});
  ExpectMigrated(j);
  EXPECT_EQ(j["attached"]["pause_method"], "handler");
  EXPECT_EQ(j["destination"]["export"]["handed_over"], true);
  ExpectSameMemory(*exporter, *adopter);
}

INSTANTIATE_TEST_SUITE_P(SocketTransports, MigrateAttachTransport,
                         ::testing::Values("tcp", "tcp-zerocopy", "uring-zc"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

TEST_F(MigrateAttach, StoresStraddlingPagesAndBurstsAreAllCarried) {
  for (const char* pattern : {"straddle", "burst", "random"}) {
    SCOPED_TRACE(pattern);
    auto exporter = StartExport({absl::StrCat("--pattern=", pattern)});
    auto adopter = StartAdopter();
    ExpectMigrated(Migrate({"--downtime-limit=5ms", "--max-rounds=8"}));
    ExpectSameMemory(*exporter, *adopter);
  }
}

// A VMM's guest memory in several regions (one memfd, offered in parts):
// the destination makes a region per part and hands them all over.
TEST_F(MigrateAttach, AWorkloadExportingSeveralRegionsMovesWhole) {
  auto exporter = StartExport({"--regions=3"});
  auto adopter = StartAdopter();
  const Json j = Migrate({});
  ExpectMigrated(j);
  EXPECT_EQ(j["pages_verified"], (32u << 20) / 4096);
  ExpectSameMemory(*exporter, *adopter);
}

TEST_F(MigrateAttach, SeparateSourceAndDestinationProcesses) {
  const std::string key = Path("key");
  {
    std::ofstream k(key);
    k << std::string(32, 'k');
  }
  chmod(key.c_str(), 0600);
  // Two regions of 16 MiB: the destination declares them (--size list).
  auto exporter = StartExport({"--regions=2"});
  auto adopter = StartAdopter();
  BackgroundCommand dest({kMigrate, "--role=dest", "--listen=127.0.0.1:0",
                          "--size=16MiB,16MiB", "--key-file=" + key,
                          "--export=" + Path("adopt.sock"), "--json"});
  const std::string port = dest.AwaitStderrLine(
      "ramferry-migrate: listening on 127.0.0.1:", absl::Seconds(30));
  ASSERT_FALSE(port.empty()) << dest.Stderr();
  CommandResult src = RunCommand(
      {kMigrate, "--role=source", "--connect=127.0.0.1:" + port,
       "--key-file=" + key, "--attach=" + Path("export.sock"), "--json"},
      absl::Seconds(300));
  EXPECT_EQ(src.exit_code, 0) << src.out << src.err;
  CommandResult d = dest.Wait(absl::Seconds(60));
  EXPECT_EQ(d.exit_code, 0) << d.out << d.err;
  EXPECT_EQ(LastJson(d.out)["export"]["handed_over"], true);
  ExpectSameMemory(*exporter, *adopter);
}

TEST_F(MigrateAttach, AWorkloadWithoutAPauseHandlerIsStoppedAndStaysStopped) {
  auto exporter = StartExport({"--no-handler"});
  auto adopter = StartAdopter();
  const Json j = Migrate({});
  ExpectMigrated(j);
  EXPECT_EQ(j["attached"]["pause_method"], "SIGSTOP");
  EXPECT_THAT(j["attached"]["pause_note"].get<std::string>(),
              HasSubstr("no pause handler"));
  // Migrated: the source copy must not run on.
  std::ifstream stat(absl::StrCat("/proc/", exporter->pid(), "/stat"));
  std::string line;
  std::getline(stat, line);
  EXPECT_THAT(line.substr(line.rfind(')') + 2, 1), ::testing::AnyOf("T", "t"));
  CommandResult a = adopter.get()->Wait(absl::Seconds(60));
  EXPECT_EQ(a.exit_code, 0) << a.err;
  kill(exporter->pid(), SIGKILL);
  exporter->Wait(absl::Seconds(10));
}

TEST_F(MigrateAttach, PostcopyMovesAnAttachedWorkload) {
  auto exporter = StartExport({"--regions=2"});
  // The destination runs memload: an adopter cannot take post-copied
  // memory (refused below).
  const Json j = Migrate({"--postcopy=now"}, /*adopt=*/false);
  ExpectMigrated(j);
  EXPECT_EQ(j["switchover"], "postcopy");
  CommandResult e = exporter->Wait(absl::Seconds(60));
  EXPECT_EQ(e.exit_code, 0) << e.err;
}

TEST_F(MigrateAttach, AFailedAttemptLeavesTheWorkloadToTheNextOne) {
  auto exporter = StartExport();
  // Nobody listens there: the source gives up before any pause.
  CommandResult failed = RunCommand(
      {kMigrate, "--role=source", "--connect=127.0.0.1:1", "--insecure",
       "--connect-timeout=200ms", "--attach=" + Path("export.sock")},
      absl::Seconds(60));
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_TRUE(exporter->Running());
  auto adopter = StartAdopter();
  ExpectMigrated(Migrate({}));
  ExpectSameMemory(*exporter, *adopter);
}

// Writes that bypass the workload's page tables (through its memfd, from
// another process) are invisible to the tracking: verification catches
// them, the migration fails after the pause, and the workload is resumed
// and migrates once they stop.
TEST_F(MigrateAttach, AFailureAfterThePauseResumesTheWorkload) {
  auto exporter = StartExport();
  RogueWriter rogue(exporter->pid(), "ramferry-attached-workload", 32ull << 20,
                    absl::Microseconds(100));
  ASSERT_TRUE(rogue.valid());
  CommandResult failed = RunCommand(
      {kMigrate, "--demo", "--json", "--attach=" + Path("export.sock")},
      absl::Seconds(300));
  rogue.Stop();
  EXPECT_EQ(failed.exit_code, 1) << failed.out << failed.err;
  const Json j = LastJson(failed.out);
  EXPECT_EQ(j["outcome"], "failed");
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("verification failed"));
  EXPECT_EQ(j["workload"]["running_after"], true);
  EXPECT_TRUE(exporter->Running());
  // Resumed: it writes on, and the next attempt moves it whole.
  auto adopter = StartAdopter();
  ExpectMigrated(Migrate({}));
  ExpectSameMemory(*exporter, *adopter);
}

// The workload dies mid-round: its writes can no longer be read, so the
// migration fails, and the report does not claim it runs on.
TEST_F(MigrateAttach, AWorkloadThatDiesFailsTheMigrationClearly) {
  auto exporter = StartExport();
  // 32 MiB at 100mbit: round 0 takes about 2.7 s, the kill comes at 1 s.
  BackgroundCommand migrate({kMigrate, "--demo", "--json",
                             "--max-bandwidth=100mbit",
                             "--attach=" + Path("export.sock")});
  absl::SleepFor(absl::Seconds(1));
  kill(exporter->pid(), SIGKILL);
  exporter->Wait(absl::Seconds(10));
  CommandResult r = migrate.Wait(absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const Json j = LastJson(r.out);
  EXPECT_EQ(j["outcome"], "failed");
  EXPECT_THAT(j["error"].get<std::string>(),
              HasSubstr("did it end, or free its export?"));
  EXPECT_EQ(j["workload"]["running_after"], false);
}

TEST_F(MigrateAttach, FlagsThatCannotWorkAreRefusedUpFront) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::string sock = "--attach=" + Path("export.sock");
  for (const Case& c : std::vector<Case>{
           {{"--role=source", "--connect=127.0.0.1:7", sock,
             "--region-file=/dev/shm/x"},
            "drop --region-file"},
           {{"--role=source", "--connect=127.0.0.1:7", sock, "--auto-converge"},
            "--auto-converge"},
           {{"--role=source", "--connect=127.0.0.1:7", sock,
             "--dirty-tracking=bitmap"},
            "drop --dirty-tracking"},
           {{"--role=dest", sock}, "--attach is the source's"},
           {{"--role=source", "--connect=127.0.0.1:7", "--export=" + Path("a")},
            "--export is the destination's"},
           {{"--role=dest", "--postcopy", "--export=" + Path("a")},
            "--postcopy with --export"},
           {{"--role=source", "--connect=127.0.0.1:7", "--size=1GiB,1GiB"},
            "a list of sizes is for --role=dest"},
       }) {
    std::vector<std::string> argv = {kMigrate, "--insecure"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CommandResult r = RunCommand(argv, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 2) << c.says << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says));
  }
}

TEST_F(MigrateAttach, NothingToAttachToFailsClearlyAndInTime) {
  CommandResult r = RunCommand(
      {kMigrate, "--role=source", "--connect=127.0.0.1:7", "--insecure",
       "--connect-timeout=300ms", "--attach=" + Path("nobody.sock")},
      absl::Seconds(30));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("is the other process listening there?"));
}

}  // namespace
}  // namespace ramferry
