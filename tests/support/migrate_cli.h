// What the ramferry-migrate command-line tests share: the binaries they
// run, the JSON reports they read, and a fixture with a private directory
// for one test's sockets and files. RAMFERRY_MIGRATE_BIN (and, where the
// test runs a workload, RAMFERRY_WORKLOAD_BIN) come from the test's
// CMakeLists.
#ifndef RAMFERRY_TESTS_SUPPORT_MIGRATE_CLI_H_
#define RAMFERRY_TESTS_SUPPORT_MIGRATE_CLI_H_

#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace ramferry::testing {

inline const std::string kMigrate = RAMFERRY_MIGRATE_BIN;
#ifdef RAMFERRY_WORKLOAD_BIN
inline const std::string kWorkload = RAMFERRY_WORKLOAD_BIN;
#endif

// The whole of stdout as one JSON document: --json prints one report.
inline nlohmann::json ParseJson(const CommandResult& r) {
  nlohmann::json j =
      nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.out << r.err;
  return j;
}

// The last line of `out` as JSON: a workload or the tool reports last,
// after whatever it printed before.
inline nlohmann::json LastJson(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  const size_t start = end == std::string::npos ? 0 : out.rfind('\n', end) + 1;
  nlohmann::json j = nlohmann::json::parse(out.substr(start), nullptr,
                                           /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << out;
  return j;
}

// A test with a directory of its own under /tmp, removed with all it
// holds when the test ends. A subclass's SetUp calls MakeDir once its own
// reasons to skip are checked.
class MigrateDirTest : public ::testing::Test {
 protected:
  void MakeDir(const std::string& prefix) {
    std::string tmpl = absl::StrCat("/tmp/", prefix, "-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }

  std::string dir_;
};

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_MIGRATE_CLI_H_
