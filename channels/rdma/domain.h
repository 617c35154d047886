// rdma_domain: one protection domain per session, end and device, and the
// memory registrations of the session's regions in it, shared by every
// channel of the session: a region is pinned and registered once, not once
// per channel, and a key one channel obtained is valid on the others' queue
// pairs (they share the domain).
//
// On demand, a chunk is registered by the first channel that needs it;
// later channels find it registered (the destination still answers each
// channel's REGISTER_REQUEST, since which chunks went as zero is per queue
// pair, but pins nothing again). Pin-all registers each whole region once,
// on a thread of its own from the first channel's RegisterRegion, so the
// other channels connect meanwhile; the first use waits for it.
//
// Thread safety: every method may be called from any channel's thread.
// Lookups of a registered chunk take no lock; registering takes the
// domain's mutex (once per chunk per session).
#ifndef RAMFERRY_CHANNELS_RDMA_DOMAIN_H_
#define RAMFERRY_CHANNELS_RDMA_DOMAIN_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/handshake.h"

namespace ramferry::channels {

class RdmaDomain {
 public:
  enum class End { kSource, kDestination };

  // The domain of (`verbs`, `session`, `end`), made by the first channel
  // that asks; every later channel of that session and end gets the same
  // one. It goes with the last channel's reference.
  static absl::StatusOr<std::shared_ptr<RdmaDomain>> ForSession(
      ibv_context* verbs, const proto::SessionId& session, End end);
  ~RdmaDomain();
  RdmaDomain(const RdmaDomain&) = delete;
  RdmaDomain& operator=(const RdmaDomain&) = delete;

  ibv_pd* pd() const { return pd_; }

  struct Region;
  // What a registration cost: whoever made it counts it.
  struct Registered {
    ibv_mr* mr = nullptr;
    bool made_now = false;  // this call registered it
    absl::Duration took;
    uint64_t bytes = 0;
  };

  // Region `id` of `chunk_bytes` chunks; every channel names the same
  // base, length and chunk size (another is an error). `access`: what
  // registrations of it allow. With `whole`, its whole registration starts
  // now, on a thread of its own (pin-all). The region lives as long as the
  // domain.
  absl::StatusOr<Region*> AddRegion(uint32_t id, uint8_t* base, uint64_t length,
                                    uint64_t chunk_bytes, int access,
                                    bool whole);
  // Pin-all: the region's whole registration, waited for.
  absl::StatusOr<Registered> Whole(Region* region);
  // On demand: chunk `chunk` of the region, registered on first use.
  absl::StatusOr<Registered> Chunk(Region* region, uint64_t chunk);

  // Bytes pinned by registrations of regions, all of them.
  uint64_t registered_bytes() const { return registered_bytes_.load(); }

  // Registrations of one region (the fields are the domain's).
  struct Region {
    uint8_t* base = nullptr;
    uint64_t length = 0;
    uint64_t chunk_bytes = 0;
    int access = 0;
    std::unique_ptr<std::atomic<ibv_mr*>[]> chunks;
    uint64_t chunk_count = 0;
    // Pin-all, under mu_: the registration thread's outcome.
    std::thread registering;
    bool whole_done = false;
    ibv_mr* whole = nullptr;
    absl::Status whole_status;
    absl::Duration whole_took;
    bool whole_counted = false;  // Whole() reported made_now once
  };

 private:
  explicit RdmaDomain(ibv_pd* pd) : pd_(pd) {}
  void RegisterWhole(Region* r);

  ibv_pd* const pd_;
  std::mutex mu_;
  std::condition_variable whole_cv_;
  std::map<uint32_t, Region> regions_;  // nodes are stable
  std::atomic<uint64_t> registered_bytes_{0};
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_RDMA_DOMAIN_H_
