// ramferry-migrate --attach --hand-over as it is meant to be used: a
// workload process (bench/attach/workload.c, through the C API
// only) exports its memfd with consent to hand it over and keeps storing
// into it; the tool pauses it and passes its memfds, uncopied, to an
// adopting process. The adopter's digest of what it got must be the
// workload's digest of its memory once told MIGRATED; every failure
// before the adopter's acknowledgement leaves the workload running.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/migrate_cli.h"
#include "tests/support/rogue_writer.h"
#include "tests/support/subprocess.h"
#include "tests/support/uffd_skip.h"

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

class MigrateHandOver : public testing::MigrateDirTest {
 protected:
  void SetUp() override {
    const std::string why = testing::UserfaultfdSkipReason();
    if (!why.empty()) GTEST_SKIP() << why;
    MakeDir("ramferry-hand-over");
  }

  std::unique_ptr<BackgroundCommand> StartExport(
      std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        kWorkload,       "--export=" + Path("export.sock"), "--size-mib=32",
        "--rate=100000", "--baseline-seconds=0.2",          "--timeout-s=120"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto w = std::make_unique<BackgroundCommand>(argv);
    EXPECT_TRUE(w->AwaitStderr("listening", absl::Seconds(30))) << w->Stderr();
    return w;
  }
  // The adopter writes nothing: with a hand-over it holds the workload's
  // very pages, so the workload's digest after MIGRATED is also what the
  // adopter got.
  std::unique_ptr<BackgroundCommand> StartAdopter() {
    auto a = std::make_unique<BackgroundCommand>(
        std::vector<std::string>{kWorkload, "--adopt=" + Path("adopt.sock"),
                                 "--seconds=0", "--timeout-s=120"});
    EXPECT_TRUE(a->AwaitStderr("waiting", absl::Seconds(30))) << a->Stderr();
    return a;
  }
  CommandResult HandOver(std::vector<std::string> extra) {
    std::vector<std::string> argv = {kMigrate, "--json",
                                     "--attach=" + Path("export.sock"),
                                     "--hand-over=" + Path("adopt.sock")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv, absl::Seconds(120));
  }
};

void ExpectHandedOver(const CommandResult& r, size_t regions, bool verify) {
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Json j = LastJson(r.out);
  SCOPED_TRACE(j.dump());
  EXPECT_EQ(j["outcome"], "migrated");
  EXPECT_EQ(j["workload"], "migrated");
  EXPECT_EQ(j["regions"], regions);
  EXPECT_EQ(j["bytes"], 32u << 20);
  EXPECT_EQ(j["pause_method"], "handler");
  EXPECT_EQ(j["verify"], verify);
  EXPECT_EQ(j["verify_s"].get<double>() > 0, verify);
  // Downtime holds its parts: pause, grant, verify and hand-over.
  const double parts = j["pause_s"].get<double>() + j["grant_s"].get<double>() +
                       j["verify_s"].get<double>() +
                       j["hand_over_s"].get<double>();
  EXPECT_GT(j["hand_over_s"].get<double>(), 0);
  EXPECT_GE(j["downtime_s"].get<double>(), parts);
  EXPECT_LT(j["downtime_s"].get<double>(), parts + 0.05);
}

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
  EXPECT_GE(aj["resumed_at_ns"].get<int64_t>(),
            ej["paused_at_ns"].get<int64_t>());
}

TEST_F(MigrateHandOver, AWritingWorkloadOfSeveralRegionsIsHandedOverVerified) {
  auto exporter = StartExport({"--allow-hand-over", "--regions=3"});
  auto adopter = StartAdopter();
  ExpectHandedOver(HandOver({"--verify=full"}), 3, true);
  ExpectSameMemory(*exporter, *adopter);
}

TEST_F(MigrateHandOver, WithoutVerifyAndAsATable) {
  auto exporter = StartExport({"--allow-hand-over"});
  auto adopter = StartAdopter();
  CommandResult r =
      RunCommand({kMigrate, "--attach=" + Path("export.sock"),
                  "--hand-over=" + Path("adopt.sock"), "--verify=off"},
                 absl::Seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("outcome          migrated"));
  EXPECT_THAT(r.out, HasSubstr("downtime "));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("verify ")));
  ExpectSameMemory(*exporter, *adopter);
}

void ExpectRunsOn(BackgroundCommand& exporter) {
  EXPECT_TRUE(exporter.Running());
}

