/* attached_workload: a workload whose memory another process migrates,
 * through ramferry's C API ("memory of another process" in ramferry.h),
 * that measures the latency of its own stores. Built as
 * ramferry-attached-workload (tests/capi/CMakeLists.txt) for the attach
 * tests and bench/attach, bench/downtime; examples/c/export_memory.c is
 * the short version of its export.
 *
 * Two modes, one per end of a migration:
 *
 * --export=SOCKET: the source workload. It fills a memfd region
 *   (--size-mib, pseudo-random bytes from --seed, --zero-percent of the
 *   pages all zero), starts --threads writers storing at --rate with
 *   --pattern, measures the latency of every single store for
 *   --baseline-seconds on plain memory ("baseline"), then offers the region
 *   on SOCKET (ramferry_export_listen) and keeps storing ("migration") until
 *   a migration process (ramferry-migrate --role=source --attach=SOCKET)
 *   pauses it for the final round and reports it migrated. It prints one
 *   JSON line: the region's digest at that moment, the store count and
 *   rate, when the pause took effect, and the latency percentiles of both
 *   phases (and of the stores made while ramferry_export_listen ran).
 *
 * --adopt=SOCKET: the destination's new workload. It waits for the
 *   destination to hand the received memory over (ramferry_adopt_wait),
 *   digests it before writing anything, then runs the same writers on it
 *   for --seconds ("after") and prints one JSON line.
 *
 * The two digests are equal when the memory arrived intact. The digest
 * (see digest()) reads the region as native-endian 64-bit words.
 *
 *   attached_workload --export=SOCKET [--size-mib=256] [--seed=1]
 *                     [--zero-percent=25] [--threads=1] [--rate=100000]
 *                     [--pattern=mixed] [--baseline-seconds=1]
 *                     [--no-handler] [--allow-hand-over] [--timeout-s=300]
 *                     [--spin-us=20]
 *                     [--ready-file=PATH]
 *   attached_workload --adopt=SOCKET [--seconds=1] [--threads=1]
 *                     [--rate=100000] [--pattern=mixed] [--timeout-s=300]
 *                     [--spin-us=20] [--ready-file=PATH]
 *
 * (--help says what each option does.) Exit status 0 on success, 1 when
 * ramferry or the system failed, 2 on a bad command line.
 *
 * Build against an installed ramferry:
 *   cc -std=c11 workload.c $(pkg-config --cflags --libs ramferry) \
 *     -pthread -o attached_workload
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ramferry/ramferry.h"

#define PROGRAM "attached_workload"

enum {
  kPageSize = 4096,
  kBurstStores = 64, /* consecutive 8-byte stores into one page */
  kMaxThreads = 64,
  kRegionId = 1,
};

static const char kUsage[] =
    "usage: " PROGRAM
    " --export=SOCKET [options]  (the migrated workload)\n"
    "       " PROGRAM
    " --adopt=SOCKET [options]   (its successor)\n"
    "\n"
    "--export=SOCKET       offer a memfd region to a migration process on\n"
    "                      the unix socket SOCKET (ramferry-migrate\n"
    "                      --role=source --attach=SOCKET), write to it until\n"
    "                      migrated, print one JSON line\n"
    "--adopt=SOCKET        wait on SOCKET for memory a destination hands\n"
    "                      over, digest it, write to it, print one JSON "
    "line\n"
    "\n"
    "both modes:\n"
    "--threads=N           writer threads (default 1, at most 64)\n"
    "--rate=STORES_PER_S   stores per second over all threads (default\n"
    "                      100000; 0: no writers)\n"
    "--pattern=P           random: an aligned 8-byte store at a random\n"
    "                      place; straddle: an unaligned 8-byte store across\n"
    "                      a page boundary (4 bytes in each page); burst: 64\n"
    "                      consecutive 8-byte stores into one random page;\n"
    "                      mixed (default): each pick is random (60%),\n"
    "                      straddle (20%) or burst (20%)\n"
    "--spin-us=N           pacing: waits shorter than N microseconds spin,\n"
    "                      longer ones sleep (default 20; 0: always sleep,\n"
    "                      stores due meanwhile then go back to back)\n"
    "--timeout-s=N         how long to wait for the migration (export) or\n"
    "                      the hand-over (adopt), in seconds (default 300)\n"
    "--ready-file=PATH     once the socket listens, create PATH (holding\n"
    "                      this process's pid)\n"
    "--help                this text\n"
    "\n"
    "export only:\n"
    "--size-mib=N          region size in MiB (default 256)\n"
    "--regions=N           offer the memfd as N regions of equal size\n"
    "                      (1 to 64, default 1), as a VMM offers guest\n"
    "                      memory split around holes; the digest then\n"
    "                      folds the regions' digests in order\n"
    "--seed=N              seed of the region's contents and of the\n"
    "                      writers' choices (default 1)\n"
    "--zero-percent=N      share of the region's pages left all zero\n"
    "                      (default 25)\n"
    "--baseline-seconds=S  how long to store before offering the memory,\n"
    "                      untracked, for the \"baseline\" latencies\n"
    "                      (default 1; fractions allowed)\n"
    "--allow-hand-over     consent to a local hand-over (ramferry-migrate\n"
    "                      --attach=SOCKET --hand-over=ADOPT): once paused,\n"
    "                      the memfd goes read-write to the adopter,\n"
    "                      uncopied (needs the handler)\n"
    "--no-handler          handle no events: the migration process pauses\n"
    "                      this process with SIGSTOP instead (it stays\n"
    "                      stopped once migrated; if continued, the\n"
    "                      writers may store before they stop, so its\n"
    "                      digest is no longer the migrated memory's, and\n"
    "                      the store the stop caught counts its duration)\n"
    "\n"
    "adopt only:\n"
    "--seconds=S           how long to write to the adopted memory (default\n"
    "                      1; 0: not at all; fractions allowed)\n"
    "\n"
    "Each writer thread stores into its own slice of the pages.\n"
    "Store latencies are per store (clock_gettime around the store alone),\n"
    "in ns; percentiles are bucket upper bounds (12.5% resolution).\n";

