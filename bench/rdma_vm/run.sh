#!/usr/bin/env bash
# bench/rdma_vm/run.sh [--out DIR] [--build DIR] [--repeats N] [--size-mib N]
#
# The rdma figures in one command: builds ramferry-bench (in BUILD, default
# build/), stages it with measure.sh, boots the Soft-RoCE VM
# (tests/rdma_vm/run.sh) and runs measure.sh there: producer/consumer vs
# single-thread, batched vs one-chunk REGISTER requests, pin-all vs on-demand
# registration, and rdma-core's ib_write_bw on the same rxe0 as the ceiling,
# interleaved, REPEATS times. Writes to OUT (default
# bench/results/DATE-rdma-vm):
#   console.log    the VM's console (progress, every JSON line, errors)
#   results.jsonl  one JSON object per run
#   summary.md     median (min-max) per run kind, ratios to ib_write_bw
#                  measured in the same VM (bench/rdma_vm/summarize.py)
# Progress streams to the terminal. Exit status: 0 all runs succeeded;
# run.sh's status otherwise (77 never: a VM that cannot boot is an error
# here, 125).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=
build=$repo/build
repeats=5
size_mib=64
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    --build) build=$2; shift 2 ;;
    --build=*) build=${1#--build=}; shift ;;
    --repeats) repeats=$2; shift 2 ;;
    --repeats=*) repeats=${1#--repeats=}; shift ;;
    --size-mib) size_mib=$2; shift 2 ;;
    --size-mib=*) size_mib=${1#--size-mib=}; shift ;;
    -h | --help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bench/rdma_vm/run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $repeats =~ ^[1-9][0-9]*$ && $size_mib =~ ^[1-9][0-9]*$ ]] ||
  { echo "bench/rdma_vm/run.sh: --repeats and --size-mib must be positive integers" >&2; exit 2; }
out=${out:-$repo/bench/results/$(date +%F)-rdma-vm}
mkdir -p "$out"
out=$(cd "$out" && pwd)

echo "[rdma-bench] building ramferry-bench in $build" >&2
[[ -f $build/build.ninja || -f $build/Makefile ]] ||
  { echo "[rdma-bench] $build is not a configured build dir (cmake -S . -B build -G Ninja)" >&2; exit 2; }
cmake --build "$build" --target ramferry-bench >&2

stage=$(mktemp -d "${TMPDIR:-/tmp}/ramferry-rdma-bench.XXXXXX")
trap 'rm -rf "$stage"' EXIT
cp "$build/bench/ramferry-bench" "$here/measure.sh" "$stage/"

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null | head -c 1)
echo "[rdma-bench] ${size_mib} MiB x ${repeats} repeats at $commit${dirty:+ (uncommitted changes)}; results to $out" >&2
t0=$SECONDS
set +e
bash "$repo/tests/rdma_vm/run.sh" "$stage" -- env REPEATS="$repeats" SIZE_MIB="$size_mib" ./measure.sh |
  tee "$out/console.log"
rc=${PIPESTATUS[0]}
set -e
grep -a '^{"label"' "$out/console.log" >"$out/results.jsonl" || true
echo "[rdma-bench] VM run: exit $rc in $((SECONDS - t0)) s, $(wc -l <"$out/results.jsonl") results" >&2

python3 "$here/summarize.py" "$out/results.jsonl" \
  --command "bench/rdma_vm/run.sh --repeats $repeats --size-mib $size_mib --out ${out#"$repo"/}" \
  --commit "$commit${dirty:+ + uncommitted changes}" \
  --kernel "$(sed -n 's/^measure: kernel \([^,]*\),.*/\1/p' "$out/console.log" | head -n 1)" \
  --host-cpus "$(nproc)" >"$out/summary.md"
cat "$out/summary.md"
exit "$rc"
