#!/bin/sh
# Runs inside the Soft-RoCE VM (tests/rdma_vm/run.sh): the RDMA figures of
# the producer/consumer split, batched chunk registration and pin-all vs
# on-demand registration, measured
# side by side, interleaved, REPEATS times each. Prints JSON lines.
#   bash tests/rdma_vm/run.sh DIR -- sh ./measure.sh   (DIR holds ramferry-bench)
set -u
REPEATS=${REPEATS:-3}
SIZE=${SIZE:-64MiB}
bench() { ./ramferry-bench --transport=rdma --host="$RXE_IP" --size="$SIZE" --json "$@"; }
i=0
while [ "$i" -lt "$REPEATS" ]; do
  # Producer/consumer (channel thread) vs single-thread, on one channel:
  # the seed's comparison, with registration on demand.
  bench --channels=1
  bench --channels=1 --single-thread
  # A fresh region's chunks: batched vs one-chunk registration requests.
  bench --channels=1 --rdma-reg-batch=true
  bench --channels=1 --rdma-reg-batch=false
  # Registration up front (pin-all, in setup) vs on demand (in the data
  # path): where the registration time goes.
  bench --channels=1 --rdma-pin-all
  i=$((i + 1))
done
