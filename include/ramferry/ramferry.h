/* ramferry's C API: a C11 header over the C++ library (ramferry::Sender,
 * Receiver, SessionOptions, Region, DirtyBitmap), for C programs and for
 * bindings (Rust, Python ctypes/cffi, Go cgo).
 *
 * - Handles are opaque. Every ramferry_*_new / _connect / _listen has a
 *   matching _free; a handle is never freed by the library behind the
 *   caller's back. _free(NULL) does nothing.
 * - Every call that can fail returns a ramferry_status (RAMFERRY_OK = 0;
 *   the other values mirror absl::StatusCode). The message of a failed
 *   call is kept by the handle it was made on (ramferry_*_last_error),
 *   and by the calling thread (ramferry_last_error), which also covers
 *   calls made on a NULL handle and a _connect / _listen that created no
 *   handle. A returned string is owned by the library: it stays valid
 *   until the next call on that handle (or, for ramferry_last_error, the
 *   next failing call on that thread).
 * - Structs the library fills (stats, round and verify results) start
 *   with a `size` field the caller sets to sizeof(the struct): a newer
 *   library fills only what an older caller has room for, and fields are
 *   only ever appended.
 * - Callbacks take a `void* user` that the library passes back untouched.
 * - No macro is needed to call anything; the macros below only describe
 *   the version the header came with.
 *
 * Threads: one thread drives a sender or a receiver; _abort, _stats,
 * ramferry_sender_set_max_bandwidth and the receiver's post-copy queries
 * may be called from any thread meanwhile.
 *
 * Source:
 *
 *   ramferry_options* opt = ramferry_options_new();
 *   ramferry_options_set_host(opt, "10.0.0.2");
 *   ramferry_options_set_port(opt, 7070);
 *   ramferry_options_set_key_file(opt, "/etc/ramferry/key");
 *   ramferry_regions* regions = ramferry_regions_new();
 *   ramferry_regions_add(regions, 1, base, length, 4096);
 *   ramferry_sender* tx;
 *   if (ramferry_sender_connect(opt, regions, &tx) != RAMFERRY_OK)
 *     fprintf(stderr, "%s\n", ramferry_last_error());
 *   uint64_t* words = calloc(ramferry_bitmap_words(length / 4096), 8);
 *   ramferry_bitmap_mark_range(words, 0, length / 4096);  // round 0: all
 *   uint64_t* const bitmaps[] = {words};       // one per region
 *   ramferry_sender_send_round(tx, bitmaps, 1, NULL);
 *   // writers: store to page p, then ramferry_bitmap_mark(words, p);
 *   // more rounds, then stop the writers and send the last one
 *   ramferry_sender_verify(tx, NULL);
 *   ramferry_sender_finish(tx);
 *   ramferry_sender_free(tx);
 *
 * Destination: ramferry_receiver_listen, then ramferry_receiver_serve
 * (blocks until the source finished or the session failed).
 */
#ifndef RAMFERRY_RAMFERRY_H_
#define RAMFERRY_RAMFERRY_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; ramferry_version() tells the library's. */
#define RAMFERRY_VERSION_MAJOR 0
#define RAMFERRY_VERSION_MINOR 1
#define RAMFERRY_VERSION_PATCH 0
#define RAMFERRY_VERSION "0.1.0"

/* "MAJOR.MINOR.PATCH" of the library that is linked. */
const char* ramferry_version(void);
/* MAJOR * 10000 + MINOR * 100 + PATCH. */
uint32_t ramferry_version_number(void);

/* ---- errors ---- */

/* The same values as absl::StatusCode. */
typedef enum ramferry_status {
  RAMFERRY_OK = 0,
  RAMFERRY_CANCELLED = 1,
  RAMFERRY_UNKNOWN = 2,
  RAMFERRY_INVALID_ARGUMENT = 3,
  RAMFERRY_DEADLINE_EXCEEDED = 4,
  RAMFERRY_NOT_FOUND = 5,
  RAMFERRY_ALREADY_EXISTS = 6,
  RAMFERRY_PERMISSION_DENIED = 7,
  RAMFERRY_RESOURCE_EXHAUSTED = 8,
  RAMFERRY_FAILED_PRECONDITION = 9,
  RAMFERRY_ABORTED = 10,
  RAMFERRY_OUT_OF_RANGE = 11,
  RAMFERRY_UNIMPLEMENTED = 12,
  RAMFERRY_INTERNAL = 13,
  RAMFERRY_UNAVAILABLE = 14,
  RAMFERRY_DATA_LOSS = 15,
  RAMFERRY_UNAUTHENTICATED = 16
} ramferry_status;

