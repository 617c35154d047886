// Every pair of session option values, in short real sessions on loopback
// (ctest label `matrix`): a feature tested only alone is a crash waiting
// in the pair nobody tried (review A2 was uring-zc with registered
// buffers and a sealed, staged payload).
//
// kOptions is the table: an option joins the matrix by being declared
// there, with its values and how each sets up a session. The rows come
// from tests/matrix/pairwise.h with ValidateOptions as the judge of what
// the library accepts (ValidateSession: the options and the region's page
// size); a pair it refuses with every other value gets a row that checks
// the refusal comes up front, with a message, from ValidateSession,
// Receiver::Listen and Sender::Connect alike.
//
// Each accepted row runs a session whose destination must end
// byte-identical and verified: three live rounds over a region that
// holds zero, text-like, random and never-touched pages while pages
// change between rounds, then a final round, or a post-copy switch whose
// missing pages are pushed and faulted in.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "ramferry/options.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/matrix/pairwise.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"
#include "tests/support/uffd_skip.h"

namespace ramferry::matrix {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

// What a row sets up: the session's options and the region's shape.
struct SessionSetup {
  SessionOptions options = testing::InsecureOptions();
  uint32_t page_size = 4096;
  bool postcopy = false;
  bool file = false;  // regions map a memfd (Region::fd), not anonymous
};

struct MatrixOption {
  std::string name;
  std::vector<std::string> values;
  std::function<void(SessionSetup&, size_t)> apply;
};

std::vector<MatrixOption> Options() {
  const std::vector<TransportKind> kinds = testing::TransportsWith(0);
  std::vector<std::string> kind_names;
  for (TransportKind k : kinds) kind_names.push_back(testing::TestName(k));
  const Protection protections[] = {Protection::kNone, Protection::kMac,
                                    Protection::kEncrypt};
  const Compression compressions[] = {Compression::kOff, Compression::kOn,
                                      Compression::kAuto};
  const Delta deltas[] = {Delta::kOff, Delta::kOn, Delta::kAuto};
  const CompletionPolicy policies[] = {CompletionPolicy::kWrap,
                                       CompletionPolicy::kSlot,
                                       CompletionPolicy::kEach};
  const uint32_t packet_pages[] = {1, 128, SessionOptions{}.max_packet_pages};
  const uint32_t channels[] = {1, 2, 8};
  auto flag = [](bool SessionOptions::*field) {
    return [field](SessionSetup& s, size_t v) { s.options.*field = v != 0; };
  };
  return {
      {"transport", kind_names,
       [kinds](SessionSetup& s, size_t v) {
         s.options.transport = kinds[v];
         testing::UseTransportHost(s.options);
       }},
      {"protect",
       {"none", "mac", "encrypt"},
       [protections](SessionSetup& s, size_t v) {
         s.options.protect = protections[v];
         if (v != 0) {
           s.options.insecure = false;
           s.options.auth_key = "matrix-test-key-0123456789abcdef";
         }
       }},
      {"compress",
       {"off", "on", "auto"},
       [compressions](SessionSetup& s, size_t v) {
         s.options.compression = compressions[v];
       }},
      {"delta",
       {"off", "on", "auto"},
       [deltas](SessionSetup& s, size_t v) { s.options.delta = deltas[v]; }},
      {"registered", {"off", "on"}, flag(&SessionOptions::registered_buffers)},
      {"completion",
       {"wrap", "slot", "each"},
       [policies](SessionSetup& s, size_t v) {
         s.options.completion = policies[v];
       }},
      {"survive", {"off", "on"}, flag(&SessionOptions::survive_channel_loss)},
      {"zero", {"off", "on"}, flag(&SessionOptions::zero_pages)},
      {"untouched", {"off", "on"}, flag(&SessionOptions::skip_untouched)},
      {"postcopy",
       {"off", "on"},
       [](SessionSetup& s, size_t v) {
         s.options.postcopy = v != 0;
         s.postcopy = v != 0;
       }},
      {"page",
       {"4k", "2m"},
       [](SessionSetup& s, size_t v) {
         s.page_size = v == 0 ? 4096 : 2u << 20;
       }},
      {"packet",
       {"p1", "p128", absl::StrCat("p", packet_pages[2])},
       [packet_pages](SessionSetup& s, size_t v) {
         s.options.packet_pages = packet_pages[v];
       }},
      {"memory",
       {"anon", "file"},
       [](SessionSetup& s, size_t v) { s.file = v != 0; }},
      {"channels",
       {"c1", "c2", "c8"},
       [channels](SessionSetup& s, size_t v) {
         s.options.channels = channels[v];
       }},
  };
}

const std::vector<MatrixOption>& Table() {
  static const std::vector<MatrixOption> table = Options();
  return table;
}

SessionSetup Build(const std::vector<size_t>& values) {
  SessionSetup s;
  s.options.header_slots = 64;  // the header array wraps within a session
  for (size_t i = 0; i < Table().size(); ++i) Table()[i].apply(s, values[i]);
  return s;
}

std::vector<size_t> Counts() {
  std::vector<size_t> counts;
  for (const MatrixOption& o : Table()) counts.push_back(o.values.size());
  return counts;
}

const std::vector<Row>& Rows() {
  static const std::vector<Row> rows =
      AllPairs(Counts(), [](const std::vector<size_t>& values) {
        const SessionSetup s = Build(values);
        Region r;
        r.id = 1;
        r.page_size = s.page_size;
        // The destination refuses at Listen what it cannot place into:
        // post-copy places into private anonymous memory only.
        if (s.postcopy && s.file) return false;
        return ValidateSession(s.options, {&r, 1}).ok();
      });
  return rows;
}

std::string RowName(const Row& row, size_t index) {
  std::string name = absl::StrFormat("r%02d", index);
  for (size_t i = 0; i < Table().size(); ++i) {
    absl::StrAppend(&name, "_", Table()[i].values[row.values[i]]);
  }
  if (row.refused) absl::StrAppend(&name, "_refused");
  return absl::StrReplaceAll(name, {{"-", "_"}});
}

// Memory aligned to 2 MiB, so a region of either page size starts on a
// page: anonymous, or a memfd mapped shared (fd set); unmapped and closed
// when it goes.
struct Memory {
  Memory(uint64_t bytes, bool file) : bytes(bytes) {
    const uint64_t align = 2u << 20;
    raw_bytes = bytes + align;
    raw =
        mmap(nullptr, raw_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
      raw = nullptr;
      return;
    }
    const uintptr_t a = reinterpret_cast<uintptr_t>(raw);
    auto* at = reinterpret_cast<uint8_t*>((a + align - 1) & ~(align - 1));
    if (file) {
      fd = memfd_create("matrix", MFD_CLOEXEC);
      if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) return;
    }
    void* m =
        mmap(at, bytes, PROT_READ | PROT_WRITE,
             MAP_FIXED | (file ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS),
             file ? fd : -1, 0);
    if (m != MAP_FAILED) base = static_cast<uint8_t*>(m);
  }
  ~Memory() {
    if (raw != nullptr) munmap(raw, raw_bytes);
    if (fd >= 0) close(fd);
  }
  Region AsRegion(uint32_t page_size) const {
    Region r{1, "matrix", base, bytes, page_size};
    r.fd = fd;
    return r;
  }
  void* raw = nullptr;
  uint64_t raw_bytes = 0;
  uint8_t* base = nullptr;
  uint64_t bytes;
  int fd = -1;
};

