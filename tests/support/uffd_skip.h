// Why a test cannot open a userfaultfd on this machine, for its
// GTEST_SKIP: post-copy's destination needs one (the syscall, or
// /dev/userfaultfd). Empty where one can be had.
#ifndef RAMFERRY_TESTS_SUPPORT_UFFD_SKIP_H_
#define RAMFERRY_TESTS_SUPPORT_UFFD_SKIP_H_

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ramferry::testing {

inline std::string UserfaultfdSkipReason() {
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC));
  if (fd >= 0) {
    close(fd);
    return "";
  }
  const int err = errno;
  const int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev >= 0) {
    fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC);
    close(dev);
    if (fd >= 0) {
      close(fd);
      return "";
    }
  }
  return std::string("userfaultfd unavailable here (") + std::strerror(err) +
         "): needs root, CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1 or "
         "/dev/userfaultfd";
}

}  // namespace ramferry::testing

// Skips the test (from its body or SetUp) where userfaultfd is not to be
// had, saying why.
#define SKIP_WITHOUT_USERFAULTFD()                                      \
  do {                                                                  \
    if (std::string why = ::ramferry::testing::UserfaultfdSkipReason(); \
        !why.empty()) {                                                 \
      GTEST_SKIP() << why;                                              \
    }                                                                   \
  } while (0)

#endif  // RAMFERRY_TESTS_SUPPORT_UFFD_SKIP_H_