/* "OK", "INVALID_ARGUMENT", ... (static strings); "UNKNOWN" for a value
 * outside the enum. */
const char* ramferry_status_name(ramferry_status status);
/* The message of the last call that failed on this thread ("" if none). */
const char* ramferry_last_error(void);

/* ---- options ---- */

/* Settings for one end of a session (SessionOptions). Both ends take the
 * same kind of handle; each reads what concerns it. The defaults are the
 * C++ library's: host 127.0.0.1, port 0, transport tcp, 2 channels, no
 * key (which both ends refuse unless insecure is set). */
typedef struct ramferry_options ramferry_options;

ramferry_options* ramferry_options_new(void); /* NULL if out of memory */
void ramferry_options_free(ramferry_options* options);
/* The message of the last call on `options` that failed ("" if none). */
const char* ramferry_options_last_error(const ramferry_options* options);

/* Source: where to connect. Destination: where to listen (port 0 picks a
 * free one: ramferry_receiver_port). */
ramferry_status ramferry_options_set_host(ramferry_options* options,
                                          const char* host);
ramferry_status ramferry_options_set_port(ramferry_options* options,
                                          uint16_t port);
/* "tcp", "tcp-zerocopy", "uring-zc", "rdma", or "auto" (the source picks
 * copy for a peer on this host, zero-copy behind a NIC, when it connects;
 * ramferry_sender_warning says which and why). */
ramferry_status ramferry_options_set_transport(ramferry_options* options,
                                               const char* name);
/* Parallel data channels, 1 to 64. */
ramferry_status ramferry_options_set_channels(ramferry_options* options,
                                              uint32_t channels);
/* The pre-shared key: read from a file now (16 to 1024 bytes, a regular
 * file neither group nor others can access), or given as bytes (copied). */
ramferry_status ramferry_options_set_key_file(ramferry_options* options,
                                              const char* path);
ramferry_status ramferry_options_set_key(ramferry_options* options,
                                         const void* key, size_t length);
/* Nonzero: run without a key (trusted networks and tests only). */
ramferry_status ramferry_options_set_insecure(ramferry_options* options,
                                              int insecure);
/* "auto", "none", "mac" or "encrypt". */
ramferry_status ramferry_options_set_protect(ramferry_options* options,
                                             const char* protection);
/* "off", "on" or "auto" (zstd; the source's choice). */
ramferry_status ramferry_options_set_compression(ramferry_options* options,
                                                 const char* compression);
/* "full", "sent" or "reread" (how ramferry_sender_verify checks). */
ramferry_status ramferry_options_set_verify(ramferry_options* options,
                                            const char* mode);
/* Source: bytes per second all channels together may send; 0: no cap. */
ramferry_status ramferry_options_set_max_bandwidth(ramferry_options* options,
                                                   uint64_t bytes_per_second);
/* Nonzero: allow post-copy (both ends must). */
ramferry_status ramferry_options_set_postcopy(ramferry_options* options,
                                              int postcopy);
/* Nonzero (the default): page requests get a connection of their own. */
ramferry_status ramferry_options_set_postcopy_urgent_channel(
    ramferry_options* options, int urgent);
/* Destination: how long to wait for the source to resume a post-copy
 * session that was cut (0: give up at once). */
ramferry_status ramferry_options_set_postcopy_resume_timeout_ms(
    ramferry_options* options, uint64_t milliseconds);
/* Source: how long to keep retrying the first connection. */
ramferry_status ramferry_options_set_connect_timeout_ms(
    ramferry_options* options, uint64_t milliseconds);
/* Any other option by name, the value as text (what the C++
 * SessionOptions field means, include/ramferry/options.h): a binding
 * reaches every option through this one call. Names: channel-endpoints
 * ("HOST:PORT,HOST:PORT": channel i dials item i % count; "" clears),
 * completion, delta (off|on|auto); the numbers channels, max-channels,
 * packet-pages, max-packet-pages, header-slots, ring-entries,
 * rdma-chunk-bytes, rdma-max-inline, compression-level, delta-cache-bytes,
 * each in the range the session
 * itself checks (the NOT_FOUND message lists them); registered-buffers,
 * fallback-to-tcp-zerocopy, rdma-pin-all, rdma-reg-batch,
 * survive-channel-loss, zero-pages, skip-untouched, single-thread,
 * announce-next-header (1/0, true/false, on/off), handshake-timeout-ms,
 * stall-timeout-ms, round-timeout-ms. An unknown name is
 * RAMFERRY_NOT_FOUND (the message lists the names); a bad value
 * RAMFERRY_INVALID_ARGUMENT, and the options stay as they were. */