/* ---- command line ---- */

enum pattern { kRandom, kStraddle, kBurst, kMixed };
static const char* const kPatternNames[] = {"random", "straddle", "burst",
                                            "mixed"};

struct options {
  const char* export_socket;
  const char* adopt_socket;
  const char* ready_file;
  uint64_t size_mib;
  uint64_t regions;
  uint64_t seed;
  uint64_t zero_percent;
  uint64_t threads;
  uint64_t rate;
  uint64_t spin_us;
  uint64_t timeout_s;
  enum pattern pattern;
  double baseline_seconds;
  double seconds;
  int no_handler;
  int allow_hand_over;
};

/* "--name=value": the value, or NULL when `arg` is another option. */
static const char* value_of(const char* arg, const char* name) {
  const size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0 || arg[n] != '=') return NULL;
  return arg + n + 1;
}

static int parse_u64(const char* name, const char* text, uint64_t max,
                     uint64_t* out) {
  char* end = NULL;
  errno = 0;
  const unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v > max) {
    fprintf(stderr,
            PROGRAM ": %s: expected a whole number up to %" PRIu64
                    ", got '%s'\n",
            name, max, text);
    return 0;
  }
  *out = v;
  return 1;
}

static int parse_seconds(const char* name, const char* text, double* out) {
  char* end = NULL;
  errno = 0;
  const double v = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v >= 0 && v < 1e6)) {
    fprintf(stderr, PROGRAM ": %s: expected seconds (>= 0), got '%s'\n", name,
            text);
    return 0;
  }
  *out = v;
  return 1;
}

static int parse_pattern(const char* text, enum pattern* out) {
  for (int i = 0; i < 4; ++i) {
    if (strcmp(text, kPatternNames[i]) == 0) {
      *out = (enum pattern)i;
      return 1;
    }
  }
  fprintf(stderr,
          PROGRAM
          ": --pattern: expected random, straddle, burst or mixed, "
          "got '%s'\n",
          text);
  return 0;
}

