// The C++ API through libramferry.so: a session on loopback, both ends in
// this process, one round, verify, finish. Exit status 0 when verified.
#include <cstdio>
#include <thread>

#include "ramferry/dirty_bitmap.h"
#include "ramferry/options.h"
#include "ramferry/receiver.h"
#include "ramferry/region.h"
#include "ramferry/sender.h"

int main() {
  constexpr uint64_t kLength = 8 << 20;
  auto src = ramferry::MappedMemory::Allocate(kLength);
  auto dst = ramferry::MappedMemory::Allocate(kLength);
  if (!src.ok() || !dst.ok()) return 1;
  ramferry::FillRandom((*src)->data(), kLength, 7);
  ramferry::Region s{1, "ram", (*src)->data(), kLength};
  ramferry::Region d{1, "ram", (*dst)->data(), kLength};
  ramferry::SessionOptions opt;
  opt.insecure = true;
  auto rx = ramferry::Receiver::Listen(opt, {&d, 1});
  if (!rx.ok()) return 1;
  absl::Status served;
  std::thread serve([&] { served = (*rx)->Serve(); });
  opt.port = (*rx)->port();
  auto tx = ramferry::Sender::Connect(opt, {&s, 1});
  if (!tx.ok()) {
    (*rx)->Abort(tx.status());
    serve.join();
    return 1;
  }
  ramferry::DirtyBitmap dirty(s.page_count());
  dirty.SetAll();
  ramferry::DirtyBitmap* bitmaps[] = {&dirty};
  auto round = (*tx)->SendRound(bitmaps);
  auto report = (*tx)->Verify();
  absl::Status done = (*tx)->Finish();
  serve.join();
  const bool ok =
      round.ok() && report.ok() && report->ok() && done.ok() && served.ok();
  std::printf("cxx_consumer: %s\n", ok ? "verified" : "FAILED");
  return ok ? 0 : 1;
}