ramferry_status ramferry_options_set(ramferry_options* options,
                                     const char* name, const char* value);

/* ---- regions ---- */

/* The memory a session moves: a list of regions, each a page-aligned range
 * of the caller's memory with an id both ends agree on and a page size of
 * its own. The list is copied when a sender or receiver is made, so it may
 * be freed then; the memory itself must outlive that sender or receiver. */
typedef struct ramferry_regions ramferry_regions;

ramferry_regions* ramferry_regions_new(void); /* NULL if out of memory */
void ramferry_regions_free(ramferry_regions* regions);
const char* ramferry_regions_last_error(const ramferry_regions* regions);
/* Appends a region: `page_size` a power of two from 512 bytes to 1 GiB
 * (the tracking unit: one bitmap bit per page), `length` a nonzero
 * multiple of it, `base` aligned to 4 KiB (to page_size where smaller).
 * Bitmaps are passed in the order regions were added. */
ramferry_status ramferry_regions_add(ramferry_regions* regions, uint32_t id,
                                     void* base, uint64_t length,
                                     uint32_t page_size);
/* Names the file that region `id`'s memory maps MAP_SHARED (a memfd, a
 * tmpfs file) and the file offset the mapping starts at; fd -1 takes it
 * back. The session then moves long runs of that region's pages through
 * the file (pread/pwrite) instead of through this process's page tables,
 * which saves the faults or the populate a mapping costs on first touch
 * (see Region::fd in ramferry/region.h). Checked now against
 * /proc/self/maps: the descriptor must be a regular file, not on
 * hugetlbfs, long enough, and map the region at that offset, shared; a
 * receiver also needs it opened O_RDWR. The descriptor stays the
 * caller's and must stay open while a sender or receiver uses it. */
ramferry_status ramferry_regions_set_file(ramferry_regions* regions,
                                          uint32_t id, int fd,
                                          uint64_t fd_offset);
/* The number of regions added. */
size_t ramferry_regions_count(const ramferry_regions* regions);

/* ---- dirty bitmaps ----
 * The caller owns its bitmaps: one array of uint64_t words per region, page
 * p of the region being bit (p % 64) of words[p / 64]. A send round reads
 * and clears the caller's words IN PLACE (nothing is copied): it takes each
 * word atomically, so a page marked while a round runs is sent by this
 * round or the next, never lost. Writers that mark while a round may run
 * must mark atomically, with release order, after their store to the page:
 * ramferry_bitmap_mark, C11 atomic_fetch_or_explicit(...,
 * memory_order_release), or __atomic_fetch_or(..., __ATOMIC_RELEASE). Bits
 * past the region's last page are ignored. */

/* Words of a bitmap for `pages` pages: (pages + 63) / 64. */
size_t ramferry_bitmap_words(uint64_t pages);
/* Marks page `page` dirty (atomic OR, release order). */
void ramferry_bitmap_mark(uint64_t* words, uint64_t page);
/* Marks `count` pages from `first`. */
void ramferry_bitmap_mark_range(uint64_t* words, uint64_t first,
                                uint64_t count);

/* ---- stats ---- */

/* Session totals over every channel, on either end. */
typedef struct ramferry_stats {
  uint32_t size; /* the caller sets sizeof(ramferry_stats) */
  uint32_t channels;
  uint64_t rounds;          /* source: rounds confirmed; destination: applied */
  uint64_t packets;         /* data packets */
  uint64_t pages;           /* pages in them, zero pages included */
  uint64_t payload_bytes;   /* page bytes that travelled */
  uint64_t header_bytes;    /* packet header bytes */
  uint64_t zero_pages;      /* pages that went as an offset alone */
  uint64_t untouched_pages; /* pages the source never touched */
  uint64_t compressed_packets;
  uint64_t compressed_input_bytes;
  uint64_t compressed_output_bytes;
  uint64_t connections_refused; /* destination */
  uint64_t auth_failures;       /* destination */
  uint64_t channels_lost;
  uint64_t resent_pages; /* source: sent again after a channel was lost */
  /* post-copy (zeros until the switch) */
  uint32_t postcopy_started;
  uint32_t postcopy_urgent_channel;
  uint64_t postcopy_missing_pages;
  uint64_t postcopy_requested_pages;
  uint64_t postcopy_urgent_pages;
  uint64_t postcopy_pushed_pages;
  uint64_t postcopy_duplicate_pages;
  uint64_t postcopy_faults; /* destination */
  uint64_t postcopy_latency_p50_us;
  uint64_t postcopy_latency_p99_us;
  uint64_t postcopy_latency_max_us;
  uint64_t postcopy_blocked_us;
  uint64_t postcopy_switch_ns;
  uint64_t postcopy_duration_ns;
  uint64_t postcopy_resumes;
} ramferry_stats;

