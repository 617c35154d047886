// Why a test cannot make a cli::LinkTestbed on this machine, for its
// GTEST_SKIP: the testbed needs root and iproute2. Where this says
// nothing, a testbed that fails to build is a failure, not a skip.
#ifndef RAMFERRY_TESTS_SUPPORT_LINK_TESTBED_SKIP_H_
#define RAMFERRY_TESTS_SUPPORT_LINK_TESTBED_SKIP_H_

#include <unistd.h>

#include <string>

namespace ramferry::testing {

inline std::string LinkTestbedSkipReason() {
  if (geteuid() != 0) {
    return "needs root to create network namespaces, veth pairs and tc "
           "qdiscs (the link testbed)";
  }
  for (const char* tool : {"ip", "tc"}) {
    bool found = false;
    for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
      found = found || access((std::string(dir) + tool).c_str(), X_OK) == 0;
    }
    if (!found) {
      return std::string("needs iproute2's ") + tool + " for the link testbed";
    }
  }
  return "";
}

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_LINK_TESTBED_SKIP_H_