/* 0: run; 1: --help shown; 2: bad command line (message printed). */
static int parse_options(int argc, char** argv, struct options* o) {
  *o = (struct options){.size_mib = 256,
                        .regions = 1,
                        .seed = 1,
                        .zero_percent = 25,
                        .threads = 1,
                        .rate = 100000,
                        .spin_us = 20,
                        .timeout_s = 300,
                        .pattern = kMixed,
                        .baseline_seconds = 1,
                        .seconds = 1};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v;
    int ok = 1;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(kUsage, stdout);
      return 1;
    } else if ((v = value_of(a, "--export")) != NULL) {
      o->export_socket = v;
    } else if ((v = value_of(a, "--adopt")) != NULL) {
      o->adopt_socket = v;
    } else if ((v = value_of(a, "--ready-file")) != NULL) {
      o->ready_file = v;
    } else if ((v = value_of(a, "--size-mib")) != NULL) {
      ok = parse_u64("--size-mib", v, UINT64_C(1) << 20, &o->size_mib);
    } else if ((v = value_of(a, "--regions")) != NULL) {
      ok = parse_u64("--regions", v, 64, &o->regions);
    } else if ((v = value_of(a, "--seed")) != NULL) {
      ok = parse_u64("--seed", v, UINT64_MAX, &o->seed);
    } else if ((v = value_of(a, "--zero-percent")) != NULL) {
      ok = parse_u64("--zero-percent", v, 100, &o->zero_percent);
    } else if ((v = value_of(a, "--threads")) != NULL) {
      ok = parse_u64("--threads", v, kMaxThreads, &o->threads);
    } else if ((v = value_of(a, "--rate")) != NULL) {
      ok = parse_u64("--rate", v, UINT64_C(1000000000), &o->rate);
    } else if ((v = value_of(a, "--spin-us")) != NULL) {
      ok = parse_u64("--spin-us", v, 1000000, &o->spin_us);
    } else if ((v = value_of(a, "--timeout-s")) != NULL) {
      ok = parse_u64("--timeout-s", v, UINT64_C(1) << 32, &o->timeout_s);
    } else if ((v = value_of(a, "--pattern")) != NULL) {
      ok = parse_pattern(v, &o->pattern);
    } else if ((v = value_of(a, "--baseline-seconds")) != NULL) {
      ok = parse_seconds("--baseline-seconds", v, &o->baseline_seconds);
    } else if ((v = value_of(a, "--seconds")) != NULL) {
      ok = parse_seconds("--seconds", v, &o->seconds);
    } else if (strcmp(a, "--no-handler") == 0) {
      o->no_handler = 1;
    } else if (strcmp(a, "--allow-hand-over") == 0) {
      o->allow_hand_over = 1;
    } else {
      fprintf(stderr, PROGRAM ": unknown option '%s' (see --help)\n", a);
      ok = 0;
    }
    if (!ok) return 2;
  }
  if ((o->export_socket == NULL) == (o->adopt_socket == NULL)) {
    fprintf(stderr, PROGRAM
            ": give one of --export=SOCKET and "
            "--adopt=SOCKET (see --help)\n");
    return 2;
  }
  if (o->size_mib == 0 || o->threads == 0 || o->regions == 0) {
    fprintf(stderr, PROGRAM ": --size-mib and --threads must be > 0\n");
    return 2;
  }
  return 0;
}

/* ---- time, random numbers, digest ---- */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The splitmix64 finalizer: a bijection, so distinct inputs stay distinct. */
static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= UINT64_C(0xbf58476d1ce4e5b9);
  x ^= x >> 27;
  x *= UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

/* xorshift64*: the state must never be 0. */
static uint64_t next_random(uint64_t* s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * UINT64_C(2685821657736338717);
}

static uint64_t random_state(uint64_t seed, uint64_t stream) {
  const uint64_t s = mix64(seed ^ mix64(stream + 1));
  return s != 0 ? s : UINT64_C(0x9e3779b97f4a7c15);
}

/* A 64-bit hash of the bytes: FNV-1a over native-endian 8-byte words (then
 * the tail bytes), with each step folded (h ^= h >> 29) so that a word's
 * high bits reach the low bits of the state too; the length and a final
 * mix64 close it. Export and adopt modes use it alike. */
static uint64_t digest(const uint8_t* p, uint64_t length) {
  const uint64_t kPrime = UINT64_C(0x100000001b3);
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  uint64_t i = 0;
  for (; i + 8 <= length; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * kPrime;
    h ^= h >> 29;
  }
  for (; i < length; ++i) h = (h ^ p[i]) * kPrime;
  return mix64(h ^ length);
}

/* Several regions: each one's digest, folded in order (one region: its
 * digest alone). */
static uint64_t regions_digest(uint8_t* const* bases, const uint64_t* lengths,
                               size_t count) {
  if (count == 1) return digest(bases[0], lengths[0]);
  uint64_t h = count;
  for (size_t i = 0; i < count; ++i) {
    h = mix64(h ^ digest(bases[i], lengths[i]));
  }
  return h;
}

/* Region i of `count` equal parts of `length` (the last takes the rest),
 * in whole pages. */
static void region_part(uint64_t length, uint64_t count, uint64_t i,
                        uint64_t* offset, uint64_t* part) {
  const uint64_t pages = length / kPageSize;
  *offset = pages / count * i * kPageSize;
  *part = i + 1 == count ? length - *offset : pages / count * kPageSize;
}

/* ---- latency histograms ---- */

/* Values 0..7 have a bucket each; above, each power of two [2^e, 2^(e+1))
 * splits into 8 linear sub-buckets, i.e. 12.5% resolution up to 2^64 ns. */
enum { kSubBuckets = 8, kBuckets = 8 + (64 - 3) * kSubBuckets };

struct hist {
  uint64_t buckets[kBuckets];
  uint64_t count;
  uint64_t max;
};

static int bucket_of(uint64_t v) {
  if (v < 8) return (int)v;
  const int e = 63 - __builtin_clzll(v); /* >= 3 */
  return 8 + (e - 3) * kSubBuckets + (int)((v >> (e - 3)) & 7);
}

/* The largest value that falls into bucket b. */
static uint64_t bucket_upper(int b) {
  if (b < 8) return (uint64_t)b;
  const int e = (b - 8) / kSubBuckets + 3;
  const uint64_t sub = (uint64_t)((b - 8) % kSubBuckets);
  const uint64_t lower = (UINT64_C(1) << e) + (sub << (e - 3));
  return lower + (UINT64_C(1) << (e - 3)) - 1;
}

