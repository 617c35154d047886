#include "channels/rdma/domain.h"

#include <algorithm>
#include <array>
#include <tuple>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "channels/rdma/connection.h"

namespace ramferry::channels {
namespace {

using Key = std::tuple<ibv_context*, std::array<uint8_t, 16>, int>;

// Every live domain of this process, by device, session and end.
struct Registry {
  std::mutex mu;
  std::map<Key, std::weak_ptr<RdmaDomain>> domains;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: used at exit
  return *r;
}

}  // namespace

absl::StatusOr<std::shared_ptr<RdmaDomain>> RdmaDomain::ForSession(
    ibv_context* verbs, const proto::SessionId& session, End end) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::erase_if(reg.domains, [](const auto& d) { return d.second.expired(); });
  const Key key{verbs, session.bytes, static_cast<int>(end)};
  if (auto it = reg.domains.find(key); it != reg.domains.end()) {
    if (std::shared_ptr<RdmaDomain> d = it->second.lock()) return d;
  }
  ibv_pd* pd = ibv_alloc_pd(verbs);
  if (pd == nullptr) return RdmaErrno("ibv_alloc_pd");
  std::shared_ptr<RdmaDomain> d(new RdmaDomain(pd));
  reg.domains[key] = d;
  return d;
}

RdmaDomain::~RdmaDomain() {
  for (auto& [id, r] : regions_) {
    if (r.registering.joinable()) r.registering.join();
    if (r.whole != nullptr) ibv_dereg_mr(r.whole);
    for (uint64_t c = 0; c < r.chunk_count; ++c) {
      if (ibv_mr* m = r.chunks[c].load(); m != nullptr) ibv_dereg_mr(m);
    }
  }
  // Every queue pair and the channels' own buffers on it went before the
  // last reference did.
  ibv_dealloc_pd(pd_);
}

absl::StatusOr<RdmaDomain::Region*> RdmaDomain::AddRegion(
    uint32_t id, uint8_t* base, uint64_t length, uint64_t chunk_bytes,
    int access, bool whole) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, added] = regions_.try_emplace(id);
  Region& r = it->second;
  if (!added) {
    if (r.base != base || r.length != length || r.chunk_bytes != chunk_bytes ||
        r.access != access) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "region %d registered again as %d bytes at %p in %d-byte chunks; "
          "the session has it as %d bytes at %p in %d-byte chunks",
          id, length, base, chunk_bytes, r.length, r.base, r.chunk_bytes));
    }
    return &r;
  }
  r.base = base;
  r.length = length;
  r.chunk_bytes = chunk_bytes;
  r.access = access;
  r.chunk_count = (length + chunk_bytes - 1) / chunk_bytes;
  r.chunks = std::make_unique<std::atomic<ibv_mr*>[]>(r.chunk_count);
  if (whole) r.registering = std::thread([this, &r] { RegisterWhole(&r); });
  return &r;
}

void RdmaDomain::RegisterWhole(Region* r) {
  const absl::Time start = absl::Now();
  ibv_mr* mr = ibv_reg_mr(pd_, r->base, r->length, r->access);
  absl::Status s =
      mr != nullptr
          ? absl::OkStatus()
          : RdmaErrno(absl::StrFormat("ibv_reg_mr of a whole region (%d bytes)",
                                      r->length));
  if (mr != nullptr) registered_bytes_ += r->length;
  std::lock_guard<std::mutex> lock(mu_);
  r->whole = mr;
  r->whole_status = std::move(s);
  r->whole_took = absl::Now() - start;
  r->whole_done = true;
  whole_cv_.notify_all();
}

absl::StatusOr<RdmaDomain::Registered> RdmaDomain::Whole(Region* r) {
  std::unique_lock<std::mutex> lock(mu_);
  whole_cv_.wait(lock, [r] { return r->whole_done; });
  if (!r->whole_status.ok()) return r->whole_status;
  Registered out{r->whole, !r->whole_counted, r->whole_took, r->length};
  r->whole_counted = true;
  return out;
}

absl::StatusOr<RdmaDomain::Registered> RdmaDomain::Chunk(Region* r,
                                                         uint64_t chunk) {
  if (chunk >= r->chunk_count) {
    return absl::OutOfRangeError(absl::StrFormat(
        "chunk %d of a region of %d chunks", chunk, r->chunk_count));
  }
  // Published with release after the registration: an MR seen here is
  // complete.
  if (ibv_mr* mr = r->chunks[chunk].load(std::memory_order_acquire)) {
    return Registered{mr, false, absl::ZeroDuration(), 0};
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (ibv_mr* mr = r->chunks[chunk].load(std::memory_order_relaxed)) {
    return Registered{mr, false, absl::ZeroDuration(), 0};
  }
  const uint64_t off = chunk * r->chunk_bytes;
  const uint64_t len = std::min(r->chunk_bytes, r->length - off);
  const absl::Time start = absl::Now();
  ibv_mr* mr = ibv_reg_mr(pd_, r->base + off, len, r->access);
  if (mr == nullptr) {
    return RdmaErrno(
        absl::StrFormat("ibv_reg_mr of chunk %d (%d bytes)", chunk, len));
  }
  registered_bytes_ += len;
  r->chunks[chunk].store(mr, std::memory_order_release);
  return Registered{mr, true, absl::Now() - start, len};
}

}  // namespace ramferry::channels
