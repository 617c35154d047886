/* migrate_self: a C program that migrates its own memory, through
 * ramferry's C API, while a thread keeps writing to it.
 *
 * Two regions (the "ram" with 4 KiB pages and a small one with 64 KiB
 * pages) move from the source's memory to the destination's over loopback.
 * A writer thread stores to random places of a dirty set meanwhile (the
 * first --dirty-mib of the ram and all of the small region; some stores
 * straddle two pages) and marks each page it wrote in the program's own
 * dirty bitmap words, which every round reads and clears in place. Live
 * rounds run until one sends no fewer pages than the one before (what is
 * left is the dirty set) or --max-rounds; then the writer stops, the last
 * round goes,
 * ramferry verifies every page's digest on both ends, and (with both ends
 * in this process) the program compares the memory itself too.
 *
 *   migrate_self [--size-mib=64] [--dirty-mib=8] [--channels=2]
 *                [--transport=tcp] [--max-rounds=10] [--fork]
 *
 * --fork: the destination is a child process (two processes over
 * loopback), which tells the source its port through a pipe. Exit status
 * 0 when the destination is byte-identical.
 *
 * Build against an installed ramferry:
 *   cc -std=c11 migrate_self.c $(pkg-config --cflags --libs ramferry) -pthread
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ramferry/ramferry.h"

enum { kRegions = 2 };

struct region {
  uint32_t id;
  uint32_t page_size;
  uint64_t length;
  uint8_t* base;
  uint64_t* words; /* the source's dirty bitmap, one bit per page */
};

struct writer {
  struct region* regions;
  uint64_t dirty_pages; /* of the first region */
  atomic_int stop;
  uint64_t stores;
};