static void hist_record(struct hist* h, uint64_t v) {
  ++h->buckets[bucket_of(v)];
  ++h->count;
  if (v > h->max) h->max = v;
}

static void hist_merge(struct hist* into, const struct hist* from) {
  for (int b = 0; b < kBuckets; ++b) into->buckets[b] += from->buckets[b];
  into->count += from->count;
  if (from->max > into->max) into->max = from->max;
}

/* The value at or below which `fraction` of the samples fall (0 if none). */
static uint64_t hist_percentile(const struct hist* h, double fraction) {
  if (h->count == 0) return 0;
  uint64_t rank = (uint64_t)(fraction * (double)h->count + 0.999999);
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += h->buckets[b];
    if (seen >= rank) {
      const uint64_t upper = bucket_upper(b);
      return upper < h->max ? upper : h->max;
    }
  }
  return h->max;
}

static void print_hist_json(const char* name, const struct hist* h) {
  printf("\"%s\":{\"count\":%" PRIu64 ",\"p50_ns\":%" PRIu64
         ",\"p90_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64 ",\"p999_ns\":%" PRIu64
         ",\"max_ns\":%" PRIu64 "}",
         name, h->count, hist_percentile(h, 0.50), hist_percentile(h, 0.90),
         hist_percentile(h, 0.99), hist_percentile(h, 0.999), h->max);
}

static void print_hist_text(const char* name, const struct hist* h) {
  fprintf(stderr,
          "%s: %" PRIu64 " stores, ns p50 %" PRIu64 " p90 %" PRIu64
          " p99 %" PRIu64 " p99.9 %" PRIu64 " max %" PRIu64 "\n",
          name, h->count, hist_percentile(h, 0.50), hist_percentile(h, 0.90),
          hist_percentile(h, 0.99), hist_percentile(h, 0.999), h->max);
}

/* ---- writers ---- */

/* Which histogram a store goes to. */
enum phase {
  kBaseline,  /* export: before the memory is offered (no tracking) */
  kListening, /* export: while ramferry_export_listen registers it */
  kMigration, /* export: offered, until paused */
  kAfter,     /* adopt: on the adopted memory */
  kPhases
};

/* What the export's event handler and the writers share. The writers read
 * the flags before every store; parking goes through the mutex, so a
 * handler that saw every writer parked also sees all their stores done. */
struct control {
  atomic_int paused; /* the handler asked the writers to stop storing */
  atomic_int exit;   /* the writers must return */
  atomic_int phase;  /* enum phase */
  pthread_mutex_t mu;
  pthread_cond_t parked_cv; /* a writer parked or returned */
  pthread_cond_t resume_cv; /* paused or exit changed */
  int parked;               /* writers waiting in park() */
  int running;              /* writers not yet returned */
};

struct workload {
  uint8_t* base;
  uint64_t length;
  enum pattern pattern;
  double period_ns; /* between two stores of one thread */
  uint64_t spin_ns;
  struct control ctl;
};

/* Each writer owns a slice of the region's pages (its stores, straddling
 * ones included, stay inside): writers never race with each other. */
struct writer {
  struct workload* wl;
  pthread_t thread;
  uint64_t index;
  uint64_t first_page;
  uint64_t pages;
  double offset; /* of its schedule, in periods: (index + 1) / threads */
  uint64_t rng;
  uint64_t stores;
  uint64_t active_ns; /* time spent storing, not parked */
  struct hist hist[kPhases];
};

static int must_stop(struct control* c) {
  return atomic_load_explicit(&c->paused, memory_order_acquire) ||
         atomic_load_explicit(&c->exit, memory_order_acquire);
}

/* Parks the calling writer while paused. Returns 1 when it must exit. */
static int park(struct control* c) {
  pthread_mutex_lock(&c->mu);
  ++c->parked;
  pthread_cond_broadcast(&c->parked_cv);
  while (atomic_load(&c->paused) && !atomic_load(&c->exit)) {
    pthread_cond_wait(&c->resume_cv, &c->mu);
  }
  --c->parked;
  const int exiting = atomic_load(&c->exit);
  if (exiting) {
    --c->running;
    pthread_cond_broadcast(&c->parked_cv);
  }
  pthread_mutex_unlock(&c->mu);
  return exiting;
}

/* Waits until `due` (CLOCK_MONOTONIC ns): spins through the last spin_ns,
 * sleeps before, at most 1 ms at a time so that a pause is seen promptly.
 * Returns 0 when asked to stop meanwhile. */
static int wait_until(uint64_t due, uint64_t spin_ns, struct control* c) {
  for (;;) {
    if (must_stop(c)) return 0;
    const uint64_t now = mono_ns();
    if (now >= due) return 1;
    const uint64_t left = due - now;
    if (left > spin_ns) {
      const uint64_t nap = left - spin_ns;
      sleep_ns(nap < 1000000 ? nap : 1000000);
    }
  }
}

