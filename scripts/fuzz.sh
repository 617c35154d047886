#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, in build-fuzz/) and runs
# each for SECONDS, then prints per target: executions, coverage, features,
# corpus size and crashes. Exits non-zero if any target crashed, hung, leaked
# or ran out of memory.
#
#   scripts/fuzz.sh [SECONDS]            every target, 60 s each by default
#   FUZZ_TARGETS="hello rdma_control" scripts/fuzz.sh 300   some targets
#   FUZZ_JOBS=2 scripts/fuzz.sh          run two targets at a time
#   FUZZ_FRESH=1 scripts/fuzz.sh         forget what earlier runs found
#   FUZZ_BUILD_ONLY=1 scripts/fuzz.sh    build the targets, run none
#
# Each target fuzzes a scratch corpus in build-fuzz/fuzz/<target>/corpus,
# seeded from tests/fuzz/corpus/<target>/ and tests/fuzz/regressions/
# <target>/ and kept between runs (so runs add up); the repository's corpus
# is never written. Crash inputs land in build-fuzz/fuzz/<target>/artifacts/:
# fix the bug, then copy the input to tests/fuzz/regressions/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
if ! [[ $secs =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [SECONDS]  (a positive number of seconds per target)" >&2
  exit 2
fi
jobs=${FUZZ_JOBS:-1}
dir=build-fuzz
work=$dir/fuzz

for tool in clang clang++; do
  command -v "$tool" >/dev/null || {
    echo "fuzz.sh: $tool not found; run scripts/install-deps.sh" >&2
    exit 1
  }
done
echo "fuzz.sh: building the fuzz targets in $dir/"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DRAMFERRY_FUZZ=ON >/dev/null
cmake --build "$dir" --target ramferry_fuzzers -j "$(nproc)"
if [[ ${FUZZ_BUILD_ONLY:-0} == 1 ]]; then exit 0; fi

mapfile -t all < "$dir/tests/fuzz/targets.txt"
if [[ -n ${FUZZ_TARGETS:-} ]]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
  for t in "${targets[@]}"; do
    [[ " ${all[*]} " == *" $t "* ]] || {
      echo "fuzz.sh: no target '$t'; targets: ${all[*]}" >&2
      exit 2
    }
  done
else
  targets=("${all[@]}")
fi

# Sanitizer reports are failures, with symbolized stacks where possible.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if sym=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer); then
  export ASAN_SYMBOLIZER_PATH=$sym
fi

# Prepares the scratch corpus of $1 and starts its fuzzer in the background.
start() {
  local t=$1 w=$work/$1
  [[ ${FUZZ_FRESH:-0} == 1 ]] && rm -rf "$w"
  mkdir -p "$w/corpus" "$w/artifacts"
  rm -f "$w"/artifacts/*
  # Plain cp of visible files: the repository corpus stays untouched and
  # .gitkeep files stay out.
  cp tests/fuzz/corpus/"$t"/* "$w/corpus/" 2>/dev/null || true
  cp tests/fuzz/regressions/"$t"/* "$w/corpus/" 2>/dev/null || true
  "$dir/tests/fuzz/${t}_fuzzer" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$w/artifacts/" "$w/corpus" >"$w/log" 2>&1 &
  pids[$t]=$!
  began[$t]=$SECONDS
}

# The last libFuzzer status line's "#N ... cov: C ft: F", compacted.
status_of() {
  grep -aE '^#[0-9]+' "$work/$1/log" 2>/dev/null | tail -n 1 |
    sed -E 's/^#([0-9]+)[[:space:]]+[A-Za-z]+[[:space:]]+(cov: [0-9]+ ft: [0-9]+ corp: [0-9]+).*/\1 execs, \2/'
}

declare -A pids began rc
pending=("${targets[@]}")
running=()
last_report=$SECONDS
echo "fuzz.sh: ${#targets[@]} targets, ${secs}s each, $jobs at a time"
while ((${#pending[@]} > 0 || ${#running[@]} > 0)); do
  while ((${#running[@]} < jobs && ${#pending[@]} > 0)); do
    t=${pending[0]}
    pending=("${pending[@]:1}")
    start "$t"
    running+=("$t")
    echo "  start  $t"
  done
  sleep 2
  report=0
  if ((SECONDS - last_report >= 15)); then
    report=1
    last_report=$SECONDS
  fi
  still=()
  for t in "${running[@]}"; do
    if kill -0 "${pids[$t]}" 2>/dev/null; then
      still+=("$t")
      if ((report)); then
        echo "  ...    $t $((SECONDS - began[$t]))/${secs}s: $(status_of "$t")"
      fi
    else
      set +e
      wait "${pids[$t]}"
      rc[$t]=$?
      set -e
      echo "  done   $t (exit ${rc[$t]})"
    fi
  done
  running=("${still[@]}")
done

# Summary.
failed=0
printf '\n%-18s %12s %8s %8s %7s %8s  %s\n' target executions cov ft corpus \
  crashes result
for t in "${targets[@]}"; do
  log=$work/$t/log
  execs=$(grep -a 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  last=$(grep -aE '^#[0-9]+' "$log" | tail -n 1)
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(find "$work/$t/corpus" -type f | wc -l)
  crashes=$(find "$work/$t/artifacts" -type f \
    \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | wc -l)
  result=ok
  if ((rc[$t] != 0 || crashes > 0)); then
    result="FAILED (exit ${rc[$t]}; log $log)"
    failed=1
  fi
  printf '%-18s %12s %8s %8s %7s %8s  %s\n' "$t" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "$corp" "$crashes" "$result"
done
if ((failed)); then
  echo
  echo "fuzz.sh: failures. Inputs are in $work/<target>/artifacts/; reproduce"
  echo "with $dir/tests/fuzz/<target>_fuzzer <input>, fix, and add the input"
  echo "to tests/fuzz/regressions/<target>/."
  exit 1
fi
echo "fuzz.sh: no crashes"
