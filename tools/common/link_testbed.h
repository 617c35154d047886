// Real rate-limited links on one machine, for the tests, the bench and
// `ramferry-migrate --demo-link`: loopback moves several GB/s here, faster
// than any link a migration crosses, so a slow link must be made.
//
// A LinkTestbed is two network namespaces of its own, a source side and a
// destination side, joined by one veth pair per link. Link i has the
// addresses 10.77.i.1/24 (source side) and 10.77.i.2/24 (destination
// side), and both of its ends send through tc's token-bucket filter at
// the link's rate (`tbf rate R burst B latency 50ms`, B = the larger of
// R/250 and 128 KiB, so a 64 KiB GSO packet is never split and the bucket
// refills at every kernel tick up to 10gbit).
//
// Invariants:
// - Nothing outside the two namespaces is created or changed: the fixed
//   addresses cannot meet the host's, and the caller's namespace keeps
//   its devices and routes.
// - Names are unique per process and testbed (rf-<pid>-<n>-src, -dst);
//   the device of link i is veth<i> in both namespaces.
// - The destructor deletes both namespaces, which deletes their veths;
//   Create() also deletes namespaces of this naming whose process no
//   longer runs (one killed before its destructor ran).
// - EnterSource/EnterDestination move the calling thread only. Threads it
//   starts afterwards, and sockets it opens afterwards, are in that
//   namespace; a socket stays in the namespace it was opened in.
//
// Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2's ip and tc.
#ifndef RAMFERRY_TOOLS_COMMON_LINK_TESTBED_H_
#define RAMFERRY_TOOLS_COMMON_LINK_TESTBED_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tools/common/cli.h"

namespace ramferry::cli {

// A comma list of rates ("1gbit,1gbit"); the error names the bad item.
absl::StatusOr<std::vector<std::string>> ParseLinkRateList(
    absl::string_view text);

class LinkTestbed {
 public:
  // The most links one testbed makes (10.77.i.0/24 for each).
  static constexpr size_t kMaxLinks = 64;

  // One link per rate (tc syntax, ParseLinkRate).
  static absl::StatusOr<std::unique_ptr<LinkTestbed>> Create(
      absl::Span<const std::string> rates);
  ~LinkTestbed();
  LinkTestbed(const LinkTestbed&) = delete;
  LinkTestbed& operator=(const LinkTestbed&) = delete;

  size_t links() const { return rates_.size(); }
  const std::string& source_namespace() const { return src_; }
  const std::string& destination_namespace() const { return dst_; }
  // veth<i>, the device of link i on both sides.
  std::string device(size_t link) const;
  std::string source_address(size_t link) const;       // 10.77.i.1
  std::string destination_address(size_t link) const;  // 10.77.i.2
  const std::string& rate(size_t link) const { return rates_[link]; }
  // "link 0: 1gbit, source rf-1-0-src dev veth0 10.77.0.1 -> destination
  // rf-1-0-dst dev veth0 10.77.0.2"
  std::string Describe(size_t link) const;

  // Moves the calling thread into the source or destination namespace
  // (setns(2)); see the invariants.
  absl::Status EnterSource() const;
  absl::Status EnterDestination() const;

  // Takes link `link` down or brings it up again (its source end; the
  // destination end loses its carrier with it). Down, the link carries
  // nothing and connections over it stall; up, its route returns and they
  // resume.
  absl::Status SetLinkUp(size_t link, bool up) const;

 private:
  explicit LinkTestbed(std::vector<std::string> rates);
  absl::Status Build();

  std::vector<std::string> rates_;
  std::string src_, dst_;
  bool made_src_ = false, made_dst_ = false;
};

// The calling thread's network namespace, taken back when this is
// destroyed: for a thread that enters a testbed's namespace for a while
// (a test) and must not stay there.
class SavedNetworkNamespace {
 public:
  SavedNetworkNamespace();
  ~SavedNetworkNamespace();
  SavedNetworkNamespace(const SavedNetworkNamespace&) = delete;
  SavedNetworkNamespace& operator=(const SavedNetworkNamespace&) = delete;
  // Whether the namespace could be opened (then it is restored).
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_LINK_TESTBED_H_