/* A value no store of any thread wrote before: mix64 is a bijection. */
static uint64_t next_value(struct writer* w) {
  return mix64((w->stores << 8) | w->index);
}

/* One store, timed alone. The mapping is shared memory whose address
 * escaped, and clock_gettime is an opaque call: the compiler can neither
 * drop the store nor move it out of the timed window. */
static void timed_store(struct writer* w, struct hist* h, uint64_t offset,
                        int aligned) {
  uint8_t* at = w->wl->base + offset;
  const uint64_t value = next_value(w);
  const uint64_t t0 = mono_ns();
  if (aligned) {
    *(volatile uint64_t*)(void*)at = value;
  } else {
    memcpy(at, &value, sizeof(value));
  }
  const uint64_t t1 = mono_ns();
  ++w->stores;
  hist_record(h, t1 - t0);
}

/* Makes one pick of the pattern; returns how many stores it made. */
static uint64_t store_once(struct writer* w) {
  const struct workload* wl = w->wl;
  struct hist* h =
      &w->hist[atomic_load_explicit(&wl->ctl.phase, memory_order_relaxed)];
  const uint64_t r = next_random(&w->rng);
  const uint64_t pages = w->pages;
  enum pattern kind = wl->pattern;
  if (kind == kMixed) {
    const uint64_t pick = r % 100;
    kind = pick < 60 ? kRandom : pick < 80 ? kStraddle : kBurst;
  }
  const uint64_t where = r >> 8; /* the bits the pick did not decide */
  if (kind == kStraddle && pages >= 2) {
    const uint64_t boundary =
        (w->first_page + 1 + where % (pages - 1)) * kPageSize;
    timed_store(w, h, boundary - 4, 0);
    return 1;
  }
  if (kind == kBurst) {
    const uint64_t words = kPageSize / 8;
    const uint64_t page = w->first_page + where % pages;
    const uint64_t first = (where / pages) % (words - kBurstStores + 1);
    for (uint64_t i = 0; i < kBurstStores; ++i) {
      timed_store(w, h, page * kPageSize + (first + i) * 8, 1);
    }
    return kBurstStores;
  }
  const uint64_t words = pages * (kPageSize / 8);
  timed_store(w, h, w->first_page * kPageSize + (where % words) * 8, 1);
  return 1;
}

/* Stores on an absolute schedule (store i of this thread due at
 * start + (i + offset) * period), so sleeping late is made up by stores
 * back to back, and the rate holds; the threads' offsets spread their
 * stores over a period. A pause restarts the schedule: the stores it kept
 * from happening are not owed. */
static void* writer_main(void* arg) {
  struct writer* w = arg;
  struct workload* wl = w->wl;
  uint64_t start = mono_ns();
  uint64_t slot = 0;
  for (;;) {
    if (must_stop(&wl->ctl)) {
      w->active_ns += mono_ns() - start;
      if (park(&wl->ctl)) return NULL;
      start = mono_ns();
      slot = 0;
      continue;
    }
    const uint64_t due =
        start + (uint64_t)(((double)slot + w->offset) * wl->period_ns);
    if (!wait_until(due, wl->spin_ns, &wl->ctl)) continue;
    slot += store_once(w);
  }
}

static void control_init(struct control* c, enum phase phase) {
  atomic_init(&c->paused, 0);
  atomic_init(&c->exit, 0);
  atomic_init(&c->phase, (int)phase);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->parked_cv, NULL);
  pthread_cond_init(&c->resume_cv, NULL);
  c->parked = 0;
  c->running = 0;
}

static void control_destroy(struct control* c) {
  pthread_cond_destroy(&c->resume_cv);
  pthread_cond_destroy(&c->parked_cv);
  pthread_mutex_destroy(&c->mu);
}

/* Starts the writers (none at rate 0). NULL with a message on failure. */
static struct writer* start_writers(struct workload* wl,
                                    const struct options* o, int* count) {
  *count = o->rate == 0 ? 0 : (int)o->threads;
  struct writer* ws = calloc(o->threads, sizeof(*ws));
  if (ws == NULL) {
    fprintf(stderr, PROGRAM ": out of memory\n");
    return NULL;
  }
  const uint64_t pages = wl->length / kPageSize;
  if (pages < (uint64_t)*count) {
    fprintf(stderr,
            PROGRAM ": a region of %" PRIu64
                    " pages is too small for %d "
                    "writer threads\n",
            pages, *count);
    free(ws);
    return NULL;
  }
  wl->period_ns = o->rate == 0 ? 0 : (double)o->threads * 1e9 / (double)o->rate;
  wl->spin_ns = o->spin_us * 1000;
  for (int i = 0; i < *count; ++i) {
    ws[i].wl = wl;
    ws[i].index = (uint64_t)i;
    ws[i].offset = (double)(i + 1) / (double)*count;
    ws[i].first_page = pages * (uint64_t)i / (uint64_t)*count;
    ws[i].pages =
        pages * (uint64_t)(i + 1) / (uint64_t)*count - ws[i].first_page;
    ws[i].rng = random_state(o->seed, 1000 + (uint64_t)i);
    pthread_mutex_lock(&wl->ctl.mu);
    ++wl->ctl.running;
    pthread_mutex_unlock(&wl->ctl.mu);
    const int err = pthread_create(&ws[i].thread, NULL, writer_main, &ws[i]);
    if (err != 0) {
      fprintf(stderr, PROGRAM ": pthread_create: %s\n", strerror(err));
      pthread_mutex_lock(&wl->ctl.mu);
      --wl->ctl.running;
      pthread_mutex_unlock(&wl->ctl.mu);
      *count = i;
      return ws; /* the caller stops the ones started, and fails */
    }
  }
  return ws;
}