/* Per channel: every counter of ramferry/channel_counters.h by name
 * (packets, pages, payload_bytes, zc_copied, rdma_sq_full_hits, ...; the
 * names and what each counts are listed by ramferry_channel_counter_name
 * and _doc, i from 0 to ramferry_channel_counter_count() - 1, static
 * strings, NULL past the end). `channel` is 0 to ramferry_stats.channels - 1;
 * an unknown channel is RAMFERRY_OUT_OF_RANGE, an unknown name
 * RAMFERRY_NOT_FOUND. Any thread, like _stats. */
size_t ramferry_channel_counter_count(void);
const char* ramferry_channel_counter_name(size_t i);
const char* ramferry_channel_counter_doc(size_t i);

/* What a progress callback sees: the session's totals so far. */
typedef struct ramferry_progress {
  uint32_t size;       /* sizeof(ramferry_progress) of the library */
  uint32_t round_done; /* 1: called because a round was just confirmed */
  uint64_t rounds;     /* confirmed (source) or applied (destination) */
  uint64_t pages;      /* pages that travelled so far */
  uint64_t payload_bytes;
  uint64_t header_bytes;
} ramferry_progress;

/* Called with the totals so far; `progress` is valid during the call. Keep
 * it short, and make no call on the same sender or receiver from it. */
typedef void (*ramferry_progress_fn)(const ramferry_progress* progress,
                                     void* user);

/* ---- source ---- */

typedef struct ramferry_sender ramferry_sender;

typedef struct ramferry_round_result {
  uint32_t size; /* the caller sets sizeof(ramferry_round_result) */
  uint64_t round;
  uint64_t pages;
  uint64_t bytes;
  uint64_t elapsed_ns;
} ramferry_round_result;

typedef struct ramferry_verify_report {
  uint32_t size; /* the caller sets sizeof(ramferry_verify_report) */
  uint64_t pages_checked;
  uint64_t pages_mismatched;
  /* The first mismatched page, when there is one. */
  uint32_t first_mismatch_region;
  uint64_t first_mismatch_page;
} ramferry_verify_report;

/* Connects to the destination, agrees on the regions and opens every
 * channel. On success *out is a new sender (free it with
 * ramferry_sender_free); on failure *out is NULL and ramferry_last_error()
 * says why. */
ramferry_status ramferry_sender_connect(const ramferry_options* options,
                                        const ramferry_regions* regions,
                                        ramferry_sender** out);
/* Ends a session that was not finished (as an abort) and frees. */
void ramferry_sender_free(ramferry_sender* sender);
const char* ramferry_sender_last_error(const ramferry_sender* sender);

/* Sends every page marked in `bitmaps` (one word array per region, in the
 * order the regions were added; `count` must be the region count), taking
 * and clearing the caller's bits in place, and returns once the
 * destination applied the whole round. `result` may be NULL. On error the
 * session is over. */
ramferry_status ramferry_sender_send_round(ramferry_sender* sender,
                                           uint64_t* const* bitmaps,
                                           size_t count,
                                           ramferry_round_result* result);
/* send_round in two halves, so rounds overlap: start_round takes the
 * marked pages and queues them without waiting; await_round waits for the
 * oldest started round. */
ramferry_status ramferry_sender_start_round(ramferry_sender* sender,
                                            uint64_t* const* bitmaps,
                                            size_t count);
ramferry_status ramferry_sender_await_round(ramferry_sender* sender,
                                            ramferry_round_result* result);
/* Compares a digest of every page on both ends; this side's memory must
 * not change meanwhile. RAMFERRY_DATA_LOSS when pages differ (the report,
 * which may be NULL, says how many). */
