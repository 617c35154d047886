#!/bin/sh
# Runs inside the Soft-RoCE VM (busybox sh): two ramferry-bench binaries,
# bench-before and bench-after (e.g. built before and after a change),
# back to back in alternating order on rdma, REPEATS times at each channel
# count, so their ratios come from one VM and one host load. Prints one
# JSON line per run (ramferry-bench's, with "variant" and "repeat" added)
# and progress lines starting with "ab:" on stderr.
#   mkdir d && cp OLD/ramferry-bench d/bench-before &&
#   cp NEW/ramferry-bench d/bench-after && cp bench/rdma_vm/ab.sh d/ &&
#   tests/rdma_vm/run.sh d -- ./ab.sh
# Environment: REPEATS (6), SIZE_MIB (64), CHANNELS ("1 4").
set -u
cd "$(dirname "$0")" || exit 1
REPEATS=${REPEATS:-6}
SIZE_MIB=${SIZE_MIB:-64}
CHANNELS=${CHANNELS:-1 4}
: "${RXE_IP:?RXE_IP unset: run this in the VM}"
failures=0
rep=1
while [ "$rep" -le "$REPEATS" ]; do
  for ch in $CHANNELS; do
    # Alternate which goes first, so neither always runs on a warmer VM.
    order="before after"
    [ $((rep % 2)) -eq 0 ] && order="after before"
    for v in $order; do
      echo "ab: repeat $rep/$REPEATS, $ch channel(s): $v" >&2
      if out=$(./bench-$v --transport=rdma --host="$RXE_IP" \
        --size="${SIZE_MIB}MiB" --channels="$ch" --json 2>/tmp/ab.err); then
        echo "$out" | sed "s/^{/{\"variant\":\"$v\",\"repeat\":$rep,/"
      else
        failures=$((failures + 1))
        echo "ab: FAILED: bench-$v: $(tail -n 3 /tmp/ab.err)" >&2
      fi
    done
  done
  rep=$((rep + 1))
done
[ "$failures" -eq 0 ]