static void stop_writers(struct workload* wl, struct writer* ws, int count) {
  pthread_mutex_lock(&wl->ctl.mu);
  atomic_store(&wl->ctl.exit, 1);
  pthread_cond_broadcast(&wl->ctl.resume_cv);
  pthread_mutex_unlock(&wl->ctl.mu);
  for (int i = 0; i < count; ++i) pthread_join(ws[i].thread, NULL);
}

struct totals {
  uint64_t stores;
  double rate; /* stores per second of storing, all threads together */
  struct hist hist[kPhases];
};

static void sum_writers(const struct writer* ws, int count, struct totals* t) {
  memset(t, 0, sizeof(*t));
  for (int i = 0; i < count; ++i) {
    t->stores += ws[i].stores;
    if (ws[i].active_ns > 0) {
      t->rate += (double)ws[i].stores * 1e9 / (double)ws[i].active_ns;
    }
    for (int p = 0; p < kPhases; ++p) hist_merge(&t->hist[p], &ws[i].hist[p]);
  }
}

/* ---- shared bits of both modes ---- */

static int fail(const char* what, ramferry_status s, const char* message) {
  if (message == NULL || message[0] == '\0') message = ramferry_last_error();
  fprintf(stderr, PROGRAM ": %s: %s: %s\n", what, ramferry_status_name(s),
          message);
  return 1;
}

/* Creates `path` atomically (written aside, then renamed), holding our pid:
 * whoever waits for it sees it whole or not at all. */
static int write_ready_file(const char* path) {
  if (path == NULL) return 0;
  char tmp[4096];
  if (snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) >=
      (int)sizeof(tmp)) {
    fprintf(stderr, PROGRAM ": --ready-file: path too long\n");
    return 1;
  }
  FILE* f = fopen(tmp, "w");
  if (f == NULL || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0 ||
      rename(tmp, path) != 0) {
    fprintf(stderr, PROGRAM ": --ready-file %s: %s\n", path, strerror(errno));
    return 1;
  }
  return 0;
}

/* ---- export mode ---- */

/* A memfd of `length` bytes, mapped shared: pseudo-random words, with about
 * zero_percent of the pages all zero (written, so that they exist). Sealing
 * allowed: the migration process seals it against shrinking while it maps
 * it (a shrink under its mapping would crash it). */
static uint8_t* make_region(uint64_t length, uint64_t seed,
                            uint64_t zero_percent, int* fd_out) {
  const int fd = memfd_create("ramferry-attached-workload",
                              MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, (off_t)length) != 0) {
    fprintf(stderr, PROGRAM ": memfd of %" PRIu64 " bytes: %s\n", length,
            strerror(errno));
    if (fd >= 0) close(fd);
    return NULL;
  }
  void* p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, PROGRAM ": mmap: %s\n", strerror(errno));
    close(fd);
    return NULL;
  }
  uint8_t* base = p;
  uint64_t rng = random_state(seed, 0);
  for (uint64_t page = 0; page * kPageSize < length; ++page) {
    uint64_t* words = (uint64_t*)(void*)(base + page * kPageSize);
    const int zero = mix64(seed ^ (page * UINT64_C(0x9e3779b97f4a7c15))) % 100 <
                     zero_percent;
    for (int i = 0; i < kPageSize / 8; ++i) {
      words[i] = zero ? 0 : next_random(&rng);
    }
  }
  *fd_out = fd;
  return base;
}

