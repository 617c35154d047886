/* export_memory: a program that lets another process migrate its memory,
 * through ramferry's C API ("memory of another process" in ramferry.h).
 *
 * It maps a memfd region, offers it on a unix socket
 * (ramferry_export_listen) and keeps writing into it from a thread. The
 * migration process tells it when to stop writing (PAUSE, for the final
 * round), when it may go on (RESUME: the migration failed) and when the
 * memory lives at the destination (MIGRATED: it exits).
 *
 *   export_memory --socket=PATH [--size-mib=64] [--timeout-s=60]
 *   ramferry-migrate --demo --attach=PATH     (in another shell)
 *
 * Build against an installed ramferry:
 *   cc -std=c11 export_memory.c $(pkg-config --cflags --libs ramferry) -pthread
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ramferry/ramferry.h"

struct memory {
  pthread_mutex_t mu; /* the writer stores only while it holds mu */
  pthread_cond_t cv;
  int paused, done;
  uint64_t* words;
  uint64_t count, stores;
};

/* The export's events, on its own thread. */
static void on_event(void* user, ramferry_export_event event) {
  struct memory* m = user;
  pthread_mutex_lock(&m->mu); /* once held, no store is in flight */
  if (event == RAMFERRY_EXPORT_PAUSE) m->paused = 1;
  if (event == RAMFERRY_EXPORT_RESUME) m->paused = 0;
  if (event == RAMFERRY_EXPORT_MIGRATED) m->done = 1;
  /* DETACHED_WHILE_PAUSED: a destination may run on; stay paused. */
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

static void* writer(void* arg) {
  struct memory* m = arg;
  const struct timespec tick = {0, 1000000}; /* 1 ms */
  pthread_mutex_lock(&m->mu);
  while (!m->done) {
    if (m->paused) {
      pthread_cond_wait(&m->cv, &m->mu);
      continue;
    }
    for (int i = 0; i < 64; ++i, ++m->stores) { /* a page and a word apart */
      m->words[(m->stores * 513) % m->count] = m->stores;
    }
    pthread_mutex_unlock(&m->mu);
    nanosleep(&tick, NULL);
    pthread_mutex_lock(&m->mu);
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

static int fail(const char* what, ramferry_status s, const char* message) {
  fprintf(stderr, "export_memory: %s: %s: %s\n", what, ramferry_status_name(s),
          message[0] != '\0' ? message : ramferry_last_error());
  return 1;
}

int main(int argc, char** argv) {
  static const struct option kOptions[] = {
      {"socket", required_argument, NULL, 's'},
      {"size-mib", required_argument, NULL, 'm'},
      {"timeout-s", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char* socket_path = NULL;
  uint64_t size_mib = 64, timeout_s = 60;
  for (int c; (c = getopt_long(argc, argv, "", kOptions, NULL)) != -1;) {
    switch (c) {
      case 's':
        socket_path = optarg;
        break;
      case 'm':
        size_mib = strtoull(optarg, NULL, 10);
        break;
      case 't':
        timeout_s = strtoull(optarg, NULL, 10);
        break;
      default:
        fprintf(c == 'h' ? stdout : stderr,
                "usage: export_memory --socket=PATH [--size-mib=64] "
                "[--timeout-s=60]\n\nOffers a memfd of --size-mib MiB to "
                "ramferry-migrate --attach=PATH\nand writes into it until "
                "migrated, or for --timeout-s seconds.\n");
        return c == 'h' ? 0 : 2;
    }
  }
  if (socket_path == NULL || size_mib == 0 || optind != argc) {
    fprintf(stderr, "export_memory: want --socket=PATH (see --help)\n");
    return 2;
  }

  const uint64_t length = size_mib << 20;
  /* Sealing allowed: the migration process seals it against shrinking. */
  const int fd = memfd_create("export_memory", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* base = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)length) == 0) {
    base = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (base == MAP_FAILED) {
    perror("export_memory: memfd");
    return 1;
  }
  struct memory m = {.mu = PTHREAD_MUTEX_INITIALIZER,
                     .cv = PTHREAD_COND_INITIALIZER,
                     .words = base,
                     .count = length / 8};
  for (uint64_t i = 0; i < m.count; ++i) m.words[i] = i * UINT64_C(2654435761);

  /* Region 1 is the whole memfd; the export tracks its writes from here. */
  ramferry_shared_regions* regions = ramferry_shared_regions_new();
  ramferry_export* exp = NULL;
  if (regions == NULL) return 1;
  ramferry_status s =
      ramferry_shared_regions_add(regions, 1, base, length, fd, 0);
  if (s == RAMFERRY_OK) {
    s = ramferry_export_listen(socket_path, regions, on_event, &m, &exp);
  }
  if (s != RAMFERRY_OK) return fail("export", s, "");
  fprintf(stderr, "export_memory: listening on %s\n", socket_path);

  pthread_t thread;
  if (pthread_create(&thread, NULL, writer, &m) != 0) return 1;
  s = ramferry_export_wait_migrated(exp, timeout_s * 1000);
  pthread_mutex_lock(&m.mu); /* migrated or not: stop writing */
  m.done = 1;
  pthread_cond_broadcast(&m.cv);
  pthread_mutex_unlock(&m.mu);
  pthread_join(thread, NULL);
  int rc = 0;
  if (s != RAMFERRY_OK) {
    rc = fail("not migrated", s, ramferry_export_last_error(exp));
  } else {
    printf("export_memory: migrated after %" PRIu64 " stores\n", m.stores);
  }
  ramferry_export_free(exp); /* unregisters the region: before the unmap */
  ramferry_shared_regions_free(regions);
  munmap(base, length);
  close(fd);
  return rc;
}
