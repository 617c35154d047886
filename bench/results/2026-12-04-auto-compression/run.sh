#!/bin/bash
# old vs new --compress=auto, interleaved
for link in 1gbit 100mbit; do
  size=256MiB; [ $link = 100mbit ] && size=64MiB
  for i in 1 2 3; do
    for b in old new; do
      bin=/work/main/build/tools/migrate/ramferry-migrate; [ $b = old ] && bin=/tmp/old/build/tools/migrate/ramferry-migrate
      for mode in auto off; do
      $bin --demo --json --size=$size --image=text=80,random=20 --dirty-rate=0 --compress=$mode --demo-link=$link 2>/dev/null | python3 -c "
import json,sys; j=json.load(sys.stdin); print('$link $b $mode', round(j['total_s'],3), sum(c['compressed_packets'] for c in j['channel_stats']), sum(c['packets'] for c in j['channel_stats']))"
      done
    done
  done
done