/* The export's events, on its thread. */
static void on_export_event(void* user, ramferry_export_event event) {
  struct control* c = user;
  pthread_mutex_lock(&c->mu);
  switch (event) {
    case RAMFERRY_EXPORT_PAUSE:
      /* Returning means no more stores: wait for every writer to park. */
      atomic_store(&c->paused, 1);
      while (c->parked < c->running) pthread_cond_wait(&c->parked_cv, &c->mu);
      break;
    case RAMFERRY_EXPORT_RESUME:
      atomic_store(&c->paused, 0);
      pthread_cond_broadcast(&c->resume_cv);
      break;
    case RAMFERRY_EXPORT_MIGRATED:
      atomic_store(&c->exit, 1);
      pthread_cond_broadcast(&c->resume_cv);
      break;
    case RAMFERRY_EXPORT_DETACHED_WHILE_PAUSED:
      /* A destination may run on: writing here could make two live
       * copies. Stay paused. */
      fprintf(stderr, PROGRAM
              ": warning: the migration process went away "
              "while paused; staying paused\n");
      break;
  }
  pthread_mutex_unlock(&c->mu);
}

/* Stores for `seconds` (none without writers). */
static void run_for(double seconds) {
  if (seconds > 0) sleep_ns((uint64_t)(seconds * 1e9));
}

static int export_and_wait(const struct options* o, struct workload* wl, int fd,
                           ramferry_export** exp,
                           ramferry_shared_regions** regions) {
  *regions = ramferry_shared_regions_new();
  if (*regions == NULL) {
    fprintf(stderr, PROGRAM ": out of memory\n");
    return 1;
  }
  ramferry_status s = RAMFERRY_OK;
  for (uint64_t i = 0; i < o->regions && s == RAMFERRY_OK; ++i) {
    uint64_t offset, part;
    region_part(wl->length, o->regions, i, &offset, &part);
    s = ramferry_shared_regions_add(*regions, (uint32_t)(kRegionId + i),
                                    wl->base + offset, part, fd, offset);
  }
  if (s != RAMFERRY_OK) return fail("region", s, NULL);
  atomic_store(&wl->ctl.phase, kListening);
  s = ramferry_export_listen_with(
      o->export_socket, *regions, o->no_handler ? NULL : on_export_event,
      &wl->ctl, o->allow_hand_over ? RAMFERRY_EXPORT_ALLOW_HAND_OVER : 0, exp);
  if (s != RAMFERRY_OK) return fail("export", s, NULL);
  atomic_store(&wl->ctl.phase, kMigration);
  fprintf(stderr, "listening %s\n", o->export_socket);
  if (write_ready_file(o->ready_file) != 0) return 1;
  s = ramferry_export_wait_migrated(*exp, o->timeout_s * 1000);
  if (s == RAMFERRY_DEADLINE_EXCEEDED) {
    fprintf(stderr, PROGRAM ": not migrated within %" PRIu64 " s\n",
            o->timeout_s);
    return 1;
  }
  if (s != RAMFERRY_OK) {
    return fail("export", s, ramferry_export_last_error(*exp));
  }
  return 0;
}

static int run_export(const struct options* o) {
  struct workload wl = {.length = o->size_mib << 20, .pattern = o->pattern};
  int fd = -1;
  wl.base = make_region(wl.length, o->seed, o->zero_percent, &fd);
  if (wl.base == NULL) return 1;
  control_init(&wl.ctl, kBaseline);

  int count = 0;
  struct writer* ws = start_writers(&wl, o, &count);
  ramferry_export* exp = NULL;
  ramferry_shared_regions* regions = NULL;
  int rc = ws == NULL || (o->rate > 0 && count < (int)o->threads);
  if (rc == 0) {
    run_for(o->baseline_seconds);
    rc = export_and_wait(o, &wl, fd, &exp, &regions);
  }
  /* Migrated: the writers are parked (or, without a handler, were
   * stopped with the process); they return now without storing. */
  if (ws != NULL) stop_writers(&wl, ws, count);

  if (rc == 0) {
    uint8_t* bases[64];
    uint64_t lengths[64];
    for (uint64_t i = 0; i < o->regions; ++i) {
      uint64_t offset;
      region_part(wl.length, o->regions, i, &offset, &lengths[i]);
      bases[i] = wl.base + offset;
    }
    const uint64_t sum = regions_digest(bases, lengths, o->regions);
    int64_t paused_at = 0;
    const ramferry_status s = ramferry_export_paused_at_ns(exp, &paused_at);
    if (s != RAMFERRY_OK) {
      rc = fail("paused_at_ns", s, ramferry_export_last_error(exp));
    } else {
      struct totals t;
      sum_writers(ws, count, &t);
      print_hist_text("baseline", &t.hist[kBaseline]);
      print_hist_text("listen", &t.hist[kListening]);
      print_hist_text("migration", &t.hist[kMigration]);
      fprintf(stderr, "%" PRIu64 " stores at %.0f/s (asked %" PRIu64 "/s)\n",
              t.stores, t.rate, o->rate);
      printf("{\"role\":\"export\",\"bytes\":%" PRIu64
             ",\"digest\":\"%016" PRIx64 "\",\"stores\":%" PRIu64
             ",\"rate_achieved\":%.1f,\"paused_at_ns\":%" PRId64
             ",\"pattern\":\"%s\",\"threads\":%d,",
             wl.length, sum, t.stores, t.rate, paused_at,
             kPatternNames[o->pattern], count);
      print_hist_json("baseline", &t.hist[kBaseline]);
      printf(",");
      print_hist_json("listen", &t.hist[kListening]);
      printf(",");
      print_hist_json("migration", &t.hist[kMigration]);
      printf("}\n");
      fflush(stdout);
    }
  }
  ramferry_export_free(exp); /* unregisters: before the unmap */
  ramferry_shared_regions_free(regions);
  free(ws);
  control_destroy(&wl.ctl);
  munmap(wl.base, wl.length);
  close(fd);
  return rc;
}

