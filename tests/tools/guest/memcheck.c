/* The live guest's workload (tests/tools/qemu_live_guest_test.py): /init
 * of a small Linux guest. It fills 128 MiB with a pattern that names each
 * 8-byte word and the pass that wrote it, then keeps rewriting it, 1 MiB
 * at a time with a short sleep between (about 60 MiB/s, so a migration
 * converges), checking every word of a chunk holds the previous pass's
 * pattern before it writes the next. After each pass it prints
 *   memcheck: pass N ok
 * on the serial console, or
 *   memcheck: check FAILED at word W in pass N (found X, want Y)
 * for the first word that does not hold what was written. A migration
 * that loses or corrupts a page shows as FAILED on the destination's
 * console; one that works shows the pass count going on. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>

enum { kBytes = 128 << 20, kChunk = 1 << 20, kWordsPerChunk = kChunk / 8 };

static uint64_t Pattern(uint64_t word, uint64_t pass) {
  return (word * 0x9E3779B97F4A7C15ull) ^ (pass << 40) ^ 0x5a5a5a5aull;
}

static void Say(int fd, const char* text) {
  (void)!write(fd, text, strlen(text));
}

int main(void) {
  /* stdout is the console where the kernel opened one; else ttyS0. */
  int out = 1;
  if (write(out, "", 0) < 0) {
    mount("devtmpfs", "/dev", "devtmpfs", 0, 0);
    out = open("/dev/ttyS0", O_WRONLY);
  }
  uint64_t* m = mmap(NULL, kBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (m == MAP_FAILED) {
    Say(out, "memcheck: mmap of 128 MiB FAILED\n");
    for (;;) pause();
  }
  const uint64_t words = kBytes / 8;
  for (uint64_t w = 0; w < words; ++w) m[w] = Pattern(w, 0);
  Say(out, "memcheck: filled 128 MiB\n");
  const struct timespec rest = {0, 12 * 1000 * 1000};
  char line[160];
  for (uint64_t pass = 1;; ++pass) {
    int failed = 0;
    for (uint64_t c = 0; c < words; c += kWordsPerChunk) {
      for (uint64_t w = c; w < c + kWordsPerChunk; ++w) {
        const uint64_t want = Pattern(w, pass - 1);
        if (m[w] != want && !failed) {
          snprintf(line, sizeof line,
                   "memcheck: check FAILED at word %llu in pass %llu "
                   "(found %llx, want %llx)\n",
                   (unsigned long long)w, (unsigned long long)pass,
                   (unsigned long long)m[w], (unsigned long long)want);
          Say(out, line);
          failed = 1;
        }
        m[w] = Pattern(w, pass);
      }
      nanosleep(&rest, NULL);
    }
    if (!failed) {
      snprintf(line, sizeof line, "memcheck: pass %llu ok\n",
               (unsigned long long)pass);
      Say(out, line);
    }
  }
}