ramferry_status ramferry_sender_verify(ramferry_sender* sender,
                                       ramferry_verify_report* report);
/* Optional, once this side's memory no longer changes: starts hashing it
 * on idle CPU so verify has less left to do. */
ramferry_status ramferry_sender_start_verify(ramferry_sender* sender);
/* Ends the session: the destination confirms; its serve returns OK. On
 * failure, ramferry_sender_commit_outcome says whether the destination
 * committed. */
ramferry_status ramferry_sender_finish(ramferry_sender* sender);
/* Where the destination stands on the session's commit point (FINISH, or
 * post-copy's switch), for the caller to decide on its own copy of the
 * workload (ramferry::CommitOutcome). */
typedef enum ramferry_commit_outcome {
  /* no commit point reached and no failure yet */
  RAMFERRY_COMMIT_PENDING = 0,
  /* the destination confirmed (finish returned OK, or post-copy armed):
   * it owns the memory */
  RAMFERRY_COMMIT_YES = 1,
  /* the destination did not commit and discards what it received: the
   * session failed before the commit point, or the destination refused it
   * (its commit hook, a cancel there, pages no tag vouched for); the
   * source's workload may resume */
  RAMFERRY_COMMIT_NO = 2,
  /* the commit point passed and no answer came: the destination may run
   * the memory; do not resume the source's workload */
  RAMFERRY_COMMIT_UNKNOWN = 3
} ramferry_commit_outcome;
/* *outcome: a ramferry_commit_outcome. Any thread. */
ramferry_status ramferry_sender_commit_outcome(const ramferry_sender* sender,
                                               uint32_t* outcome);
/* Ends the session now, from any thread; pending calls fail with
 * RAMFERRY_CANCELLED and `reason` (may be NULL). */
ramferry_status ramferry_sender_abort(ramferry_sender* sender,
                                      const char* reason);
/* Any thread: caps the bytes per second from now on (0: no cap). */
ramferry_status ramferry_sender_set_max_bandwidth(ramferry_sender* sender,
                                                  uint64_t bytes_per_second);
/* Any thread. */
ramferry_status ramferry_sender_stats(const ramferry_sender* sender,
                                      ramferry_stats* stats);
/* Things the caller should know that did not stop the session (such as
 * the transport "auto" chose): *count of them; ramferry_sender_warning
 * gives the i-th, owned by the sender, valid until it is freed. */
ramferry_status ramferry_sender_channel_counter(const ramferry_sender* sender,
                                                uint32_t channel,
                                                const char* name,
                                                uint64_t* value);
ramferry_status ramferry_sender_warning_count(const ramferry_sender* sender,
                                              size_t* count);
const char* ramferry_sender_warning(const ramferry_sender* sender, size_t i);
/* Calls `fn(progress, user)` once on the calling thread each time a round
 * is confirmed, and, with `interval_ms` > 0, every interval_ms from a
 * thread of the library while a call on the sender blocks (rounds, verify,
 * finish, post-copy); never two calls at once. NULL `fn` turns it off. Set
 * it between calls. */
ramferry_status ramferry_sender_set_progress(ramferry_sender* sender,
                                             ramferry_progress_fn fn,
                                             void* user, uint32_t interval_ms);

/* Post-copy (ramferry_options_set_postcopy on both ends). The switch: the
 * caller's workload is stopped for good; `missing` (one word array per
 * region) marks every page the destination does not hold (never sent, or
 * written since its last send: the bits the last round did not take). Read,
 * not changed. Returns once the destination armed (its workload may
 * resume). */
ramferry_status ramferry_sender_start_postcopy(ramferry_sender* sender,
                                               uint64_t* const* missing,
                                               size_t count);
/* Answers the destination's page requests and pushes the rest; returns
 * once the destination holds every page. Then verify and finish. */
ramferry_status ramferry_sender_complete_postcopy(ramferry_sender* sender);
/* After a post-copy session was cut (complete_postcopy failed): a new
 * sender that picks it up, if the destination still waits. `cut` may be
 * freed afterwards. */
ramferry_status ramferry_sender_resume_postcopy(const ramferry_options* options,
                                                const ramferry_regions* regions,
                                                const ramferry_sender* cut,
                                                ramferry_sender** out);

/* ---- destination ---- */

typedef struct ramferry_receiver ramferry_receiver;

/* Called once, on a library thread, when the destination has armed
 * post-copy: the workload may resume. Keep it short. */
typedef void (*ramferry_armed_fn)(void* user);