TEST_F(MigrateHandOver, NoAdopterLeavesTheWorkloadUnpausedAndNextOneWorks) {
  auto exporter = StartExport({"--allow-hand-over"});
  CommandResult r = HandOver({"--hand-over-timeout=300ms"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("no adopter at"));
  const Json j = LastJson(r.out);
  EXPECT_EQ(j["outcome"], "failed");
  EXPECT_EQ(j["workload"], "failed-not-paused");
  ExpectRunsOn(*exporter);
  auto adopter = StartAdopter();
  ExpectHandedOver(HandOver({}), 1, true);
  ExpectSameMemory(*exporter, *adopter);
}

TEST_F(MigrateHandOver, AWorkloadWithoutConsentIsRefusedAndRunsOn) {
  auto exporter = StartExport({});
  auto adopter = StartAdopter();
  CommandResult r = HandOver({});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("did not allow hand-over"));
  EXPECT_EQ(LastJson(r.out)["workload"], "failed-not-paused");
  ExpectRunsOn(*exporter);
  // It still migrates the way it allows: over the network.
  CommandResult m = RunCommand(
      {kMigrate, "--demo", "--json", "--attach=" + Path("export.sock"),
       "--export=" + Path("adopt.sock")},
      absl::Seconds(300));
  EXPECT_EQ(m.exit_code, 0) << m.out << m.err;
  ExpectSameMemory(*exporter, *adopter);
}

// Another writer of the workload's memfd (not through its page tables,
// so its pause does not stop it) changes the memory between the digest
// taken at the pause and the adopter's check: the adopter refuses, the
// workload is resumed, and once the writer stops the next hand-over, to
// the same adopter (it waits on after a refusal), succeeds.
TEST_F(MigrateHandOver, ADigestMismatchIsRefusedAndTheWorkloadResumes) {
  auto exporter = StartExport({"--allow-hand-over"});
  auto adopter = StartAdopter();
  RogueWriter rogue(exporter->pid(), "ramferry-attached-workload", 32ull << 20,
                    absl::Microseconds(50));
  ASSERT_TRUE(rogue.valid());
  CommandResult r = HandOver({"--verify=full"});
  rogue.Stop();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const Json j = LastJson(r.out);
  EXPECT_EQ(j["outcome"], "failed");
  EXPECT_EQ(j["workload"], "failed-resumed");
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("digest"));
  EXPECT_GT(j["verify_s"].get<double>(), 0);
  EXPECT_TRUE(adopter->Running());  // refused, and waits for the next
  ExpectRunsOn(*exporter);
  ExpectHandedOver(HandOver({"--verify=full"}), 1, true);
  ExpectSameMemory(*exporter, *adopter);
}

TEST_F(MigrateHandOver, FlagsThatMakeNoSenseAreRefusedUpFront) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::string attach = "--attach=" + Path("export.sock");
  const std::string to = "--hand-over=" + Path("adopt.sock");
  for (const Case& c : std::vector<Case>{
           {{to}, "give --attach"},
           {{attach, to, "--role=dest"}, "drop --role=dest"},
           {{attach, to, "--connect=127.0.0.1:7"}, "--connect does not go"},
           {{attach, to, "--listen=0.0.0.0:7"}, "--listen does not go"},
           {{attach, to, "--demo"}, "--demo does not go"},
           {{attach, to, "--export=" + Path("x")}, "--export does not go"},
           {{attach, to, "--postcopy"}, "--postcopy does not go"},
           {{attach, to, "--verify=sent"}, "use --verify=full"},
           {{attach, to, "--size=2GiB"}, "--size does not go"},
           // Named at its default value, it is still named.
           {{attach, to, "--size=1GiB"}, "--size does not go"},
           // Flags of every kind a network migration has (audit F9: each
           // of these was silently ignored).
           {{attach, to, "--key=" + std::string(64, 'a')}, "--key does not go"},
           {{attach, to, "--key-file=" + Path("key")},
            "--key-file does not go"},
           {{attach, to, "--protect=encrypt"}, "--protect does not go"},
           {{attach, to, "--delta=on"}, "--delta does not go"},
           {{attach, to, "--compress=on"}, "--compress does not go"},
           {{attach, to, "--survive-channel-loss"},
            "--survive-channel-loss does not go"},
           {{attach, to, "--stall-rounds=9"}, "--stall-rounds does not go"},
           {{attach, to, "--on-timeout=force"}, "--on-timeout does not go"},
           {{attach, to, "--dest-region-file=" + Path("x")},
            "--dest-region-file does not go"},
           {{attach, to, "--packet-pages=8"}, "--packet-pages does not go"},
       }) {
    std::vector<std::string> argv = {kMigrate};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CommandResult r = RunCommand(argv, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 2) << c.says << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says));
  }
}

}  // namespace
}  // namespace ramferry
