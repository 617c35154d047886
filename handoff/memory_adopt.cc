// HandOverMemory and AdoptedMemory (ramferry/memory_handoff.h): the
// destination passes the memory it received to the process that runs on.
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/owned_fd.h"
#include "base/status_macros.h"
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
        return base::Annotate(
            conn.status(),
            absl::StrCat("no memory handed over at ", path_,
                         refused_.ok() ? "" : "; the last offer was refused: ",
                         refused_.message()));
      }
      absl::Status s = Adopt(conn->get());
      if (s.ok()) {
        listener_.Close();
        return s;
      }
      // A bad offer is refused (the destination sees the socket close
      // without ADOPTED, or REFUSED with the reason) and the next one
      // awaited: the memory to run on must be right, not merely the first
      // that came.
      refused_ = s;
      if (absl::Now() >= deadline) return s;
    }
  }

  absl::Span<const SharedRegion> regions() const override { return regions_; }

 private:
  absl::Status Adopt(int conn) {
    RAMFERRY_ASSIGN_OR_RETURN(
        handoff::ReceivedOffer p,
        handoff::ReceiveOffer(conn, proto::OfferKind::kHandOver,
                              absl::Seconds(10)));
    const proto::Offer* offer = &p.offer;
    std::vector<handoff::SharedMapping> maps;
    std::vector<SharedRegion> regions;
    for (size_t i = 0; i < offer->regions.size(); ++i) {
      const proto::OfferedRegion& r = offer->regions[i];
      absl::StatusOr<handoff::SharedMapping> m = handoff::SharedMapping::Map(
          p.fds[i].get(), r.fd_offset, r.length, /*writable=*/true);
      if (!m.ok()) return m.status();
      regions.push_back(
          {r.id, r.name, m->data(), r.length, p.fds[i].get(), r.fd_offset});
      maps.push_back(*std::move(m));
    }
    RAMFERRY_RETURN_IF_ERROR(CheckDigests(conn, *offer, regions));
    RAMFERRY_RETURN_IF_ERROR(
        handoff::SendCommand(conn, proto::HandoffCommand::kAdopted));
    fds_ = std::move(p.fds);
    maps_ = std::move(maps);
    regions_ = std::move(regions);
    return absl::OkStatus();
  }

  // With digests in the offer, the memory as mapped here must be what the
  // giver digested (the workload's at its pause): anything else is
  // refused with the reason, and nothing of it is kept.
  static absl::Status CheckDigests(int conn, const proto::Offer& offer,
                                   const std::vector<SharedRegion>& mapped) {
    if ((offer.flags & proto::kOfferRegionDigests) == 0) {
      return absl::OkStatus();
    }
    for (size_t i = 0; i < mapped.size(); ++i) {
      const uint64_t got = RegionDigest(mapped[i].base, mapped[i].length);
      if (got == offer.regions[i].digest) continue;
      (void)handoff::SendCommand(
          conn, proto::HandoffCommand::kRefused,
          static_cast<uint64_t>(proto::RefusalReason::kDigestMismatch));
      return absl::DataLossError(absl::StrFormat(
          "refused the memory handed over: region %d's digest is %016x, the "
          "giver's %016x (it changed after the giver digested it, or is not "
          "what was offered)",
          mapped[i].id, got, offer.regions[i].digest));
    }
    return absl::OkStatus();
  }

  const std::string path_;
  handoff::SeqpacketListener listener_;
  absl::Status refused_;  // why the last offer was refused
  std::vector<OwnedFd> fds_;
  std::vector<handoff::SharedMapping> maps_;
  std::vector<SharedRegion> regions_;
};

}  // namespace

absl::Status HandOverMemory(const std::string& socket_path,
                            absl::Span<const SharedRegion> regions,
                            absl::Duration timeout) {
  // Checked before connecting: a bad region list fails here, not at the
  // adopter.
  if (absl::StatusOr<std::vector<uint8_t>> encoded =
          handoff::EncodeOfferOf(proto::OfferKind::kHandOver, 0, regions);
      !encoded.ok()) {
    return encoded.status();
  }
  const absl::Time deadline = absl::Now() + timeout;
  RAMFERRY_ASSIGN_OR_RETURN(OwnedFd conn,
                            handoff::ConnectSeqpacket(socket_path, timeout));
  return handoff::OfferToAdopter(
      conn.get(), socket_path, regions, {},
      std::max(deadline - absl::Now(), absl::Seconds(1)));
}

uint64_t RegionDigest(const void* base, uint64_t length) {
  return XXH3_64bits(base, length);
}

absl::StatusOr<std::unique_ptr<AdoptedMemory>> AdoptedMemory::Listen(
    const std::string& socket_path) {
  absl::StatusOr<handoff::SeqpacketListener> listener =
      handoff::ListenSeqpacket(socket_path);
  if (!listener.ok()) return listener.status();
  return std::make_unique<AdoptedMemoryImpl>(socket_path, *std::move(listener));
}

}  // namespace ramferry