/* Binds and listens. On success *out is a new receiver; on failure NULL
 * and ramferry_last_error() says why. The source's regions must match
 * (ids, lengths, page sizes). */
ramferry_status ramferry_receiver_listen(const ramferry_options* options,
                                         const ramferry_regions* regions,
                                         ramferry_receiver** out);
/* Frees; with a serve still running on another thread, abort and join it
 * first. After a failed post-copy, threads of the workload blocked on pages
 * that never came stay blocked, also after the free, until the process
 * ends (the receiver keeps its userfaultfds open on purpose: closed, they
 * would let the kernel hand those threads fresh zero pages). To let them
 * run on, on memory that is no longer the source's, call
 * ramferry_receiver_release_postcopy before freeing; a VMM's error path
 * should stop its vCPUs first either way. */
void ramferry_receiver_free(ramferry_receiver* receiver);
const char* ramferry_receiver_last_error(const ramferry_receiver* receiver);
ramferry_status ramferry_receiver_port(const ramferry_receiver* receiver,
                                       uint16_t* port);
/* Serves one session: OK once the source finished and every page is in
 * place; otherwise the error that ended it. */
ramferry_status ramferry_receiver_serve(ramferry_receiver* receiver);
/* Ends serve from any thread. */
ramferry_status ramferry_receiver_abort(ramferry_receiver* receiver,
                                        const char* reason);
ramferry_status ramferry_receiver_stats(const ramferry_receiver* receiver,
                                        ramferry_stats* stats);
ramferry_status ramferry_receiver_channel_counter(
    const ramferry_receiver* receiver, uint32_t channel, const char* name,
    uint64_t* value);
/* Rounds applied so far, and pages the source verified. Any thread. */
ramferry_status ramferry_receiver_applied_rounds(
    const ramferry_receiver* receiver, uint64_t* rounds);
ramferry_status ramferry_receiver_verified_pages(
    const ramferry_receiver* receiver, uint64_t* pages);
/* As ramferry_sender_set_progress, for serve (round_done is 0: the
 * destination reports on the interval only). Set before serve. */
ramferry_status ramferry_receiver_set_progress(ramferry_receiver* receiver,
                                               ramferry_progress_fn fn,
                                               void* user,
                                               uint32_t interval_ms);
/* Post-copy: set before serve. */
ramferry_status ramferry_receiver_on_armed(ramferry_receiver* receiver,
                                           ramferry_armed_fn fn, void* user);
/* The destination's commit point: `fn(user)` runs once, on a library
 * thread, when the source's FINISH arrived and every page is in place,
 * right before the destination confirms it. Return 0 to commit: the source
 * may then take the migration as done, so do not end the session after
 * it. Nonzero refuses: serve fails with RAMFERRY_CANCELLED and the source
 * learns that the destination did not commit (its finish fails, and
 * ramferry_sender_commit_outcome gives RAMFERRY_COMMIT_NO). With post-copy
 * it runs at the switch instead, before any page is dropped, and a refusal
 * fails the source's start_postcopy the same way. NULL `fn` removes it.
 * Set before serve; keep it short. */
typedef int (*ramferry_commit_fn)(void* user);
ramferry_status ramferry_receiver_on_commit(ramferry_receiver* receiver,
                                            ramferry_commit_fn fn, void* user);
/* Once armed, until serve returns (any thread): *resident is 1 when no page
 * of [first_page, first_page + pages) of region `region_id` is still
 * awaited from the source (1 before the switch; 0 outside the region). */
ramferry_status ramferry_receiver_is_resident(const ramferry_receiver* receiver,
                                              uint32_t region_id,
                                              uint64_t first_page,
                                              uint64_t pages, int* resident);
/* Blocks until the range is resident, `timeout_ms` passed
 * (RAMFERRY_DEADLINE_EXCEEDED) or the session ended. */
ramferry_status ramferry_receiver_wait_resident(ramferry_receiver* receiver,
                                                uint32_t region_id,
                                                uint64_t first_page,
                                                uint64_t pages,
                                                uint64_t timeout_ms);
/* Asks the source for the range's awaited pages now, as a fault would. */
ramferry_status ramferry_receiver_request_pages(ramferry_receiver* receiver,
                                                uint32_t region_id,
                                                uint64_t first_page,
                                                uint64_t pages);
/* After serve failed in post-copy: fills the pages still awaited with
 * zeros so blocked threads run on (only for a workload about to be
 * discarded); *filled (may be NULL) gets how many. */