// Writes `page` of `r` with bytes of `kind`: 0 zero, 1 text-like, else
// random from `rng`.
void Fill(const Region& r, uint64_t page, int kind, std::mt19937_64& rng) {
  uint8_t* p = r.page(page);
  if (kind == 0) {
    std::memset(p, 0, r.page_size);
  } else if (kind == 1) {
    static constexpr char kWords[] = "the pages go over every channel, ";
    for (uint64_t i = 0; i < r.page_size; ++i) {
      p[i] = kWords[(i + page) % (sizeof kWords - 1)];
    }
  } else {
    auto* w = reinterpret_cast<uint64_t*>(p);
    for (uint64_t i = 0; i < r.page_size / 8; ++i) w[i] = rng();
  }
}

class MatrixTest : public ::testing::TestWithParam<size_t> {};

TEST(MatrixPairsTest, EveryPairOfValuesIsHeld) {
  EXPECT_EQ(MissingPairs(Counts(), Rows()), 0u);
  size_t refused = 0;
  for (const Row& r : Rows()) refused += r.refused ? 1 : 0;
  size_t pairs = 0;
  const std::vector<size_t> counts = Counts();
  for (size_t i = 0; i < counts.size(); ++i) {
    for (size_t j = i + 1; j < counts.size(); ++j) {
      pairs += counts[i] * counts[j];
    }
  }
  std::printf(
      "[matrix] %zu options, %zu pairs of values, %zu rows (%zu "
      "refused up front)\n",
      counts.size(), pairs, Rows().size(), refused);
}

