#include "engine/pages/landings.h"

namespace ramferry::engine {

void Landings::Data(size_t index, uint32_t page_size,
                    absl::Span<const uint64_t> run_offsets,
                    absl::Span<const iovec> runs, uint64_t epoch) {
  if (t_.unauthentic != nullptr) {
    for (size_t i = 0; i < runs.size(); ++i) {
      t_.unauthentic->Clear(index, run_offsets[i] / page_size,
                            runs[i].iov_len / page_size, epoch);
    }
  }
  if (t_.digests != nullptr) t_.digests->Record(index, run_offsets, runs);
  if (t_.zeros != nullptr) t_.zeros->NoteData(index, run_offsets, runs);
}

void Landings::Delta(size_t index, absl::Span<const uint64_t> run_offsets,
                     absl::Span<const iovec> runs) {
  if (t_.digests != nullptr) t_.digests->Record(index, run_offsets, runs);
  if (t_.zeros != nullptr) t_.zeros->NoteData(index, run_offsets, runs);
}

void Landings::Zero(size_t index, uint64_t first, uint64_t count,
                    uint64_t epoch) {
  if (t_.held != nullptr) t_.held->Set(index, first, count);
  if (t_.unauthentic != nullptr) {
    t_.unauthentic->Clear(index, first, count, epoch);
  }
  if (t_.digests != nullptr) t_.digests->RecordZero(index, first, count);
}

void Landings::Held(size_t index, uint32_t page_size,
                    absl::Span<const uint64_t> run_offsets,
                    absl::Span<const iovec> runs) {
  if (t_.held == nullptr) return;
  for (size_t i = 0; i < runs.size(); ++i) {
    t_.held->Set(index, run_offsets[i] / page_size,
                 runs[i].iov_len / page_size);
  }
}

void Landings::Placed(size_t index, uint64_t first, uint64_t count,
                      const uint8_t* src) {
  if (t_.digests != nullptr) t_.digests->RecordPlaced(index, first, count, src);
}

void Landings::ZeroPlaced(size_t index, uint64_t first, uint64_t count) {
  if (t_.digests != nullptr) t_.digests->RecordZeroPlaced(index, first, count);
}

void Landings::Unfinished(size_t index, uint32_t page_size,
                          absl::Span<const uint64_t> run_offsets,
                          absl::Span<const iovec> runs, bool sealed) {
  if (t_.zeros != nullptr) t_.zeros->NoteData(index, run_offsets, runs);
  if (!sealed || t_.unauthentic == nullptr) return;
  for (size_t i = 0; i < runs.size(); ++i) {
    t_.unauthentic->Mark(index, run_offsets[i] / page_size,
                         runs[i].iov_len / page_size);
  }
}

}  // namespace ramferry::engine