ramferry_status ramferry_receiver_release_postcopy(ramferry_receiver* receiver,
                                                   uint64_t* filled);

/* ---- memory of another process (ramferry/memory_handoff.h) ---- */

/* Shared mappings of files (memfds, tmpfs or /dev/shm files): `base`
 * maps `length` bytes of `fd` from `fd_offset`, 4 KiB pages. The fds are
 * borrowed: the peer receives duplicates. */
typedef struct ramferry_shared_regions ramferry_shared_regions;
ramferry_shared_regions* ramferry_shared_regions_new(
    void); /* NULL: no memory */
void ramferry_shared_regions_free(ramferry_shared_regions* regions);
ramferry_status ramferry_shared_regions_add(ramferry_shared_regions* regions,
                                            uint32_t id, void* base,
                                            uint64_t length, int fd,
                                            uint64_t fd_offset);

/* The workload's side: offer its memory to a migration process
 * (ramferry-migrate --role=source --attach=SOCKET). */
typedef struct ramferry_export ramferry_export;
typedef enum ramferry_export_event {
  /* Stop every write to the exported memory before returning. */
  RAMFERRY_EXPORT_PAUSE = 1,
  /* The migration failed: writes may go on here. */
  RAMFERRY_EXPORT_RESUME = 2,
  /* The memory lives at the destination now: never write it here again. */
  RAMFERRY_EXPORT_MIGRATED = 3,
  /* The migration process went away while paused: whether a destination
   * runs on is unknown. */
  RAMFERRY_EXPORT_DETACHED_WHILE_PAUSED = 4
} ramferry_export_event;
/* Called on the export's thread. A NULL handler: the migration process
 * pauses the whole process with SIGSTOP instead. The handler may call
 * ramferry_export_free on its own export (at RAMFERRY_EXPORT_MIGRATED,
 * say): the export is then freed on another thread once the handler has
 * returned. */
typedef void (*ramferry_export_fn)(void* user, ramferry_export_event event);

/* Registers the regions for write tracking (userfaultfd async
 * write-protect, Linux 6.7+), binds `socket_path` (mode 0600) and serves
 * migration processes on a thread of its own. The regions must stay
 * mapped until ramferry_export_free, which unregisters them. */
ramferry_status ramferry_export_listen(const char* socket_path,
                                       const ramferry_shared_regions* regions,
                                       ramferry_export_fn fn, void* user,
                                       ramferry_export** out);
/* ramferry_export_listen with `flags`, ORed from these (others are
 * refused):
 * RAMFERRY_EXPORT_ALLOW_HAND_OVER: consent to a local hand-over
 *   (ramferry-migrate --attach --hand-over, ramferry_hand_over_attached):
 *   once the handler paused the workload, the migration process may ask
 *   for the regions' files READ-WRITE and pass them, uncopied, to a
 *   process that runs on with them; the fds must be open read-write, and
 *   a handler is required. Without it the migration process only ever
 *   holds read-only reopenings. */
#define RAMFERRY_EXPORT_ALLOW_HAND_OVER 1u
ramferry_status ramferry_export_listen_with(
    const char* socket_path, const ramferry_shared_regions* regions,
    ramferry_export_fn fn, void* user, uint32_t flags, ramferry_export** out);
void ramferry_export_free(ramferry_export* exp);
const char* ramferry_export_last_error(const ramferry_export* exp);
/* Blocks until migrated (OK), timeout_ms passed (DEADLINE_EXCEEDED) or
 * the export failed. */
ramferry_status ramferry_export_wait_migrated(ramferry_export* exp,
                                              uint64_t timeout_ms);
/* CLOCK_MONOTONIC nanoseconds at which the last pause took effect; 0 if
 * never paused. */
ramferry_status ramferry_export_paused_at_ns(const ramferry_export* exp,
                                             int64_t* ns);

/* The migration process's side (what ramferry-migrate --attach does). */
typedef struct ramferry_attach ramferry_attach;
ramferry_status ramferry_attach_open(const char* socket_path,
                                     uint64_t timeout_ms,
                                     ramferry_attach** out);
void ramferry_attach_free(ramferry_attach* att);
const char* ramferry_attach_last_error(const ramferry_attach* att);
ramferry_status ramferry_attach_region_count(const ramferry_attach* att,
                                             size_t* count);