TEST_P(MatrixTest, EndsByteIdenticalOrIsRefusedUpFront) {
  const Row& row = Rows()[GetParam()];
  SessionSetup setup = Build(row.values);
  SessionOptions& opt = setup.options;
  const uint64_t bytes = testing::UnderSanitizer() ? 8u << 20 : 16u << 20;
  Memory src_mem(bytes, setup.file), dst_mem(bytes, setup.file);
  ASSERT_NE(src_mem.base, nullptr);
  ASSERT_NE(dst_mem.base, nullptr);
  const Region src = src_mem.AsRegion(setup.page_size);
  const Region dst = dst_mem.AsRegion(setup.page_size);

  if (row.refused) {
    // Refused before a connection: by the options and page size on both
    // ends, each saying what ValidateSession says; or by the destination's
    // memory at Listen, where post-copy meets the shared mapping of a file
    // (the one pair Rows() refuses past ValidateSession).
    const absl::Status v = ValidateSession(opt, {&src, 1});
    const auto refusal =
        v.ok() ? StatusIs(absl::StatusCode::kUnimplemented,
                          HasSubstr(std::string("is a shared mapping")))
               : StatusIs(v.code(), HasSubstr(std::string(v.message())));
    auto rx = Receiver::Listen(opt, {&dst, 1});
    ASSERT_THAT(rx, refusal) << "a refused row must be refused up front";
    if (!v.ok()) {
      EXPECT_THAT(Sender::Connect(opt, {&src, 1}), refusal);
    }
    std::printf("[matrix] refused: %s\n",
                std::string(rx.status().message()).c_str());
    return;
  }
  if (std::string why = testing::WhyUnavailable(opt.transport); !why.empty()) {
    GTEST_SKIP() << why;
  }
  if (setup.postcopy) {
    if (std::string why = testing::UserfaultfdSkipReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
  }

  // Zero, text-like and random pages; the last eighth never touched.
  const uint64_t pages = src.page_count();
  std::mt19937_64 rng(GetParam() + 1);
  const uint64_t touched = pages - pages / 8;
  for (uint64_t p = 0; p < touched; ++p) {
    Fill(src, p, p < pages / 4 ? 0 : p < pages / 2 ? 1 : 2, rng);
  }

  testing::ServingReceiver rx(opt, {dst});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(pages);
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
    ASSERT_OK(r) << "round " << round;
    // Pages change between rounds, of every kind.
    for (uint64_t i = 0; i < std::max<uint64_t>(pages / 16, 1); ++i) {
      const uint64_t p = rng() % touched;
      Fill(src, p, static_cast<int>(rng() % 3), rng);
      dirty.Set(p);
    }
  }
  if (setup.postcopy) {
    ASSERT_OK((*sender)->StartPostcopy(bitmaps));
    absl::Status done = (*sender)->CompletePostcopy();
    ASSERT_OK(done);
  } else {
    absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
    ASSERT_OK(r) << "final round";
  }
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->pages_mismatched << " pages differ";
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(testing::SameBytes(src, dst));
}

std::vector<size_t> RowIndexes() {
  std::vector<size_t> v(Rows().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Pairs, MatrixTest, ::testing::ValuesIn(RowIndexes()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return RowName(Rows()[info.param], info.param);
                         });

}  // namespace
}  // namespace ramferry::matrix