/* ---- adopt mode ---- */

static int adopt_memory(const struct options* o, ramferry_adopt** a,
                        struct workload* wl, uint64_t* resumed_at,
                        uint8_t** bases, uint64_t* lengths, size_t* count) {
  ramferry_status s = ramferry_adopt_listen(o->adopt_socket, a);
  if (s != RAMFERRY_OK) return fail("adopt", s, NULL);
  fprintf(stderr, "waiting %s\n", o->adopt_socket);
  if (write_ready_file(o->ready_file) != 0) return 1;
  s = ramferry_adopt_wait(*a, o->timeout_s * 1000);
  *resumed_at = mono_ns();
  if (s == RAMFERRY_DEADLINE_EXCEEDED) {
    fprintf(stderr, PROGRAM ": no memory handed over within %" PRIu64 " s\n",
            o->timeout_s);
    return 1;
  }
  if (s != RAMFERRY_OK) return fail("adopt", s, ramferry_adopt_last_error(*a));
  size_t n = 0;
  s = ramferry_adopt_region_count(*a, &n);
  if (s != RAMFERRY_OK) return fail("adopt", s, ramferry_adopt_last_error(*a));
  if (n == 0 || n > 64) {
    fprintf(stderr, PROGRAM ": adopted %zu regions, expected 1 to 64\n", n);
    return 1;
  }
  *count = n;
  for (size_t i = 0; i < n; ++i) {
    uint32_t id = 0;
    void* base = NULL;
    int fd = -1;
    s = ramferry_adopt_region(*a, i, &id, &base, &lengths[i], &fd);
    if (s != RAMFERRY_OK) {
      return fail("adopt", s, ramferry_adopt_last_error(*a));
    }
    bases[i] = base;
    fprintf(stderr, "adopted region %u: %" PRIu64 " bytes (fd %d)\n", id,
            lengths[i], fd);
  }
  /* The writers store into the first region. */
  wl->base = bases[0];
  wl->length = lengths[0];
  return 0;
}

static int run_adopt(const struct options* o) {
  struct workload wl = {.pattern = o->pattern};
  control_init(&wl.ctl, kAfter);
  ramferry_adopt* a = NULL;
  uint64_t resumed_at = 0;
  uint8_t* bases[64] = {NULL};
  uint64_t lengths[64] = {0};
  size_t regions = 0;
  int rc = adopt_memory(o, &a, &wl, &resumed_at, bases, lengths, &regions);
  if (rc == 0) {
    /* Before any store: what arrived. */
    const uint64_t sum = regions_digest(bases, lengths, regions);
    uint64_t bytes = 0;
    for (size_t i = 0; i < regions; ++i) bytes += lengths[i];
    int count = 0;
    struct writer* ws = NULL;
    if (o->seconds > 0) ws = start_writers(&wl, o, &count);
    rc = o->seconds > 0 &&
         (ws == NULL || (o->rate > 0 && count < (int)o->threads));
    if (rc == 0) run_for(o->seconds);
    if (ws != NULL) stop_writers(&wl, ws, count);
    if (rc == 0) {
      struct totals t;
      sum_writers(ws, count, &t);
      print_hist_text("after", &t.hist[kAfter]);
      fprintf(stderr, "%" PRIu64 " stores at %.0f/s (asked %" PRIu64 "/s)\n",
              t.stores, t.rate, o->rate);
      printf("{\"role\":\"adopt\",\"bytes\":%" PRIu64
             ",\"digest\":\"%016" PRIx64 "\",\"resumed_at_ns\":%" PRIu64
             ",\"stores\":%" PRIu64
             ",\"rate_achieved\":%.1f,\"pattern\":\"%s\",\"threads\":%d,",
             bytes, sum, resumed_at, t.stores, t.rate,
             kPatternNames[o->pattern], count);
      print_hist_json("after", &t.hist[kAfter]);
      printf("}\n");
      fflush(stdout);
    }
    free(ws);
  }
  ramferry_adopt_free(a);
  control_destroy(&wl.ctl);
  return rc;
}

int main(int argc, char** argv) {
  struct options o;
  const int parsed = parse_options(argc, argv, &o);
  if (parsed == 1) return 0;
  if (parsed != 0) return 2;
  return o.export_socket != NULL ? run_export(&o) : run_adopt(&o);
}
