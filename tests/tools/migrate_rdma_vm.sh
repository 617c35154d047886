#!/bin/sh
# migrate_rdma_vm.sh — runs in the Soft-RoCE VM (busybox sh; ctest entry
# migrate_rdma_uffd_vm): a live migration over rdma with uffd-wp dirty
# tracking while memload rewrites a small dirty set, checked from the tool's
# --json report:
#   - tracking is uffd-wp (the tool exits non-zero when the kernel lacks
#     uffd-wp async or PAGEMAP_SCAN; it never falls back to the bitmap);
#   - transport rdma, authenticated with the demo's own key, at least 3
#     rounds, every page verified;
#   - every round after round 0 sends at most the dirty set plus one huge
#     page of slack, and round 1 sends at least one page (the workload ran
#     and the tracker saw it). Source memory registered with
#     IBV_ACCESS_LOCAL_WRITE breaks this: pinning for write resolves the
#     pages' uffd write protection, so every registered chunk reads as
#     written and round 1 re-sends the whole region.
# Needs ramferry-migrate next to it (ctest-run.sh --stage). Exit 0 pass,
# 1 fail.
set -u
cd "$(dirname "$0")" || exit 1

SIZE_MIB=${SIZE_MIB:-32}
SET_MIB=${SET_MIB:-1}
page=4096
region_pages=$((SIZE_MIB * 1048576 / page))
# A dirty-set page may be reported with its whole 2 MiB huge page.
slack=512

fail() { echo "migrate_rdma_vm: FAIL: $*"; exit 1; }

echo "migrate_rdma_vm: kernel $(uname -r), ${SIZE_MIB} MiB region, ${SET_MIB} MiB dirty set, rdma on ${RXE_IP:?RXE_IP unset}"
# Live rounds 0-2 (a zero downtime limit never converges early), then the
# final round with the workload paused, then the page-by-page check.
./ramferry-migrate --demo --transport=rdma \
  --demo-host="$RXE_IP" --channels=2 --size="${SIZE_MIB}MiB" \
  --dirty-tracking=uffd --dirty-set="${SET_MIB}MiB" --dirty-rate=2000pages \
  --writers=1 --downtime-limit=0s --max-rounds=3 --verify=full --json \
  >/tmp/report.json
rc=$?
cat /tmp/report.json
[ "$rc" -eq 0 ] || fail "ramferry-migrate exited with status $rc (see its error above)"

# The first occurrence of a top-level field (the destination's own report
# is nested later in the line).
field() { grep -o "\"$1\":[^,}]*" /tmp/report.json | head -n 1 | cut -d: -f2- | tr -d '"'; }

authenticated=$(field authenticated)
tracking=$(field dirty_tracking)
transport=$(field transport)
verified=$(field verified)
pages_verified=$(field pages_verified)
set_bytes=$(field dirty_set_bytes)
per_round=$(grep -o '"pages_per_round":\[[0-9,]*\]' /tmp/report.json | head -n 1 | sed 's/.*\[//; s/\]//')

[ "$tracking" = uffd-wp ] || fail "dirty tracking is '$tracking', not uffd-wp"
[ "$transport" = rdma ] || fail "transport is '$transport', not rdma"
[ "$authenticated" = true ] || fail "the demo ran unauthenticated (authenticated=$authenticated)"
[ "$verified" = true ] || fail "destination not verified (verified=$verified)"
[ "$pages_verified" = "$region_pages" ] ||
  fail "$pages_verified pages verified, the region has $region_pages"
if [ -z "$set_bytes" ] || [ -z "$per_round" ]; then
  fail "report lacks dirty_set_bytes or pages_per_round"
fi
set_pages=$((${set_bytes%.*} / page))
bound=$((set_pages + slack))

echo "migrate_rdma_vm: pages per round: $per_round (region $region_pages, dirty set $set_pages, bound for rounds >= 1: $bound)"
k=0
bad=
for n in $(echo "$per_round" | tr ',' ' '); do
  if [ "$k" -eq 0 ]; then
    [ "$n" -eq "$region_pages" ] || bad="$bad round 0 sent $n pages, not the region's $region_pages;"
  elif [ "$n" -gt "$bound" ]; then
    bad="$bad round $k re-sent $n pages (> $bound: the dirty set + $slack);"
  fi
  [ "$k" -eq 1 ] && [ "$n" -lt 1 ] && bad="$bad round 1 sent nothing (the workload's writes were not seen);"
  k=$((k + 1))
done
[ "$k" -ge 3 ] || bad="$bad only $k rounds (want >= 3: round 0, a live round, the final round);"
[ -z "$bad" ] || fail "${bad# }"
echo "migrate_rdma_vm: PASS: $k rounds, every round after 0 within the dirty set, all $region_pages pages verified"
