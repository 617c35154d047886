// HandOverMemory and AdoptedMemory (ramferry/memory_handoff.h): the
// destination passes the memory it received to the process that runs on.
#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/owned_fd.h"
#include "base/status_util.h"
#include "handoff/handoff_io.h"
#include "handoff/shared_mapping.h"
#include "handoff/unix_seqpacket.h"
#include "proto/memory_handoff.h"
#include "ramferry/memory_handoff.h"

namespace ramferry {
namespace {

using base::OwnedFd;

class AdoptedMemoryImpl final : public AdoptedMemory {
 public:
  AdoptedMemoryImpl(std::string path, handoff::SeqpacketListener listener)
      : path_(std::move(path)), listener_(std::move(listener)) {}

  absl::Status Wait(absl::Duration timeout) override {
    if (!regions_.empty()) return absl::OkStatus();
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      absl::StatusOr<OwnedFd> conn = handoff::AcceptSeqpacket(
          listener_.get(), deadline - absl::Now(), nullptr);
      if (!conn.ok()) {
        return base::Annotate(conn.status(),
                              absl::StrCat("no memory handed over at ", path_));
      }
      absl::Status s = Adopt(conn->get());
      if (s.ok()) {
        listener_.Close();
        return s;
      }
      // A bad offer is refused (the destination sees the socket close
      // without ADOPTED) and the next one awaited: the memory to run on
      // must be right, not merely the first that came.
      if (absl::Now() >= deadline) return s;
    }
  }

  absl::Span<const SharedRegion> regions() const override { return regions_; }

 private:
  absl::Status Adopt(int conn) {
    absl::StatusOr<handoff::ReceivedOffer> p = handoff::ReceiveOffer(
        conn, proto::OfferKind::kHandOver, absl::Seconds(10));
    if (!p.ok()) return p.status();
    const proto::Offer* offer = &p->offer;
    std::vector<handoff::SharedMapping> maps;
    std::vector<SharedRegion> regions;
    for (size_t i = 0; i < offer->regions.size(); ++i) {
      const proto::OfferedRegion& r = offer->regions[i];
      absl::StatusOr<handoff::SharedMapping> m = handoff::SharedMapping::Map(
          p->fds[i].get(), r.fd_offset, r.length, /*writable=*/true);
      if (!m.ok()) return m.status();
      regions.push_back(
          {r.id, r.name, m->data(), r.length, p->fds[i].get(), r.fd_offset});
      maps.push_back(*std::move(m));
    }
    if (absl::Status s =
            handoff::SendCommand(conn, proto::HandoffCommand::kAdopted);
        !s.ok()) {
      return s;
    }
    fds_ = std::move(p->fds);
    maps_ = std::move(maps);
    regions_ = std::move(regions);
    return absl::OkStatus();
  }

  const std::string path_;
  handoff::SeqpacketListener listener_;
  std::vector<OwnedFd> fds_;
  std::vector<handoff::SharedMapping> maps_;
  std::vector<SharedRegion> regions_;
};

}  // namespace

absl::Status HandOverMemory(const std::string& socket_path,
                            absl::Span<const SharedRegion> regions,
                            absl::Duration timeout) {
  absl::StatusOr<std::vector<uint8_t>> encoded =
      handoff::EncodeOfferOf(proto::OfferKind::kHandOver, 0, regions);
  if (!encoded.ok()) return encoded.status();
  std::vector<int> fds;
  for (const SharedRegion& r : regions) fds.push_back(r.fd);
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<OwnedFd> conn =
      handoff::ConnectSeqpacket(socket_path, timeout);
  if (!conn.ok()) return conn.status();
  if (absl::Status s = handoff::SendPacket(conn->get(), *encoded, fds);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<proto::CommandMessage> c = handoff::ReceiveCommand(
      conn->get(), std::max(deadline - absl::Now(), absl::Seconds(1)));
  if (absl::IsUnavailable(c.status())) {
    return absl::UnavailableError(absl::StrCat(
        "the process at ", socket_path,
        " refused the memory (see its error): ", c.status().message()));
  }
  if (!c.ok()) return c.status();
  if (c->type != proto::HandoffCommand::kAdopted) {
    return absl::InternalError(absl::StrCat("the adopting process answered ",
                                            proto::HandoffCommandName(c->type),
                                            ", not ADOPTED"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AdoptedMemory>> AdoptedMemory::Listen(
    const std::string& socket_path) {
  absl::StatusOr<handoff::SeqpacketListener> listener =
      handoff::ListenSeqpacket(socket_path);
  if (!listener.ok()) return listener.status();
  return std::make_unique<AdoptedMemoryImpl>(socket_path, *std::move(listener));
}

}  // namespace ramferry
