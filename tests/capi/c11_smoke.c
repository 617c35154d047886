/* The C API from C itself: this file is compiled as C11 with -Wall
 * -Wextra -pedantic -Werror (tests/capi/CMakeLists.txt), so the header
 * stays plain C, and it runs a small loopback session through the static
 * library: error paths, a round, verify, finish. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ramferry/ramferry.h"

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, \
              __LINE__, #cond, ramferry_last_error());                        \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static void* serve(void* arg) {
  static ramferry_status status;
  status = ramferry_receiver_serve(arg);
  return &status;
}

int main(void) {
  enum { kLength = 2 << 20, kPages = kLength / 4096 };
  CHECK(strcmp(ramferry_version(), RAMFERRY_VERSION) == 0);
  CHECK(ramferry_options_set_port(NULL, 1) == RAMFERRY_INVALID_ARGUMENT);
  CHECK(strstr(ramferry_last_error(), "NULL") != NULL);

  ramferry_options* opt = ramferry_options_new();
  CHECK(opt != NULL);
  CHECK(ramferry_options_set_transport(opt, "nope") ==
        RAMFERRY_INVALID_ARGUMENT);
  CHECK(strstr(ramferry_options_last_error(opt), "nope") != NULL);
  CHECK(ramferry_options_set_insecure(opt, 1) == RAMFERRY_OK);

  uint8_t* src = mmap(NULL, kLength, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint8_t* dst = mmap(NULL, kLength, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(src != MAP_FAILED && dst != MAP_FAILED);
  for (size_t i = 0; i < kLength; ++i) src[i] = (uint8_t)(i * 7 + i / 4096);

  ramferry_regions* rr = ramferry_regions_new();
  CHECK(ramferry_regions_add(rr, 1, dst, kLength, 4096) == RAMFERRY_OK);
  ramferry_receiver* rx = NULL;
  CHECK(ramferry_receiver_listen(opt, rr, &rx) == RAMFERRY_OK);
  ramferry_regions_free(rr);
  uint16_t port = 0;
  CHECK(ramferry_receiver_port(rx, &port) == RAMFERRY_OK && port != 0);
  pthread_t server;
  pthread_create(&server, NULL, serve, rx);

  ramferry_regions* sr = ramferry_regions_new();
  CHECK(ramferry_regions_add(sr, 1, src, kLength, 4096) == RAMFERRY_OK);
  CHECK(ramferry_options_set_port(opt, port) == RAMFERRY_OK);
  ramferry_sender* tx = NULL;
  CHECK(ramferry_sender_connect(opt, sr, &tx) == RAMFERRY_OK);
  ramferry_regions_free(sr);

  uint64_t* words = calloc(ramferry_bitmap_words(kPages), sizeof(uint64_t));
  uint64_t* const bitmaps[] = {words};
  ramferry_bitmap_mark_range(words, 0, kPages);
  ramferry_round_result round = {.size = sizeof(round)};
  CHECK(ramferry_sender_send_round(tx, bitmaps, 1, &round) == RAMFERRY_OK);
  CHECK(round.pages == kPages);
  src[5 * 4096] ^= 1;
  ramferry_bitmap_mark(words, 5);
  CHECK(ramferry_sender_send_round(tx, bitmaps, 1, &round) == RAMFERRY_OK);
  CHECK(round.pages == 1);
  ramferry_verify_report report = {.size = sizeof(report)};
  CHECK(ramferry_sender_verify(tx, &report) == RAMFERRY_OK);
  CHECK(report.pages_checked == kPages && report.pages_mismatched == 0);
  CHECK(ramferry_sender_finish(tx) == RAMFERRY_OK);
  void* served = NULL;
  pthread_join(server, &served);
  CHECK(*(ramferry_status*)served == RAMFERRY_OK);
  CHECK(memcmp(src, dst, kLength) == 0);
  ramferry_stats stats = {.size = sizeof(stats)};
  CHECK(ramferry_receiver_stats(rx, &stats) == RAMFERRY_OK);
  CHECK(stats.rounds == 2 && stats.pages == kPages + 1);

  ramferry_sender_free(tx);
  ramferry_receiver_free(rx);
  ramferry_options_free(opt);
  free(words);
  puts("c11_smoke: OK");
  return 0;
}
