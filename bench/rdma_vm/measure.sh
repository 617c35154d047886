#!/bin/sh
# Runs inside the Soft-RoCE VM (busybox sh; bench/rdma_vm/run.sh boots it):
# the RDMA figures of the producer/consumer split, batched chunk
# registration and pin-all vs on-demand registration, and rdma-core's own
# ib_write_bw on the same rxe0 as the ceiling; interleaved, REPEATS times
# each. Prints one JSON line per run, each with "label" and "repeat" added
# (ramferry-bench's own object; for ib_write_bw the parsed result line), and
# progress lines starting with "measure:". The kinds run in a rotated order
# within each repeat.
#   bash tests/rdma_vm/run.sh DIR -- ./measure.sh   (DIR holds ramferry-bench
#   and this script)
# Environment: REPEATS (5), SIZE_MIB (64), CHANNELS (1).
set -u
cd "$(dirname "$0")" || exit 1
REPEATS=${REPEATS:-5}
SIZE_MIB=${SIZE_MIB:-64}
CHANNELS=${CHANNELS:-1}
: "${RXE_IP:?RXE_IP unset: run this in the VM}"
failures=0
ports=0

# The guest's clock in centiseconds, for wall times (no date +%N in busybox).
now_cs() { read -r up _ </proc/uptime && echo "${up%.*}${up#*.}"; }
progress() { echo "measure: $*" >&2; }

# label repeat FLAG...: one ramferry-bench run, its JSON line labelled.
bench() {
  label=$1 rep=$2
  shift 2
  progress "repeat $rep/$REPEATS: $label"
  if out=$(./ramferry-bench --transport=rdma --host="$RXE_IP" --size="${SIZE_MIB}MiB" \
    --channels="$CHANNELS" --json "$@" 2>/tmp/bench.err); then
    echo "$out" | sed "s/^{/{\"label\":\"$label\",\"repeat\":$rep,\"flags\":\"$*\",/"
  else
    failures=$((failures + 1))
    progress "FAILED: ramferry-bench $*: $(tail -n 3 /tmp/bench.err)"
  fi
}

# repeat MSG_BYTES: ib_write_bw, server and client on rxe0 (RoCEv2 GID index
# 1, the IPv4 one), SIZE_MIB in MSG_BYTES messages. perftest's MB/sec is
# MiB/s (format_factor 0x100000).
ceiling() {
  rep=$1 msg=$2
  iters=$((SIZE_MIB * 1048576 / msg))
  label=ib_write_bw_$((msg / 1024))k
  progress "repeat $rep/$REPEATS: $label"
  port=$((18515 + ports))
  ports=$((ports + 1)) # a fresh port each run: no wait for the last one's
  ib_write_bw -d rxe0 -x 1 -F -p "$port" -s "$msg" -n "$iters" >/tmp/ibw-server.log 2>&1 &
  server=$!
  t0=$(now_cs)
  tries=0
  until ib_write_bw -d rxe0 -x 1 -F -p "$port" -s "$msg" -n "$iters" "$RXE_IP" >/tmp/ibw-client.log 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 10 ]; then
      failures=$((failures + 1))
      progress "FAILED: ib_write_bw client: $(tail -n 3 /tmp/ibw-client.log)"
      kill "$server" 2>/dev/null
      wait "$server" 2>/dev/null
      return
    fi
    sleep 0.3
    t0=$(now_cs)
  done
  t1=$(now_cs)
  wait "$server"
  # The result line: #bytes #iterations BW-peak BW-average MsgRate.
  awk -v label="$label" -v rep="$rep" -v wall="$((t1 - t0))" '
    $1 ~ /^[0-9]+$/ && NF == 5 {
      printf "{\"label\":\"%s\",\"repeat\":%d,\"tool\":\"ib_write_bw\",\"msg_bytes\":%d,\"iters\":%d,\"bytes\":%d,\"bw_peak_mib_s\":%s,\"bw_avg_mib_s\":%s,\"gb_per_s\":%.6f,\"client_wall_s\":%.2f}\n",
        label, rep, $1, $2, $1 * $2, $3, $4, $4 * 1048576 / 1e9, wall / 100
      found = 1
    }
    END { if (!found) exit 1 }' /tmp/ibw-client.log || {
    failures=$((failures + 1))
    progress "FAILED: no result line from ib_write_bw: $(tail -n 3 /tmp/ibw-client.log)"
  }
}

progress "kernel $(uname -r), rxe0 on $RXE_IP, ${SIZE_MIB} MiB, $CHANNELS channel(s), $REPEATS repeats"
# run K REPEAT: the K-th kind of run (0-5).
run() {
  case $1 in
    # The ceiling: the engine's packet size (128 pages) and 64 KiB messages.
    0) ceiling "$2" 524288 ;;
    1) ceiling "$2" 65536 ;;
    # Producer/consumer (channel thread), chunks registered on demand in
    # batches: the default, and the reference of the next three.
    2) bench producer-consumer "$2" ;;
    # Single-thread: the scheduler drives the channel itself.
    3) bench single-thread "$2" --single-thread ;;
    # One chunk per REGISTER request instead of batches.
    4) bench unbatched "$2" --rdma-reg-batch=false ;;
    # Registration up front (pin-all, in set-up) instead of on demand.
    5) bench pin-all "$2" --rdma-pin-all ;;
  esac
}
kinds=6
i=1
while [ "$i" -le "$REPEATS" ]; do
  # Every kind once per repeat, each repeat starting one kind later, so no
  # kind always runs first, right after the boot.
  j=0
  while [ "$j" -lt "$kinds" ]; do
    run $(((i - 1 + j) % kinds)) "$i"
    j=$((j + 1))
  done
  i=$((i + 1))
done
progress "done, $failures failed run(s)"
[ "$failures" -eq 0 ]
