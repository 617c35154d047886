// The destination end of a transfer session: listens, accepts one source,
// and writes its pages into the registered regions until FINISH.
//
//   auto rx = ramferry::Receiver::Listen(opt, regions);
//   std::cout << "listening on " << (*rx)->port();
//   absl::Status s = (*rx)->Serve();   // blocks until FINISH or an error
#ifndef RAMFERRY_RECEIVER_H_
#define RAMFERRY_RECEIVER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"

namespace ramferry {

class ReceiverImpl;

class Receiver {
 public:
  // Binds and listens; `regions` must outlive the Receiver. The source's
  // region table must match them (ids, lengths, page sizes).
  static absl::StatusOr<std::unique_ptr<Receiver>> Listen(
      const SessionOptions& options, absl::Span<const Region> regions);
  ~Receiver();

  uint16_t port() const;

  // Serves one session to its end: OK once the source finished and every
  // channel's data is in place; otherwise the error that ended it, naming
  // the channel and the cause.
  absl::Status Serve();

  // Ends Serve() from any thread.
  void Abort(const absl::Status& reason);

  SessionStats stats() const;
  // Rounds fully applied so far.
  uint64_t applied_rounds() const;
  // Pages whose digests the source asked for (Sender::Verify). After a
  // successful Serve, equal to the total page count when the source
  // verified everything before finishing.
  uint64_t verified_pages() const;

 private:
  explicit Receiver(std::unique_ptr<ReceiverImpl> impl);
  std::unique_ptr<ReceiverImpl> impl_;
};

}  // namespace ramferry

#endif  // RAMFERRY_RECEIVER_H_