static uint64_t next_random(uint64_t* s) {
  /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

static uint8_t* map_memory(uint64_t length) {
  void* p = mmap(NULL, length, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : (uint8_t*)p;
}

/* A live workload's stores race with the engine reading the same pages, by
 * design (a page written while it is sent is marked, and goes again next
 * round): like the project's own test writers, not instrumented under
 * ThreadSanitizer. */
#if defined(__SANITIZE_THREAD__)
#define NOT_INSTRUMENTED __attribute__((no_sanitize("thread")))
#else
#define NOT_INSTRUMENTED
#endif

NOT_INSTRUMENTED static void store64(uint8_t* at, uint64_t value) {
  volatile uint8_t* v = at;
  for (int i = 0; i < 8; ++i) v[i] = (uint8_t)(value >> (8 * i));
}

/* Stores to random places: 8 bytes inside a page, or 16 bytes across the
 * end of one page and the start of the next. Each store first, then the
 * mark (ramferry_bitmap_mark releases: the round that takes the bit sees
 * the store). */
static void* write_loop(void* arg) {
  struct writer* w = arg;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  while (!atomic_load(&w->stop)) {
    const uint64_t r = next_random(&seed);
    struct region* reg = &w->regions[(r & 7) == 0 ? 1 : 0];
    const uint64_t pages =
        reg == &w->regions[0] ? w->dirty_pages : reg->length / reg->page_size;
    const uint64_t page = (r >> 8) % pages;
    const uint64_t value = next_random(&seed);
    if ((r & 0xf0) == 0 && page + 1 < pages) {
      uint8_t* at = reg->base + (page + 1) * reg->page_size - 8;
      store64(at, value);
      store64(at + 8, ~value);
      ramferry_bitmap_mark(reg->words, page);
      ramferry_bitmap_mark(reg->words, page + 1);
    } else {
      const uint64_t offset = (value % (reg->page_size / 8)) * 8;
      store64(reg->base + page * reg->page_size + offset, value);
      ramferry_bitmap_mark(reg->words, page);
    }
    ++w->stores;
  }
  return NULL;
}

static void on_progress(const ramferry_progress* p, void* user) {
  const char* who = user;
  if (p->round_done) {
    printf("%s: round %" PRIu64 " confirmed, %" PRIu64 " pages so far\n", who,
           p->rounds, p->pages);
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int fail(const char* what, ramferry_status s) {
  fprintf(stderr, "migrate_self: %s: %s: %s\n", what, ramferry_status_name(s),
          ramferry_last_error());
  return 1;
}

static ramferry_options* make_options(const uint8_t* key, size_t key_len,
                                      const char* transport,
                                      uint32_t channels) {
  ramferry_options* opt = ramferry_options_new();
  if (opt == NULL) return NULL;
  if (ramferry_options_set_host(opt, "127.0.0.1") != RAMFERRY_OK ||
      ramferry_options_set_key(opt, key, key_len) != RAMFERRY_OK ||
      ramferry_options_set_transport(opt, transport) != RAMFERRY_OK ||
      ramferry_options_set_channels(opt, channels) != RAMFERRY_OK) {
    fprintf(stderr, "migrate_self: options: %s\n",
            ramferry_options_last_error(opt));
    ramferry_options_free(opt);
    return NULL;
  }
  return opt;
}

static ramferry_regions* make_regions(struct region* regions) {
  ramferry_regions* list = ramferry_regions_new();
  if (list == NULL) return NULL;
  for (int i = 0; i < kRegions; ++i) {
    if (ramferry_regions_add(list, regions[i].id, regions[i].base,
                             regions[i].length,
                             regions[i].page_size) != RAMFERRY_OK) {
      fprintf(stderr, "migrate_self: region %u: %s\n", regions[i].id,
              ramferry_regions_last_error(list));
      ramferry_regions_free(list);
      return NULL;
    }
  }
  return list;
}

/* ---- destination ---- */

struct serving {
  ramferry_receiver* receiver;
  ramferry_status status;
};

static void* serve(void* arg) {
  struct serving* s = arg;
  s->status = ramferry_receiver_serve(s->receiver);
  if (s->status != RAMFERRY_OK) {
    fprintf(stderr, "migrate_self: destination: %s\n",
            ramferry_receiver_last_error(s->receiver));
  }
  return NULL;
}

static int listen_on(struct region* layout, const ramferry_options* opt,
                     ramferry_receiver** out, uint16_t* port) {
  struct region dst[kRegions];
  memcpy(dst, layout, sizeof(dst));
  for (int i = 0; i < kRegions; ++i) {
    dst[i].base = map_memory(dst[i].length);
    if (dst[i].base == NULL) return 1;
    layout[i].base = dst[i].base;
  }
  ramferry_regions* regions = make_regions(dst);
  if (regions == NULL) return 1;
  ramferry_status s = ramferry_receiver_listen(opt, regions, out);
  ramferry_regions_free(regions); /* copied by the receiver */
  if (s != RAMFERRY_OK) return fail("listen", s);
  ramferry_receiver_port(*out, port);
  return 0;
}

/* ---- source ---- */

static int run_source(struct region* src, const ramferry_options* opt,
                      uint64_t dirty_pages, uint32_t max_rounds) {
  const double start = now_s();
  ramferry_regions* regions = make_regions(src);
  if (regions == NULL) return 1;
  ramferry_sender* tx = NULL;
  ramferry_status s = ramferry_sender_connect(opt, regions, &tx);
  ramferry_regions_free(regions);
  if (s != RAMFERRY_OK) return fail("connect", s);
  ramferry_sender_set_progress(tx, on_progress, "source", 0);

  uint64_t* bitmaps[kRegions];
  for (int i = 0; i < kRegions; ++i) {
    bitmaps[i] = src[i].words;
    ramferry_bitmap_mark_range(src[i].words, 0,
                               src[i].length / src[i].page_size);
  }
  struct writer w = {.regions = src, .dirty_pages = dirty_pages};
  atomic_init(&w.stop, 0);
  pthread_t writer;
  pthread_create(&writer, NULL, write_loop, &w);

  int rc = 0;
  ramferry_round_result round = {.size = sizeof(round)};
  uint64_t previous = UINT64_MAX;
  for (uint32_t i = 0; i < max_rounds; ++i) {
    s = ramferry_sender_send_round(tx, bitmaps, kRegions, &round);
    if (s != RAMFERRY_OK) break;
    printf("source: live round %" PRIu64 ": %" PRIu64 " pages in %.1f ms\n",
           round.round, round.pages, round.elapsed_ns / 1e6);
    if (round.pages >= previous) break; /* down to the dirty set */
    previous = round.pages;
  }
  atomic_store(&w.stop, 1);
  pthread_join(writer, NULL);
  if (s == RAMFERRY_OK) {
    /* The writer is stopped: the last round takes what it left. */
    s = ramferry_sender_send_round(tx, bitmaps, kRegions, &round);
    printf("source: final round: %" PRIu64 " pages, %" PRIu64
           " stores during the migration\n",
           round.pages, w.stores);
  }
  ramferry_verify_report report = {.size = sizeof(report)};
  if (s == RAMFERRY_OK) s = ramferry_sender_verify(tx, &report);
  if (s == RAMFERRY_OK) {
    printf("source: verified %" PRIu64 " pages, %" PRIu64 " differ\n",
           report.pages_checked, report.pages_mismatched);
    s = ramferry_sender_finish(tx);
  }
  if (s != RAMFERRY_OK) {
    rc = fail("source", s);
  } else {
    ramferry_stats st = {.size = sizeof(st)};
    ramferry_sender_stats(tx, &st);
    printf("source: %" PRIu64 " rounds, %" PRIu64
           " pages, %.1f MiB over %u "
           "channels\n",
           st.rounds, st.pages, st.payload_bytes / 1048576.0, st.channels);
    printf("source: connect to finish: %.3f s\n", now_s() - start);
  }
  ramferry_sender_free(tx);
  return rc;
}

int main(int argc, char** argv) {
  uint64_t size_mib = 64, dirty_mib = 8;
  uint32_t channels = 2, max_rounds = 10;
  const char* transport = "tcp";
  int fork_destination = 0;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--size-mib=", 11) == 0) {
      size_mib = strtoull(argv[i] + 11, NULL, 10);
    } else if (strncmp(argv[i], "--dirty-mib=", 12) == 0) {
      dirty_mib = strtoull(argv[i] + 12, NULL, 10);
    } else if (strncmp(argv[i], "--channels=", 11) == 0) {
      channels = (uint32_t)strtoul(argv[i] + 11, NULL, 10);
    } else if (strncmp(argv[i], "--transport=", 12) == 0) {
      transport = argv[i] + 12;
    } else if (strncmp(argv[i], "--max-rounds=", 13) == 0) {
      max_rounds = (uint32_t)strtoul(argv[i] + 13, NULL, 10);
    } else if (strcmp(argv[i], "--fork") == 0) {
      fork_destination = 1;
    } else {
      fprintf(stderr,
              "usage: %s [--size-mib=N] [--dirty-mib=N] [--channels=N] "
              "[--transport=NAME] [--max-rounds=N] [--fork]\n",
              argv[0]);
      return 2;
    }
  }
  if (size_mib == 0) size_mib = 1;
  if (dirty_mib == 0 || dirty_mib > size_mib) dirty_mib = size_mib;
  printf("migrate_self: ramferry %s (header %s), %" PRIu64
         " MiB, writes into %" PRIu64 " MiB of it\n",
         ramferry_version(), RAMFERRY_VERSION, size_mib, dirty_mib);

  /* Both ends hold the same key: 32 random bytes. */
  uint8_t key[32];
  FILE* urandom = fopen("/dev/urandom", "rb");
  if (urandom == NULL || fread(key, 1, sizeof(key), urandom) != sizeof(key)) {
    perror("/dev/urandom");
    return 1;
  }
  fclose(urandom);

  struct region src[kRegions] = {
      {1, 4096, size_mib << 20, NULL, NULL},
      {2, 65536, 4u << 20, NULL, NULL},
  };
  struct region dst[kRegions];
  memcpy(dst, src, sizeof(dst));

  ramferry_options* opt = make_options(key, sizeof(key), transport, channels);
  if (opt == NULL) return 1;

  /* The destination: a thread of this process, or a child process. */
  ramferry_receiver* rx = NULL;
  uint16_t port = 0;
  pid_t child = -1;
  pthread_t server;
  struct serving serving = {NULL, RAMFERRY_UNKNOWN};
  if (fork_destination) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    child = fork();
    if (child == 0) {
      close(fds[0]);
      if (listen_on(dst, opt, &rx, &port) != 0) _exit(1);
      if (write(fds[1], &port, sizeof(port)) != sizeof(port)) _exit(1);
      close(fds[1]);
      serving.receiver = rx;
      serve(&serving);
      ramferry_receiver_free(rx);
      _exit(serving.status == RAMFERRY_OK ? 0 : 1);
    }
    close(fds[1]);
    if (read(fds[0], &port, sizeof(port)) != sizeof(port)) {
      fprintf(stderr, "migrate_self: the destination did not start\n");
      return 1;
    }
    close(fds[0]);
  } else {
    if (listen_on(dst, opt, &rx, &port) != 0) return 1;
    serving.receiver = rx;
    pthread_create(&server, NULL, serve, &serving);
  }

  /* The source: its memory filled, its bitmaps all clear. */
  uint64_t seed = 42;
  for (int i = 0; i < kRegions; ++i) {
    src[i].base = map_memory(src[i].length);
    src[i].words =
        calloc(ramferry_bitmap_words(src[i].length / src[i].page_size), 8);
    if (src[i].base == NULL || src[i].words == NULL) return 1;
    for (uint64_t off = 0; off < src[i].length; off += 8) {
      store64(src[i].base + off, next_random(&seed));
    }
  }
  ramferry_options_set_port(opt, port);
  int rc = run_source(src, opt, (dirty_mib << 20) / 4096, max_rounds);
  ramferry_options_free(opt);

  if (fork_destination) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "migrate_self: the destination process failed\n");
      rc = 1;
    }
  } else {
    if (rc != 0) ramferry_receiver_abort(rx, "the source failed");
    pthread_join(server, NULL);
    if (serving.status != RAMFERRY_OK) rc = 1;
    ramferry_stats st = {.size = sizeof(st)};
    ramferry_receiver_stats(rx, &st);
    printf("destination: %" PRIu64 " rounds applied, %" PRIu64 " pages\n",
           st.rounds, st.pages);
    ramferry_receiver_free(rx);
    /* Our own check, on top of ramferry's digests. */
    for (int i = 0; rc == 0 && i < kRegions; ++i) {
      if (memcmp(src[i].base, dst[i].base, src[i].length) != 0) {
        fprintf(stderr, "migrate_self: region %u differs\n", src[i].id);
        rc = 1;
      }
    }
  }
  for (int i = 0; i < kRegions; ++i) {
    free(src[i].words);
    munmap(src[i].base, src[i].length);
    if (!fork_destination) munmap(dst[i].base, dst[i].length);
  }
  printf("migrate_self: %s\n", rc == 0 ? "byte-identical" : "FAILED");
  return rc;
}
