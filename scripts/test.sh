#!/usr/bin/env bash
# Builds ramferry and runs the whole test suite (the README's test command).
#   scripts/test.sh                    release build in build/
#   SANITIZE=address scripts/test.sh   ASan+UBSan build in build-address/
#   SANITIZE=thread  scripts/test.sh   TSan build in build-thread/
#   CTEST_ARGS="-L unit" scripts/test.sh   what ctest is given besides -j
#   BUILD_ONLY=1 scripts/test.sh       configure and build, run nothing
# Prints how long configuring, building and testing took, and the ten
# slowest tests; the ctest output is kept in <build dir>/ctest.log.
set -euo pipefail
cd "$(dirname "$0")/.."
san=${SANITIZE:-}
dir=build${san:+-$san}

t0=$SECONDS
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRAMFERRY_SANITIZE="$san" >/dev/null
t1=$SECONDS
cmake --build "$dir" -j "$(nproc)"
t2=$SECONDS
if [[ ${BUILD_ONLY:-0} == 1 ]]; then
  echo "test.sh ($dir): configure $((t1 - t0)) s, build $((t2 - t1)) s"
  exit 0
fi
# shellcheck disable=SC2086  # CTEST_ARGS is a list of arguments
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-} |
  tee "$dir/ctest.log" && rc=0 || rc=$?
t3=$SECONDS

echo
echo "test.sh ($dir): configure $((t1 - t0)) s, build $((t2 - t1)) s," \
  "tests $((t3 - t2)) s"
echo "the ten slowest tests (s):"
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' \
  "$dir/ctest.log" | sort -rn | awk 'NR <= 10 { print "  " $0 }'
exit "$rc"
