// The C API (ramferry/ramferry.h) driven as a C program drives it: error
// codes and messages for bad input, a loopback migration with a live
// writer marking the caller's own bitmap words, stats, the progress and
// post-copy callbacks. Only ramferry.h and absl's StatusCode (to check the
// codes mirror it) are used.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/ramferry.h"
#include "tests/support/test_support.h"
#include "tests/support/uffd_skip.h"

namespace {

using ::testing::HasSubstr;

static_assert(RAMFERRY_OK == static_cast<int>(absl::StatusCode::kOk));
static_assert(RAMFERRY_CANCELLED ==
              static_cast<int>(absl::StatusCode::kCancelled));
static_assert(RAMFERRY_INVALID_ARGUMENT ==
              static_cast<int>(absl::StatusCode::kInvalidArgument));
static_assert(RAMFERRY_DEADLINE_EXCEEDED ==
              static_cast<int>(absl::StatusCode::kDeadlineExceeded));
static_assert(RAMFERRY_NOT_FOUND ==
              static_cast<int>(absl::StatusCode::kNotFound));
static_assert(RAMFERRY_ALREADY_EXISTS ==
              static_cast<int>(absl::StatusCode::kAlreadyExists));
static_assert(RAMFERRY_PERMISSION_DENIED ==
              static_cast<int>(absl::StatusCode::kPermissionDenied));
static_assert(RAMFERRY_RESOURCE_EXHAUSTED ==
              static_cast<int>(absl::StatusCode::kResourceExhausted));
static_assert(RAMFERRY_FAILED_PRECONDITION ==
              static_cast<int>(absl::StatusCode::kFailedPrecondition));
static_assert(RAMFERRY_ABORTED == static_cast<int>(absl::StatusCode::kAborted));
static_assert(RAMFERRY_OUT_OF_RANGE ==
              static_cast<int>(absl::StatusCode::kOutOfRange));
static_assert(RAMFERRY_UNIMPLEMENTED ==
              static_cast<int>(absl::StatusCode::kUnimplemented));
static_assert(RAMFERRY_INTERNAL ==
              static_cast<int>(absl::StatusCode::kInternal));
static_assert(RAMFERRY_UNAVAILABLE ==
              static_cast<int>(absl::StatusCode::kUnavailable));
static_assert(RAMFERRY_DATA_LOSS ==
              static_cast<int>(absl::StatusCode::kDataLoss));
static_assert(RAMFERRY_UNAUTHENTICATED ==
              static_cast<int>(absl::StatusCode::kUnauthenticated));

const char kKey[] = "0123456789abcdef0123456789abcdef";

// Anonymous memory of `length` bytes, unmapped at the end.
struct Memory {
  explicit Memory(uint64_t length) : length(length) {
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~Memory() {
    if (base != nullptr) munmap(base, length);
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  uint8_t* base;
  uint64_t length;
};

// One region of the session on both ends, with the source's bitmap words.
struct Pair {
  Pair(uint32_t id, uint64_t length, uint32_t page_size, uint64_t seed)
      : id(id),
        page_size(page_size),
        src(length),
        dst(length),
        words(ramferry_bitmap_words(length / page_size), 0) {
    std::mt19937_64 rng(seed);
    auto* w = reinterpret_cast<uint64_t*>(src.base);
    for (uint64_t i = 0; i < length / 8; ++i) w[i] = rng();
  }
  uint64_t pages() const { return src.length / page_size; }
  uint32_t id;
  uint32_t page_size;
  Memory src;
  Memory dst;
  std::vector<uint64_t> words;
};

// Tests read memory that a live writer wrote, and the destination's memory
// the session wrote, outside the engine: not instrumented for TSan (see
// tests/engine/transfer_test.cc).
__attribute__((no_sanitize("thread"))) bool Same(const Memory& a,
                                                 const Memory& b) {
  return std::memcmp(a.base, b.base, a.length) == 0;
}

__attribute__((no_sanitize("thread"))) void Store(uint8_t* at, uint64_t value) {
  *reinterpret_cast<volatile uint64_t*>(at) = value;
}

ramferry_options* KeyedOptions() {
  ramferry_options* opt = ramferry_options_new();
  EXPECT_EQ(ramferry_options_set_key(opt, kKey, 32), RAMFERRY_OK);
  return opt;
}

ramferry_regions* Regions(std::deque<Pair>& pairs, bool source) {
  ramferry_regions* r = ramferry_regions_new();
  for (Pair& p : pairs) {
    EXPECT_EQ(ramferry_regions_add(r, p.id, source ? p.src.base : p.dst.base,
                                   p.src.length, p.page_size),
              RAMFERRY_OK)
        << ramferry_regions_last_error(r);
  }
  return r;
}

// A receiver serving on its own thread.
struct Serving {
  Serving(ramferry_options* opt, std::deque<Pair>& pairs) {
    ramferry_regions* regions = Regions(pairs, /*source=*/false);
    status = ramferry_receiver_listen(opt, regions, &rx);
    ramferry_regions_free(regions);  // the receiver keeps its own copy
  }
  void Start() {
    thread = std::thread([this] { served = ramferry_receiver_serve(rx); });
  }
  uint16_t port() const {
    uint16_t p = 0;
    EXPECT_EQ(ramferry_receiver_port(rx, &p), RAMFERRY_OK);
    return p;
  }
  ~Serving() {
    if (thread.joinable()) {
      ramferry_receiver_abort(rx, "test over");
      thread.join();
    }
    ramferry_receiver_free(rx);
  }
  ramferry_receiver* rx = nullptr;
  ramferry_status status;
  std::thread thread;
  ramferry_status served = RAMFERRY_UNKNOWN;
};

TEST(CApiTest, VersionIsTheHeaders) {
  EXPECT_STREQ(ramferry_version(), RAMFERRY_VERSION);
  EXPECT_EQ(ramferry_version_number(),
            static_cast<uint32_t>(RAMFERRY_VERSION_MAJOR * 10000 +
                                  RAMFERRY_VERSION_MINOR * 100 +
                                  RAMFERRY_VERSION_PATCH));
}

TEST(CApiTest, StatusNames) {
  EXPECT_STREQ(ramferry_status_name(RAMFERRY_OK), "OK");
  EXPECT_STREQ(ramferry_status_name(RAMFERRY_INVALID_ARGUMENT),
               "INVALID_ARGUMENT");
  EXPECT_STREQ(ramferry_status_name(RAMFERRY_UNAUTHENTICATED),
               "UNAUTHENTICATED");
  EXPECT_STREQ(ramferry_status_name(static_cast<ramferry_status>(99)),
               "UNKNOWN");
  EXPECT_STREQ(ramferry_status_name(static_cast<ramferry_status>(-1)),
               "UNKNOWN");
}

TEST(CApiTest, NullHandlesAreRefusedWithAMessage) {
  ramferry_options_free(nullptr);
  ramferry_regions_free(nullptr);
  ramferry_sender_free(nullptr);
  ramferry_receiver_free(nullptr);
  EXPECT_STREQ(ramferry_options_last_error(nullptr), "");
  EXPECT_STREQ(ramferry_sender_last_error(nullptr), "");

  EXPECT_EQ(ramferry_options_set_host(nullptr, "x"), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("options is NULL"));
  EXPECT_EQ(ramferry_options_set_channels(nullptr, 2),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_regions_add(nullptr, 1, nullptr, 4096, 4096),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("regions is NULL"));
  EXPECT_EQ(ramferry_sender_send_round(nullptr, nullptr, 0, nullptr),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("sender is NULL"));
  EXPECT_EQ(ramferry_sender_finish(nullptr), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_sender_abort(nullptr, "x"), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_receiver_serve(nullptr), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("receiver is NULL"));
  uint16_t port;
  EXPECT_EQ(ramferry_receiver_port(nullptr, &port), RAMFERRY_INVALID_ARGUMENT);

  ramferry_sender* tx = reinterpret_cast<ramferry_sender*>(1);
  EXPECT_EQ(ramferry_sender_connect(nullptr, nullptr, &tx),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(tx, nullptr) << "a failed connect leaves *out NULL";
  EXPECT_EQ(ramferry_sender_connect(nullptr, nullptr, nullptr),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("out is NULL"));
}

// Every entry point of the session API, called with NULL in each pointer
// it takes (the handle, then an out-argument or a string of a live
// handle): an INVALID_ARGUMENT whose message names what was NULL, never a
// crash. The functions that return no status answer with a NULL, a zero
// or nothing.
TEST(CApiTest, EveryEntryRefusesNullWithAMessage) {
  struct Call {
    const char* what;
    std::function<ramferry_status()> call;
  };
  ramferry_options* opt = ramferry_options_new();
  ramferry_regions* regions = ramferry_regions_new();
  ASSERT_NE(opt, nullptr);
  ASSERT_NE(regions, nullptr);
  ramferry_options_set_insecure(opt, 1);
  void* base = mmap(nullptr, 4 * 4096, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(base, MAP_FAILED);
  ASSERT_EQ(ramferry_regions_add(regions, 1, base, 4 * 4096, 4096), RAMFERRY_OK)
      << ramferry_regions_last_error(regions);
  ramferry_receiver* rx = nullptr;
  ASSERT_EQ(ramferry_receiver_listen(opt, regions, &rx), RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_sender* tx = nullptr;
  ramferry_receiver* other = nullptr;  // a failed listen NULLs its out
  ramferry_stats stats{};
  stats.size = sizeof(stats);
  ramferry_round_result round{};
  round.size = sizeof(round);
  ramferry_verify_report report{};
  report.size = sizeof(report);
  uint64_t u64 = 0;
  uint32_t u32 = 0;
  size_t count = 0;
  int flag = 0;
  uint16_t port = 0;
  uint64_t word = 0;
  uint64_t* bitmaps[1] = {&word};
  ramferry_shared_regions* shared = ramferry_shared_regions_new();
  ASSERT_NE(shared, nullptr);
  ramferry_export* exp = nullptr;
  ramferry_hand_over_report hand_over{};
  hand_over.size = sizeof(hand_over);
  const std::vector<Call> calls = {
      // A NULL handle.
      {"options", [&] { return ramferry_options_set_host(nullptr, "h"); }},
      {"options", [&] { return ramferry_options_set_port(nullptr, 1); }},
      {"options",
       [&] { return ramferry_options_set_transport(nullptr, "tcp"); }},
      {"options", [&] { return ramferry_options_set_key_file(nullptr, "k"); }},
      {"options", [&] { return ramferry_options_set_key(nullptr, "k", 1); }},
      {"options", [&] { return ramferry_options_set_insecure(nullptr, 1); }},
      {"options", [&] { return ramferry_options_set_protect(nullptr, "mac"); }},
      {"options",
       [&] { return ramferry_options_set_compression(nullptr, "on"); }},
      {"options", [&] { return ramferry_options_set_verify(nullptr, "full"); }},
      {"options",
       [&] { return ramferry_options_set_max_bandwidth(nullptr, 1); }},
      {"options", [&] { return ramferry_options_set_postcopy(nullptr, 1); }},
      {"options",
       [&] {
         return ramferry_options_set_postcopy_urgent_channel(nullptr, 1);
       }},
      {"options",
       [&] {
         return ramferry_options_set_postcopy_resume_timeout_ms(nullptr, 1);
       }},
      {"options",
       [&] { return ramferry_options_set_connect_timeout_ms(nullptr, 1); }},
      {"options", [&] { return ramferry_options_set(nullptr, "port", "1"); }},
      {"regions", [&] { return ramferry_regions_set_file(nullptr, 1, 0, 0); }},
      {"sender",
       [&] { return ramferry_sender_start_round(nullptr, bitmaps, 1); }},
      {"sender", [&] { return ramferry_sender_await_round(nullptr, &round); }},
      {"sender", [&] { return ramferry_sender_verify(nullptr, &report); }},
      {"sender", [&] { return ramferry_sender_start_verify(nullptr); }},
      {"sender", [&] { return ramferry_sender_set_max_bandwidth(nullptr, 1); }},
      {"sender", [&] { return ramferry_sender_stats(nullptr, &stats); }},
      {"sender",
       [&] {
         return ramferry_sender_channel_counter(nullptr, 0, "pages", &u64);
       }},
      {"sender",
       [&] { return ramferry_sender_warning_count(nullptr, &count); }},
      {"sender", [&] { return ramferry_sender_commit_outcome(nullptr, &u32); }},
      {"sender",
       [&] {
         return ramferry_sender_set_progress(nullptr, nullptr, nullptr, 1);
       }},
      {"sender",
       [&] { return ramferry_sender_start_postcopy(nullptr, bitmaps, 1); }},
      {"sender", [&] { return ramferry_sender_complete_postcopy(nullptr); }},
      {"receiver", [&] { return ramferry_receiver_abort(nullptr, "x"); }},
      {"receiver", [&] { return ramferry_receiver_stats(nullptr, &stats); }},
      {"receiver",
       [&] {
         return ramferry_receiver_channel_counter(nullptr, 0, "pages", &u64);
       }},
      {"receiver",
       [&] { return ramferry_receiver_applied_rounds(nullptr, &u64); }},
      {"receiver",
       [&] { return ramferry_receiver_verified_pages(nullptr, &u64); }},
      {"receiver",
       [&] {
         return ramferry_receiver_set_progress(nullptr, nullptr, nullptr, 1);
       }},
      {"receiver",
       [&] { return ramferry_receiver_on_armed(nullptr, nullptr, nullptr); }},
      {"receiver",
       [&] { return ramferry_receiver_on_commit(nullptr, nullptr, nullptr); }},
      {"receiver",
       [&] { return ramferry_receiver_is_resident(nullptr, 1, 0, 1, &flag); }},
      {"receiver",
       [&] { return ramferry_receiver_wait_resident(nullptr, 1, 0, 1, 0); }},
      {"receiver",
       [&] { return ramferry_receiver_request_pages(nullptr, 1, 0, 1); }},
      {"receiver",
       [&] { return ramferry_receiver_release_postcopy(nullptr, &u64); }},
      // Live handles, a NULL argument.
      {"NULL", [&] { return ramferry_options_set_host(opt, nullptr); }},
      {"NULL", [&] { return ramferry_options_set_transport(opt, nullptr); }},
      {"NULL", [&] { return ramferry_options_set_key_file(opt, nullptr); }},
      {"NULL", [&] { return ramferry_options_set_key(opt, nullptr, 16); }},
      {"NULL", [&] { return ramferry_options_set_protect(opt, nullptr); }},
      {"NULL", [&] { return ramferry_options_set_compression(opt, nullptr); }},
      {"NULL", [&] { return ramferry_options_set_verify(opt, nullptr); }},
      {"NULL", [&] { return ramferry_options_set(opt, nullptr, "1"); }},
      {"NULL", [&] { return ramferry_options_set(opt, "port", nullptr); }},
      {"NULL",
       [&] { return ramferry_regions_add(regions, 2, nullptr, 4096, 4096); }},
      {"NULL", [&] { return ramferry_sender_connect(opt, nullptr, &tx); }},
      {"NULL", [&] { return ramferry_sender_connect(nullptr, regions, &tx); }},
      {"NULL",
       [&] {
         return ramferry_sender_resume_postcopy(opt, regions, nullptr, &tx);
       }},
      {"NULL", [&] { return ramferry_receiver_listen(opt, nullptr, &other); }},
      {"NULL",
       [&] { return ramferry_receiver_listen(nullptr, regions, &other); }},
      {"NULL", [&] { return ramferry_receiver_listen(opt, regions, nullptr); }},
      {"NULL", [&] { return ramferry_receiver_port(rx, nullptr); }},
      {"NULL", [&] { return ramferry_receiver_stats(rx, nullptr); }},
      {"NULL",
       [&] { return ramferry_receiver_channel_counter(rx, 0, nullptr, &u64); }},
      {"NULL",
       [&] {
         return ramferry_receiver_channel_counter(rx, 0, "pages", nullptr);
       }},
      {"NULL", [&] { return ramferry_receiver_applied_rounds(rx, nullptr); }},
      {"NULL", [&] { return ramferry_receiver_verified_pages(rx, nullptr); }},
      {"NULL",
       [&] { return ramferry_receiver_is_resident(rx, 1, 0, 1, nullptr); }},
      // The hand-over's (ramferry_export_listen_with and the one call).
      {"socket_path",
       [&] {
         return ramferry_export_listen_with(nullptr, shared, nullptr, nullptr,
                                            0, &exp);
       }},
      {"regions",
       [&] {
         return ramferry_export_listen_with("x", nullptr, nullptr, nullptr, 0,
                                            &exp);
       }},
      {"out",
       [&] {
         return ramferry_export_listen_with("x", shared, nullptr, nullptr, 0,
                                            nullptr);
       }},
      {"attach_socket",
       [&] {
         return ramferry_hand_over_attached(nullptr, "a", 1, 0, &hand_over);
       }},
      {"adopt_socket",
       [&] {
         return ramferry_hand_over_attached("a", nullptr, 1, 0, &hand_over);
       }},
  };
  for (const Call& c : calls) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.call(), RAMFERRY_INVALID_ARGUMENT) << ramferry_last_error();
    EXPECT_THAT(ramferry_last_error(), HasSubstr("NULL"));
    EXPECT_THAT(ramferry_last_error(), HasSubstr(c.what));
  }
  EXPECT_EQ(tx, nullptr);
  EXPECT_EQ(other, nullptr);
  EXPECT_EQ(exp, nullptr);
  // Bad arguments that are not NULL: an unknown export flag, a report
  // whose size is unset; neither reaches a socket.
  EXPECT_EQ(
      ramferry_export_listen_with("x", shared, nullptr, nullptr, 0x100, &exp),
      RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("unknown flags"));
  ramferry_hand_over_report unsized{};
  EXPECT_EQ(ramferry_hand_over_attached("a", "b", 1, 0, &unsized),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("size"));
  ramferry_shared_regions_free(shared);
  // No status to give: a NULL handle answers with nothing.
  EXPECT_EQ(ramferry_regions_count(nullptr), 0u);
  EXPECT_STREQ(ramferry_regions_last_error(nullptr), "");
  EXPECT_STREQ(ramferry_receiver_last_error(nullptr), "");
  EXPECT_EQ(ramferry_sender_warning(nullptr, 0), nullptr);
  EXPECT_EQ(ramferry_channel_counter_name(ramferry_channel_counter_count()),
            nullptr);
  EXPECT_EQ(ramferry_receiver_port(rx, &port), RAMFERRY_OK);
  EXPECT_NE(port, 0);
  ramferry_receiver_free(rx);
  ramferry_regions_free(regions);
  ramferry_options_free(opt);
  munmap(base, 4 * 4096);
}

// The structs a caller sizes: a larger one (a newer header's) gets the
// fields this library has and keeps its size and the rest; a smaller one
// (an older header's) gets only what fits; an unset size is refused.
TEST(CApiTest, StructSizesAreHonouredBothWays) {
  ramferry_options* opt = ramferry_options_new();
  ramferry_regions* regions = ramferry_regions_new();
  ramferry_options_set_insecure(opt, 1);
  void* base = mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(base, MAP_FAILED);
  ASSERT_EQ(ramferry_regions_add(regions, 1, base, 4096, 4096), RAMFERRY_OK)
      << ramferry_regions_last_error(regions);
  ramferry_receiver* rx = nullptr;
  ASSERT_EQ(ramferry_receiver_listen(opt, regions, &rx), RAMFERRY_OK)
      << ramferry_last_error();
  struct Bigger {
    ramferry_stats stats;
    uint8_t newer[64];
  } big;
  std::memset(&big, 0xab, sizeof big);
  big.stats.size = sizeof big;
  ASSERT_EQ(ramferry_receiver_stats(rx, &big.stats), RAMFERRY_OK);
  EXPECT_EQ(big.stats.size, sizeof big);
  EXPECT_EQ(big.stats.channels, 0u) << "no session yet";
  EXPECT_EQ(big.stats.rounds, 0u);
  for (uint8_t b : big.newer) ASSERT_EQ(b, 0xab) << "written past the struct";

  struct Older {
    uint32_t size;
    uint32_t channels;
    uint64_t rounds;
  };
  static_assert(sizeof(Older) < sizeof(ramferry_stats));
  union {
    ramferry_stats whole;
    Older old;
  } small;
  std::memset(&small, 0xcd, sizeof small);
  small.old.size = sizeof(Older);
  ASSERT_EQ(ramferry_receiver_stats(rx, &small.whole), RAMFERRY_OK);
  EXPECT_EQ(small.old.size, sizeof(Older));
  EXPECT_EQ(small.old.channels, 0u);
  EXPECT_EQ(small.old.rounds, 0u);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&small);
  for (size_t i = sizeof(Older); i < sizeof small; ++i) {
    ASSERT_EQ(bytes[i], 0xcd) << "byte " << i << " past an older struct";
  }

  ramferry_stats unset{};
  EXPECT_EQ(ramferry_receiver_stats(rx, &unset), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("size field is not set"));
  ramferry_receiver_free(rx);
  ramferry_regions_free(regions);
  ramferry_options_free(opt);
  munmap(base, 4096);
}

// Review E1: out of memory, every entry still answers with a status. No
// exception may cross into C: a NULL argument's message, and an error met
// while out of memory, are stored without allocating (before: a second
// bad_alloc from the handler escaped, and the child aborted).
TEST(CApiTest, OutOfMemoryIsAStatusNeverAnException) {
  if (ramferry::testing::UnderSanitizer()) {
    GTEST_SKIP() << "a sanitizer's allocator reserves its own address "
                    "space: RLIMIT_AS cannot starve malloc alone there";
  }
  ramferry_options* opt = ramferry_options_new();
  ASSERT_NE(opt, nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // This thread's error string is made on its first use, which registers
    // a thread-local destructor with glibc, and glibc ends the process if
    // that registration finds no memory: a thread's first C API call must
    // have a few bytes to spare. Every later call needs none.
    (void)ramferry_last_error();
    // Everything mapped now, and a little more, then nothing.
    long pages = 0;
    FILE* f = std::fopen("/proc/self/statm", "r");
    if (f == nullptr || std::fscanf(f, "%ld", &pages) != 1) _exit(10);
    std::fclose(f);
    const rlim_t limit = pages * sysconf(_SC_PAGESIZE) + (16 << 20);
    const rlimit r{limit, limit};
    if (setrlimit(RLIMIT_AS, &r) != 0) _exit(11);
    for (size_t size : {size_t{1} << 20, size_t{4096}, size_t{64}, size_t{8}}) {
      while (std::malloc(size) != nullptr) {
      }
    }
    uint16_t port = 0;
    if (ramferry_receiver_port(nullptr, &port) != RAMFERRY_INVALID_ARGUMENT) {
      _exit(12);
    }
    const ramferry_status set = ramferry_options_set(
        opt, "an-option-no-version-of-ramferry-has", "with a long value");
    if (set != RAMFERRY_RESOURCE_EXHAUSTED && set != RAMFERRY_NOT_FOUND &&
        set != RAMFERRY_INVALID_ARGUMENT) {
      _exit(13);
    }
    if (ramferry_last_error() == nullptr) _exit(14);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ramferry_options_free(opt);
  ASSERT_TRUE(WIFEXITED(status))
      << "the child died of signal " << WTERMSIG(status)
      << ": an exception crossed the C API";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(CApiTest, BadOptionsNameTheProblem) {
  ramferry_options* opt = ramferry_options_new();
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(ramferry_options_set_transport(opt, "carrier-pigeon"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_options_last_error(opt),
              HasSubstr("unknown transport \"carrier-pigeon\""));
  EXPECT_THAT(ramferry_last_error(), HasSubstr("carrier-pigeon"));
  EXPECT_EQ(ramferry_options_set_transport(opt, nullptr),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set_transport(opt, "tcp-zerocopy"), RAMFERRY_OK);
  EXPECT_EQ(ramferry_options_set_transport(opt, "auto"), RAMFERRY_OK);

  EXPECT_EQ(ramferry_options_set_channels(opt, 0), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_options_last_error(opt), HasSubstr("channels"));
  EXPECT_EQ(ramferry_options_set_channels(opt, 1000),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set_host(opt, ""), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set_key(opt, "short", 5),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_options_last_error(opt), HasSubstr("16 to 1024"));
  EXPECT_NE(ramferry_options_set_key_file(opt, "/nonexistent/ramferry.key"),
            RAMFERRY_OK);
  EXPECT_THAT(ramferry_options_last_error(opt),
              HasSubstr("/nonexistent/ramferry.key"));
  EXPECT_EQ(ramferry_options_set_protect(opt, "rot13"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set_protect(opt, "encrypt"), RAMFERRY_OK);
  EXPECT_EQ(ramferry_options_set_compression(opt, "maybe"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_options_last_error(opt), HasSubstr("off, on, auto"));
  EXPECT_EQ(ramferry_options_set_compression(opt, "auto"), RAMFERRY_OK);
  EXPECT_EQ(ramferry_options_set_verify(opt, "trust-me"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set_verify(opt, "sent"), RAMFERRY_OK);
  ramferry_options_free(opt);
}

TEST(CApiTest, BadRegionsAndBitmapsAreRefused) {
  Memory mem(1 << 20);
  ramferry_regions* r = ramferry_regions_new();
  EXPECT_EQ(ramferry_regions_add(r, 1, mem.base + 1, 4096, 4096),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_STRNE(ramferry_regions_last_error(r), "");
  EXPECT_EQ(ramferry_regions_add(r, 1, mem.base, 5000, 4096),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_regions_add(r, 1, mem.base, 1 << 20, 3000),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_regions_count(r), 0u);
  EXPECT_EQ(ramferry_regions_add(r, 1, mem.base, 1 << 19, 4096), RAMFERRY_OK);
  EXPECT_EQ(ramferry_regions_add(r, 1, mem.base + (1 << 19), 1 << 19, 65536),
            RAMFERRY_ALREADY_EXISTS);
  EXPECT_THAT(ramferry_regions_last_error(r), HasSubstr("region id 1"));
  EXPECT_EQ(ramferry_regions_add(r, 2, mem.base + (1 << 19), 1 << 19, 65536),
            RAMFERRY_OK);
  EXPECT_EQ(ramferry_regions_count(r), 2u);

  // No key and not insecure: both ends refuse, and say how to fix it.
  ramferry_options* opt = ramferry_options_new();
  ramferry_receiver* rx = nullptr;
  EXPECT_NE(ramferry_receiver_listen(opt, r, &rx), RAMFERRY_OK);
  EXPECT_EQ(rx, nullptr);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("insecure"));
  // What ValidateOptions refuses: post-copy over rdma.
  ASSERT_EQ(ramferry_options_set_insecure(opt, 1), RAMFERRY_OK);
  ASSERT_EQ(ramferry_options_set_postcopy(opt, 1), RAMFERRY_OK);
  ASSERT_EQ(ramferry_options_set_transport(opt, "rdma"), RAMFERRY_OK);
  EXPECT_EQ(ramferry_receiver_listen(opt, r, &rx), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("postcopy"));
  // No regions.
  ramferry_regions* none = ramferry_regions_new();
  ASSERT_EQ(ramferry_options_set_postcopy(opt, 0), RAMFERRY_OK);
  ramferry_sender* tx = nullptr;
  EXPECT_EQ(ramferry_sender_connect(opt, none, &tx), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_last_error(), HasSubstr("no regions"));
  ramferry_regions_free(none);
  ramferry_regions_free(r);
  ramferry_options_free(opt);
}

// A memfd mapped shared, unmapped and closed at the end.
struct MemfdMemory {
  explicit MemfdMemory(uint64_t length) : length(length) {
    fd = memfd_create("c-api-test", MFD_CLOEXEC);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(length)), 0);
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    base = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~MemfdMemory() {
    if (base != nullptr) munmap(base, length);
    close(fd);
  }
  MemfdMemory(const MemfdMemory&) = delete;
  MemfdMemory& operator=(const MemfdMemory&) = delete;
  int fd;
  uint8_t* base;
  uint64_t length;
};

// ramferry_regions_set_file checks the descriptor against the mapping, and
// a session whose regions name their files moves pages through them on
// both ends.
TEST(CApiTest, RegionsSetFileMovesPagesThroughTheFile) {
  constexpr uint64_t kLength = 8ull << 20;
  MemfdMemory src(kLength), dst(kLength);
  std::mt19937_64 rng(3);
  for (uint64_t i = 0; i < kLength / 8; ++i) {
    reinterpret_cast<uint64_t*>(src.base)[i] = rng();
  }
  ramferry_regions* rs = ramferry_regions_new();
  ramferry_regions* rd = ramferry_regions_new();
  ASSERT_EQ(ramferry_regions_add(rs, 1, src.base, kLength, 4096), RAMFERRY_OK);
  ASSERT_EQ(ramferry_regions_add(rd, 1, dst.base, kLength, 4096), RAMFERRY_OK);
  EXPECT_EQ(ramferry_regions_set_file(nullptr, 1, src.fd, 0),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_regions_set_file(rs, 9, src.fd, 0), RAMFERRY_NOT_FOUND);
  EXPECT_THAT(ramferry_regions_last_error(rs), HasSubstr("no region 9"));
  EXPECT_EQ(ramferry_regions_set_file(rs, 1, dst.fd, 0),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_regions_last_error(rs), HasSubstr("does not back"));
  EXPECT_EQ(ramferry_regions_set_file(rs, 1, src.fd, 4096),
            RAMFERRY_INVALID_ARGUMENT);
  ASSERT_EQ(ramferry_regions_set_file(rs, 1, src.fd, 0), RAMFERRY_OK);
  ASSERT_EQ(ramferry_regions_set_file(rd, 1, dst.fd, 0), RAMFERRY_OK);

  ramferry_options* opt = KeyedOptions();
  ramferry_receiver* rx = nullptr;
  ASSERT_EQ(ramferry_receiver_listen(opt, rd, &rx), RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_regions_free(rd);
  ramferry_status served = RAMFERRY_UNKNOWN;
  std::thread serving([&] { served = ramferry_receiver_serve(rx); });
  uint16_t port = 0;
  ASSERT_EQ(ramferry_receiver_port(rx, &port), RAMFERRY_OK);
  ASSERT_EQ(ramferry_options_set_port(opt, port), RAMFERRY_OK);
  ramferry_sender* tx = nullptr;
  ASSERT_EQ(ramferry_sender_connect(opt, rs, &tx), RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_regions_free(rs);
  std::vector<uint64_t> words(ramferry_bitmap_words(kLength / 4096), 0);
  ramferry_bitmap_mark_range(words.data(), 0, kLength / 4096);
  uint64_t* bitmaps[] = {words.data()};
  ASSERT_EQ(ramferry_sender_send_round(tx, bitmaps, 1, nullptr), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  EXPECT_EQ(ramferry_sender_verify(tx, nullptr), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  ASSERT_EQ(ramferry_sender_finish(tx), RAMFERRY_OK);
  serving.join();
  EXPECT_EQ(served, RAMFERRY_OK) << ramferry_receiver_last_error(rx);
  EXPECT_EQ(std::memcmp(src.base, dst.base, kLength), 0);
  uint64_t sent = 0, landed = 0;
  ASSERT_EQ(ramferry_sender_channel_counter(tx, 0, "file_bytes", &sent),
            RAMFERRY_OK);
  ASSERT_EQ(ramferry_receiver_channel_counter(rx, 0, "file_bytes", &landed),
            RAMFERRY_OK);
  EXPECT_GT(sent, 0u);
  EXPECT_GT(landed, 0u);
  ramferry_sender_free(tx);
  ramferry_receiver_free(rx);
  ramferry_options_free(opt);
}

TEST(CApiTest, BitmapHelpers) {
  EXPECT_EQ(ramferry_bitmap_words(0), 0u);
  EXPECT_EQ(ramferry_bitmap_words(1), 1u);
  EXPECT_EQ(ramferry_bitmap_words(64), 1u);
  EXPECT_EQ(ramferry_bitmap_words(65), 2u);
  std::vector<uint64_t> w(3, 0);
  ramferry_bitmap_mark(w.data(), 0);
  ramferry_bitmap_mark(w.data(), 64);
  ramferry_bitmap_mark(w.data(), 191);
  EXPECT_EQ(w[0], 1u);
  EXPECT_EQ(w[1], 1u);
  EXPECT_EQ(w[2], uint64_t{1} << 63);
  std::vector<uint64_t> r(3, 0);
  ramferry_bitmap_mark_range(r.data(), 60, 70);  // pages 60..129
  EXPECT_EQ(r[0], uint64_t{0xf} << 60);
  EXPECT_EQ(r[1], ~uint64_t{0});
  EXPECT_EQ(r[2], uint64_t{3});
}

struct ProgressCount {
  std::atomic<int> rounds{0};
  std::atomic<int> ticks{0};
  std::atomic<uint64_t> last_pages{0};
};

void CountProgress(const ramferry_progress* p, void* user) {
  auto* c = static_cast<ProgressCount*>(user);
  EXPECT_EQ(p->size, sizeof(ramferry_progress));
  (p->round_done ? c->rounds : c->ticks).fetch_add(1);
  c->last_pages.store(p->pages);
}

// The migration the API exists for: two regions with different page sizes,
// a writer storing to them and marking the caller's words while rounds
// read and clear those words in place, then the last round, verify,
// finish; the destination is byte-identical, the stats and callbacks add
// up.
TEST(CApiTest, LoopbackMigrationWithALiveWriter) {
  std::deque<Pair> pairs;
  pairs.emplace_back(1, 24ull << 20, 4096, 1);
  pairs.emplace_back(7, 4ull << 20, 65536, 2);
  ramferry_options* opt = KeyedOptions();
  ASSERT_EQ(ramferry_options_set_channels(opt, 3), RAMFERRY_OK);
  Serving rx(opt, pairs);
  ASSERT_EQ(rx.status, RAMFERRY_OK) << ramferry_last_error();
  ProgressCount rx_progress;
  ASSERT_EQ(
      ramferry_receiver_set_progress(rx.rx, CountProgress, &rx_progress, 1),
      RAMFERRY_OK);
  rx.Start();

  ASSERT_EQ(ramferry_options_set_port(opt, rx.port()), RAMFERRY_OK);
  // Slow enough that a round lasts many progress intervals.
  ASSERT_EQ(ramferry_options_set_max_bandwidth(opt, 200ull << 20), RAMFERRY_OK);
  ramferry_regions* regions = Regions(pairs, /*source=*/true);
  ramferry_sender* tx = nullptr;
  ASSERT_EQ(ramferry_sender_connect(opt, regions, &tx), RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_regions_free(regions);
  ProgressCount progress;
  ASSERT_EQ(ramferry_sender_set_progress(tx, CountProgress, &progress, 5),
            RAMFERRY_OK);

  uint64_t* bitmaps[] = {pairs[0].words.data(), pairs[1].words.data()};
  // A wrong bitmap count is refused before the session sees it.
  EXPECT_EQ(ramferry_sender_send_round(tx, bitmaps, 1, nullptr),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_sender_last_error(tx),
              HasSubstr("1 bitmaps for 2 regions"));
  uint64_t* with_null[] = {pairs[0].words.data(), nullptr};
  EXPECT_EQ(ramferry_sender_send_round(tx, with_null, 2, nullptr),
            RAMFERRY_INVALID_ARGUMENT);

  for (Pair& p : pairs)
    ramferry_bitmap_mark_range(p.words.data(), 0, p.pages());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> stores{0};
  std::thread writer([&] {
    std::mt19937_64 rng(99);
    while (!stop.load()) {
      Pair& p = pairs[rng() % 4 == 0 ? 1 : 0];
      const uint64_t page = rng() % p.pages();
      const uint64_t offset = rng() % (p.page_size / 8) * 8;
      Store(p.src.base + page * p.page_size + offset, rng());
      ramferry_bitmap_mark(p.words.data(), page);
      if (stores.fetch_add(1) % 64 == 0) std::this_thread::yield();
    }
  });
  uint64_t sent_pages = 0;
  ramferry_round_result round{};
  round.size = sizeof(round);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(ramferry_sender_send_round(tx, bitmaps, 2, &round), RAMFERRY_OK)
        << ramferry_sender_last_error(tx);
    EXPECT_EQ(round.round, static_cast<uint64_t>(i));
    EXPECT_GT(round.pages, 0u);
    EXPECT_GT(round.elapsed_ns, 0u);
    sent_pages += round.pages;
  }
  stop.store(true);
  writer.join();
  EXPECT_GT(stores.load(), 0u);
  // Overlapped halves for the last round: start, then await.
  ASSERT_EQ(ramferry_sender_start_round(tx, bitmaps, 2), RAMFERRY_OK);
  ASSERT_EQ(ramferry_sender_await_round(tx, &round), RAMFERRY_OK);
  sent_pages += round.pages;
  for (Pair& p : pairs) {
    for (uint64_t w : p.words) EXPECT_EQ(w, 0u) << "rounds clear taken bits";
  }

  ramferry_verify_report report{};
  report.size = sizeof(report);
  ASSERT_EQ(ramferry_sender_verify(tx, &report), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  EXPECT_EQ(report.pages_checked, pairs[0].pages() + pairs[1].pages());
  EXPECT_EQ(report.pages_mismatched, 0u);

  ramferry_stats stats{};
  stats.size = sizeof(stats);
  ASSERT_EQ(ramferry_sender_stats(tx, &stats), RAMFERRY_OK);
  EXPECT_EQ(stats.channels, 3u);
  EXPECT_EQ(stats.rounds, 4u);
  EXPECT_EQ(stats.pages, sent_pages);
  EXPECT_GE(stats.pages, pairs[0].pages() + pairs[1].pages());
  EXPECT_GT(stats.payload_bytes, 28ull << 20);
  EXPECT_EQ(stats.postcopy_started, 0u);
  // An older caller's smaller struct gets the fields it has room for and
  // nothing past them.
  struct Old {
    uint32_t size;
    uint32_t channels;
    uint64_t rounds;
  };
  struct {
    Old old;
    uint64_t canary;
  } small{};
  small.old.size = sizeof(Old);
  small.canary = 0x5a5a5a5a5a5a5a5aull;
  ASSERT_EQ(
      ramferry_sender_stats(tx, reinterpret_cast<ramferry_stats*>(&small.old)),
      RAMFERRY_OK);
  EXPECT_EQ(small.old.size, sizeof(Old));
  EXPECT_EQ(small.old.rounds, 4u);
  EXPECT_EQ(small.canary, 0x5a5a5a5a5a5a5a5aull);
  ramferry_stats unset{};
  EXPECT_EQ(ramferry_sender_stats(tx, &unset), RAMFERRY_INVALID_ARGUMENT);

  EXPECT_EQ(progress.rounds.load(), 4) << "once per confirmed round";
  EXPECT_GT(progress.ticks.load(), 0) << "ticks while rounds ran";
  EXPECT_EQ(progress.last_pages.load(), sent_pages);

  ASSERT_EQ(ramferry_sender_finish(tx), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  rx.thread.join();
  EXPECT_EQ(rx.served, RAMFERRY_OK) << ramferry_receiver_last_error(rx.rx);
  for (Pair& p : pairs) EXPECT_TRUE(Same(p.src, p.dst)) << "region " << p.id;

  ramferry_stats rs{};
  rs.size = sizeof(rs);
  ASSERT_EQ(ramferry_receiver_stats(rx.rx, &rs), RAMFERRY_OK);
  EXPECT_EQ(rs.rounds, 4u);
  EXPECT_EQ(rs.pages, sent_pages);
  uint64_t applied = 0, verified = 0;
  EXPECT_EQ(ramferry_receiver_applied_rounds(rx.rx, &applied), RAMFERRY_OK);
  EXPECT_EQ(applied, 4u);
  EXPECT_EQ(ramferry_receiver_verified_pages(rx.rx, &verified), RAMFERRY_OK);
  EXPECT_EQ(verified, pairs[0].pages() + pairs[1].pages());
  EXPECT_GT(rx_progress.ticks.load(), 0);
  EXPECT_EQ(rx_progress.rounds.load(), 0);

  ramferry_sender_free(tx);
  ramferry_options_free(opt);
}

// A page changed without being marked: verify says DATA_LOSS, how many,
// and which.
TEST(CApiTest, VerifyReportsAnUnmarkedWrite) {
  std::deque<Pair> pairs;
  pairs.emplace_back(3, 4ull << 20, 4096, 5);
  ramferry_options* opt = KeyedOptions();
  Serving rx(opt, pairs);
  ASSERT_EQ(rx.status, RAMFERRY_OK) << ramferry_last_error();
  rx.Start();
  ramferry_options_set_port(opt, rx.port());
  ramferry_regions* regions = Regions(pairs, true);
  ramferry_sender* tx = nullptr;
  ASSERT_EQ(ramferry_sender_connect(opt, regions, &tx), RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_regions_free(regions);
  uint64_t* bitmaps[] = {pairs[0].words.data()};
  ramferry_bitmap_mark_range(bitmaps[0], 0, pairs[0].pages());
  ASSERT_EQ(ramferry_sender_send_round(tx, bitmaps, 1, nullptr), RAMFERRY_OK);
  Store(pairs[0].src.base + 77 * 4096 + 8, 0xdeadbeef);  // never marked
  ramferry_verify_report report{};
  report.size = sizeof(report);
  EXPECT_EQ(ramferry_sender_verify(tx, &report), RAMFERRY_DATA_LOSS);
  EXPECT_EQ(report.pages_mismatched, 1u);
  EXPECT_EQ(report.first_mismatch_region, 3u);
  EXPECT_EQ(report.first_mismatch_page, 77u);
  EXPECT_THAT(ramferry_sender_last_error(tx),
              HasSubstr("1 of 1024 pages differ"));
  ramferry_sender_free(tx);  // unfinished: the destination's serve ends
  rx.thread.join();
  EXPECT_NE(rx.served, RAMFERRY_OK);
  ramferry_options_free(opt);
}

TEST(CApiTest, AbortEndsServeWithTheReason) {
  std::deque<Pair> pairs;
  pairs.emplace_back(1, 1ull << 20, 4096, 1);
  ramferry_options* opt = KeyedOptions();
  Serving rx(opt, pairs);
  ASSERT_EQ(rx.status, RAMFERRY_OK);
  rx.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ramferry_receiver_abort(rx.rx, "operator gave up"), RAMFERRY_OK);
  rx.thread.join();
  EXPECT_EQ(rx.served, RAMFERRY_CANCELLED);
  EXPECT_THAT(ramferry_receiver_last_error(rx.rx),
              HasSubstr("operator gave up"));
  // A source that finds nobody listening fails with a message, no handle.
  ramferry_regions* regions = Regions(pairs, true);
  ramferry_options_set_port(opt, rx.port());
  ramferry_options_set_connect_timeout_ms(opt, 200);
  ramferry_sender* tx = nullptr;
  EXPECT_NE(ramferry_sender_connect(opt, regions, &tx), RAMFERRY_OK);
  EXPECT_EQ(tx, nullptr);
  EXPECT_STRNE(ramferry_last_error(), "");
  ramferry_regions_free(regions);
  ramferry_options_free(opt);
}

// The commit hook: 0 lets the destination confirm FINISH; nonzero refuses
// it, serve fails CANCELLED with the reason, and the source, past its own
// commit point, fails too, knowing that the destination did not commit.
int CountCommit(void* user) {
  static_cast<std::atomic<int>*>(user)->fetch_add(1);
  return 0;
}
int RefuseCommit(void* user) {
  static_cast<std::atomic<int>*>(user)->fetch_add(1);
  return 1;
}

TEST(CApiTest, TheCommitHookMayRefuseTheFinish) {
  for (const bool refuse : {false, true}) {
    SCOPED_TRACE(refuse ? "refused" : "committed");
    std::deque<Pair> pairs;
    pairs.emplace_back(1, 1ull << 20, 4096, 2);
    ramferry_options* opt = KeyedOptions();
    Serving rx(opt, pairs);
    ASSERT_EQ(rx.status, RAMFERRY_OK);
    std::atomic<int> calls{0};
    ASSERT_EQ(ramferry_receiver_on_commit(
                  rx.rx, refuse ? RefuseCommit : CountCommit, &calls),
              RAMFERRY_OK);
    rx.Start();
    ramferry_options_set_port(opt, rx.port());
    ramferry_regions* regions = Regions(pairs, /*source=*/true);
    ramferry_sender* tx = nullptr;
    ASSERT_EQ(ramferry_sender_connect(opt, regions, &tx), RAMFERRY_OK);
    ramferry_regions_free(regions);
    ramferry_bitmap_mark_range(pairs[0].words.data(), 0, pairs[0].pages());
    uint64_t* bitmaps[] = {pairs[0].words.data()};
    ASSERT_EQ(ramferry_sender_send_round(tx, bitmaps, 1, nullptr), RAMFERRY_OK);
    EXPECT_EQ(calls.load(), 0);
    const ramferry_status finished = ramferry_sender_finish(tx);
    rx.thread.join();
    EXPECT_EQ(calls.load(), 1);
    uint32_t outcome = 99;
    ASSERT_EQ(ramferry_sender_commit_outcome(tx, &outcome), RAMFERRY_OK);
    if (refuse) {
      EXPECT_NE(finished, RAMFERRY_OK);
      EXPECT_EQ(rx.served, RAMFERRY_CANCELLED);
      EXPECT_THAT(ramferry_receiver_last_error(rx.rx),
                  HasSubstr("commit callback refused"));
      // The refusal reached the source as such: its workload may resume.
      EXPECT_EQ(outcome, RAMFERRY_COMMIT_NO);
      EXPECT_THAT(ramferry_sender_last_error(tx), HasSubstr("not committed"));
      EXPECT_THAT(ramferry_sender_last_error(tx),
                  HasSubstr("commit callback refused"));
    } else {
      EXPECT_EQ(finished, RAMFERRY_OK);
      EXPECT_EQ(rx.served, RAMFERRY_OK);
      EXPECT_EQ(outcome, RAMFERRY_COMMIT_YES);
    }
    ramferry_sender_free(tx);
    ramferry_options_free(opt);
  }
}

// "auto" resolves when the source connects and says what it chose, in a
// warning the sender keeps; start_verify and a bandwidth change mid-session
// go through.
TEST(CApiTest, AutoTransportIsNamedInAWarning) {
  std::deque<Pair> pairs;
  pairs.emplace_back(1, 2ull << 20, 4096, 4);
  ramferry_options* opt = KeyedOptions();
  Serving rx(opt, pairs);
  ASSERT_EQ(rx.status, RAMFERRY_OK) << ramferry_last_error();
  rx.Start();
  ramferry_options_set_port(opt, rx.port());
  ASSERT_EQ(ramferry_options_set_transport(opt, "auto"), RAMFERRY_OK);
  ramferry_regions* regions = Regions(pairs, true);
  ramferry_sender* tx = nullptr;
  ASSERT_EQ(ramferry_sender_connect(opt, regions, &tx), RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_regions_free(regions);
  size_t count = 0;
  ASSERT_EQ(ramferry_sender_warning_count(tx, &count), RAMFERRY_OK);
  ASSERT_GE(count, 1u);
  EXPECT_THAT(ramferry_sender_warning(tx, 0),
              HasSubstr("transport auto chose tcp"));
  EXPECT_EQ(ramferry_sender_warning(tx, count), nullptr);
  EXPECT_EQ(ramferry_sender_set_max_bandwidth(tx, 1ull << 30), RAMFERRY_OK);
  uint64_t* bitmaps[] = {pairs[0].words.data()};
  ramferry_bitmap_mark_range(bitmaps[0], 0, pairs[0].pages());
  ASSERT_EQ(ramferry_sender_send_round(tx, bitmaps, 1, nullptr), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  EXPECT_EQ(ramferry_sender_start_verify(tx), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  ASSERT_EQ(ramferry_sender_verify(tx, nullptr), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  ASSERT_EQ(ramferry_sender_finish(tx), RAMFERRY_OK);
  rx.thread.join();
  EXPECT_EQ(rx.served, RAMFERRY_OK);
  EXPECT_TRUE(Same(pairs[0].src, pairs[0].dst));
  ramferry_sender_free(tx);
  ramferry_options_free(opt);
}

struct Armed {
  std::atomic<int> calls{0};
};

void OnArmed(void* user) { static_cast<Armed*>(user)->calls.fetch_add(1); }

// Post-copy through the C API: the switch with every page missing, the
// armed callback, the residency hooks, then the push, verify and finish.
TEST(CApiTest, PostcopyHooks) {
  if (std::string why = ramferry::testing::UserfaultfdSkipReason();
      !why.empty()) {
    GTEST_SKIP() << why;
  }
  std::deque<Pair> pairs;
  pairs.emplace_back(1, 8ull << 20, 4096, 3);
  ramferry_options* opt = KeyedOptions();
  ASSERT_EQ(ramferry_options_set_postcopy(opt, 1), RAMFERRY_OK);
  Serving rx(opt, pairs);
  ASSERT_EQ(rx.status, RAMFERRY_OK) << ramferry_last_error();
  Armed armed;
  ASSERT_EQ(ramferry_receiver_on_armed(rx.rx, OnArmed, &armed), RAMFERRY_OK);
  rx.Start();
  ramferry_options_set_port(opt, rx.port());
  ramferry_regions* regions = Regions(pairs, true);
  ramferry_sender* tx = nullptr;
  ASSERT_EQ(ramferry_sender_connect(opt, regions, &tx), RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_regions_free(regions);

  EXPECT_EQ(ramferry_receiver_request_pages(rx.rx, 1, 0, 1),
            RAMFERRY_FAILED_PRECONDITION);
  const uint64_t pages = pairs[0].pages();
  uint64_t* missing[] = {pairs[0].words.data()};
  ramferry_bitmap_mark_range(missing[0], 0, pages);
  ASSERT_EQ(ramferry_sender_start_postcopy(tx, missing, 1), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  // The destination's control thread calls it as it arms, around when the
  // source hears so.
  for (int i = 0; i < 500 && armed.calls.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(armed.calls.load(), 1);
  EXPECT_EQ(pairs[0].words[0], ~uint64_t{0}) << "the missing set is read only";
  int resident = 1;
  ASSERT_EQ(ramferry_receiver_is_resident(rx.rx, 1, 10, 5, &resident),
            RAMFERRY_OK);
  EXPECT_EQ(resident, 0);
  EXPECT_EQ(ramferry_receiver_wait_resident(rx.rx, 1, 10, 5, 30),
            RAMFERRY_DEADLINE_EXCEEDED);
  EXPECT_EQ(ramferry_receiver_request_pages(rx.rx, 1, pages, 1),
            RAMFERRY_INVALID_ARGUMENT);
  ASSERT_EQ(ramferry_receiver_request_pages(rx.rx, 1, 10, 5), RAMFERRY_OK);
  ASSERT_EQ(ramferry_receiver_wait_resident(rx.rx, 1, 10, 5, 20000),
            RAMFERRY_OK);
  ASSERT_EQ(ramferry_receiver_is_resident(rx.rx, 1, 10, 5, &resident),
            RAMFERRY_OK);
  EXPECT_EQ(resident, 1);

  ASSERT_EQ(ramferry_sender_complete_postcopy(tx), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  ASSERT_EQ(ramferry_sender_verify(tx, nullptr), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  ramferry_stats stats{};
  stats.size = sizeof(stats);
  ASSERT_EQ(ramferry_sender_stats(tx, &stats), RAMFERRY_OK);
  EXPECT_EQ(stats.postcopy_started, 1u);
  EXPECT_EQ(stats.postcopy_missing_pages, pages);
  EXPECT_GE(stats.postcopy_requested_pages, 5u);
  ASSERT_EQ(ramferry_sender_finish(tx), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  rx.thread.join();
  EXPECT_EQ(rx.served, RAMFERRY_OK) << ramferry_receiver_last_error(rx.rx);
  EXPECT_TRUE(Same(pairs[0].src, pairs[0].dst));
  uint64_t filled = 99;
  EXPECT_EQ(ramferry_receiver_release_postcopy(rx.rx, &filled), RAMFERRY_OK);
  EXPECT_EQ(filled, 0u) << "nothing awaited after a session that ended well";
  EXPECT_EQ(armed.calls.load(), 1);
  ramferry_sender_free(tx);
  ramferry_options_free(opt);
}

}  // namespace

namespace {

TEST(CApiTest, OptionsSetReachesEveryOtherOptionByName) {
  ramferry_options* opt = ramferry_options_new();
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, const char*>>{
           {"channel-endpoints", "127.0.0.1:7070,[::1]:7071"},
           {"channel-endpoints", ""},
           {"packet-pages", "16"},
           {"header-slots", "256"},
           {"completion", "wrap"},
           {"compression-level", "-3"},
           {"rdma-chunk-bytes", "2097152"},
           {"rdma-max-inline", "256"},
           {"registered-buffers", "on"},
           {"fallback-to-tcp-zerocopy", "true"},
           {"rdma-pin-all", "0"},
           {"rdma-reg-batch", "1"},
           {"survive-channel-loss", "1"},
           {"zero-pages", "off"},
           {"skip-untouched", "false"},
           {"single-thread", "0"},
           {"announce-next-header", "1"},
           {"handshake-timeout-ms", "2500"},
           {"stall-timeout-ms", "10000"},
           {"round-timeout-ms", "60000"},
       }) {
    EXPECT_EQ(ramferry_options_set(opt, name, value), RAMFERRY_OK)
        << name << "=" << value << ": " << ramferry_options_last_error(opt);
  }
  EXPECT_EQ(ramferry_options_set(opt, "packet-pages", "0"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_options_last_error(opt),
              HasSubstr("packet_pages = 0; want [1, 4096]"));
  EXPECT_EQ(ramferry_options_set(opt, "survive-channel-loss", "maybe"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set(opt, "channel-endpoints", "nohost"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set(opt, "stall-timeout-ms", "-5"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set(opt, "completion", "whenever"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set(opt, "no-such-option", "1"),
            RAMFERRY_NOT_FOUND);
  EXPECT_THAT(ramferry_options_last_error(opt),
              HasSubstr("survive-channel-loss (1|0)"));
  EXPECT_EQ(ramferry_options_set(opt, nullptr, "1"), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_options_set(nullptr, "packet-pages", "1"),
            RAMFERRY_INVALID_ARGUMENT);
  ramferry_options_free(opt);
}

// The values land: a small packet-pages makes many packets, and channel
// endpoints that point nowhere keep the channels from connecting.
TEST(CApiTest, OptionsSetTakesEffectInTheSession) {
  std::deque<Pair> pairs;
  pairs.emplace_back(1, 4ull << 20, 4096, 9);
  ramferry_options* opt = KeyedOptions();
  Serving rx(opt, pairs);
  ASSERT_EQ(rx.status, RAMFERRY_OK) << ramferry_last_error();
  rx.Start();
  ASSERT_EQ(ramferry_options_set_port(opt, rx.port()), RAMFERRY_OK);
  ASSERT_EQ(ramferry_options_set(opt, "packet-pages", "8"), RAMFERRY_OK);
  const std::string here = absl::StrCat("127.0.0.1:", rx.port());
  ASSERT_EQ(ramferry_options_set(opt, "channel-endpoints", here.c_str()),
            RAMFERRY_OK);
  ramferry_regions* regions = Regions(pairs, /*source=*/true);
  ramferry_sender* tx = nullptr;
  ASSERT_EQ(ramferry_sender_connect(opt, regions, &tx), RAMFERRY_OK)
      << ramferry_last_error();
  uint64_t* bitmaps[] = {pairs[0].words.data()};
  ramferry_bitmap_mark_range(bitmaps[0], 0, pairs[0].pages());
  ASSERT_EQ(ramferry_sender_send_round(tx, bitmaps, 1, nullptr), RAMFERRY_OK);
  ramferry_stats stats{};
  stats.size = sizeof(stats);
  ASSERT_EQ(ramferry_sender_stats(tx, &stats), RAMFERRY_OK);
  EXPECT_GE(stats.packets, pairs[0].pages() / 8);
  // The per-channel counters add up to the totals, on both ends.
  uint64_t sent = 0, received = 0;
  for (uint32_t c = 0; c < stats.channels; ++c) {
    uint64_t n = 0;
    ASSERT_EQ(ramferry_sender_channel_counter(tx, c, "packets", &n),
              RAMFERRY_OK);
    sent += n;
    ASSERT_EQ(ramferry_receiver_channel_counter(rx.rx, c, "packets", &n),
              RAMFERRY_OK)
        << ramferry_last_error();
    received += n;
  }
  EXPECT_EQ(sent, stats.packets);
  EXPECT_EQ(received, stats.packets);
  uint64_t n = 0;
  EXPECT_EQ(ramferry_sender_channel_counter(tx, stats.channels, "packets", &n),
            RAMFERRY_OUT_OF_RANGE);
  EXPECT_EQ(ramferry_sender_channel_counter(tx, 0, "no_such_counter", &n),
            RAMFERRY_NOT_FOUND);
  EXPECT_EQ(ramferry_sender_channel_counter(tx, 0, nullptr, &n),
            RAMFERRY_INVALID_ARGUMENT);
  ASSERT_EQ(ramferry_sender_finish(tx), RAMFERRY_OK)
      << ramferry_sender_last_error(tx);
  ramferry_sender_free(tx);
  rx.thread.join();
  EXPECT_EQ(rx.served, RAMFERRY_OK);

  // Channels sent to a port nobody listens on: connect fails.
  ASSERT_EQ(ramferry_options_set(opt, "channel-endpoints", "127.0.0.1:1"),
            RAMFERRY_OK);
  ASSERT_EQ(ramferry_options_set_connect_timeout_ms(opt, 300), RAMFERRY_OK);
  ASSERT_EQ(ramferry_options_set_port(opt, 1), RAMFERRY_OK);
  EXPECT_NE(ramferry_sender_connect(opt, regions, &tx), RAMFERRY_OK);
  ramferry_regions_free(regions);
  ramferry_options_free(opt);
}

TEST(CApiTest, ChannelCountersAreListedWithWhatTheyCount) {
  const size_t count = ramferry_channel_counter_count();
  ASSERT_GT(count, 10u);
  bool packets = false;
  for (size_t i = 0; i < count; ++i) {
    ASSERT_NE(ramferry_channel_counter_name(i), nullptr);
    EXPECT_GT(std::strlen(ramferry_channel_counter_doc(i)), 0u);
    packets |= std::string(ramferry_channel_counter_name(i)) == "packets";
  }
  EXPECT_TRUE(packets);
  EXPECT_EQ(ramferry_channel_counter_name(count), nullptr);
  EXPECT_EQ(ramferry_channel_counter_doc(count), nullptr);
}

}  // namespace