/* Region i as mapped in THIS process (read-only): pass id, base and length
 * to ramferry_regions_add to send it. */
ramferry_status ramferry_attach_region(const ramferry_attach* att, size_t i,
                                       uint32_t* id, void** base,
                                       uint64_t* length);
/* ORs the pages the workload wrote since the last call into `bitmaps`
 * (one per region, ramferry_bitmap_words(length / 4096) words each, in
 * region order) and re-arms their tracking; *reported (may be NULL) gets
 * how many. */
ramferry_status ramferry_attach_collect(ramferry_attach* att,
                                        uint64_t* const* bitmaps, size_t count,
                                        uint64_t* reported);
ramferry_status ramferry_attach_pause(ramferry_attach* att,
                                      uint64_t timeout_ms);
ramferry_status ramferry_attach_resume(ramferry_attach* att);
ramferry_status ramferry_attach_migrated(ramferry_attach* att);

/* A local migration by hand-over, nothing copied: pauses the workload
 * exported at `attach_socket` (which allowed it:
 * RAMFERRY_EXPORT_ALLOW_HAND_OVER), hands its files read-write to the
 * process waiting in ramferry_adopt_wait at `adopt_socket` (with
 * `verify`: and an XXH3-64 digest of each region taken over the paused
 * memory, which the adopter checks; this adds a read of the whole memory
 * to the downtime), and once the adopter acknowledged, tells the
 * workload MIGRATED. The acknowledgement is the commit point: any failure
 * before it resumes the workload. `timeout_ms` bounds the wait for the
 * workload's offer, for the adopter and for its acknowledgement.
 * RAMFERRY_OK only when migrated; `out` (may be NULL; set its size) is
 * filled either way, and ramferry_last_error() says why it failed. */
typedef enum ramferry_hand_over_outcome {
  RAMFERRY_HAND_OVER_MIGRATED = 0,
  RAMFERRY_HAND_OVER_RESUMED = 1,       /* failed after the pause: resumed */
  RAMFERRY_HAND_OVER_NOT_PAUSED = 2,    /* failed before any pause */
  RAMFERRY_HAND_OVER_RESUME_FAILED = 3, /* failed, and resuming failed */
} ramferry_hand_over_outcome;
typedef struct ramferry_hand_over_report {
  uint32_t size;    /* the caller sets sizeof(ramferry_hand_over_report) */
  uint32_t outcome; /* a ramferry_hand_over_outcome */
  uint32_t regions;
  uint32_t paused_by_signal; /* 1: the handler did not pause in time */
  uint64_t bytes;
  int64_t workload_pid;
  /* CLOCK_MONOTONIC spans; downtime runs from the pause's start to the
   * adopter's acknowledgement (0 where not reached). */
  int64_t pause_ns;
  int64_t grant_ns;     /* asking for and receiving the writable files */
  int64_t verify_ns;    /* digesting the paused memory (verify only) */
  int64_t hand_over_ns; /* offer sent to acknowledgement */
  int64_t downtime_ns;
  int64_t paused_at_ns; /* CLOCK_MONOTONIC when the pause began */
} ramferry_hand_over_report;
ramferry_status ramferry_hand_over_attached(const char* attach_socket,
                                            const char* adopt_socket,
                                            uint64_t timeout_ms, int verify,
                                            ramferry_hand_over_report* out);

/* The destination's side: hand the memory a receiver filled (its fds) to
 * a process waiting in ramferry_adopt_wait at `socket_path`. */
ramferry_status ramferry_hand_over_memory(
    const char* socket_path, const ramferry_shared_regions* regions,
    uint64_t timeout_ms);

/* The new workload's side. */
typedef struct ramferry_adopt ramferry_adopt;
ramferry_status ramferry_adopt_listen(const char* socket_path,
                                      ramferry_adopt** out);
void ramferry_adopt_free(ramferry_adopt* adopt); /* unmaps */
const char* ramferry_adopt_last_error(const ramferry_adopt* adopt);
ramferry_status ramferry_adopt_wait(ramferry_adopt* adopt, uint64_t timeout_ms);
ramferry_status ramferry_adopt_region_count(const ramferry_adopt* adopt,
                                            size_t* count);
/* Region i, mapped read-write here; *fd stays owned by the handle. */
ramferry_status ramferry_adopt_region(const ramferry_adopt* adopt, size_t i,
                                      uint32_t* id, void** base,
                                      uint64_t* length, int* fd);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RAMFERRY_RAMFERRY_H_ */
