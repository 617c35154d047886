#!/usr/bin/env bash
# Builds ramferry and runs the whole test suite (the README's test command).
#   scripts/test.sh            release build in build/
#   SANITIZE=address scripts/test.sh   ASan+UBSan build in build-address/
#   SANITIZE=thread  scripts/test.sh   TSan build in build-thread/
set -euo pipefail
cd "$(dirname "$0")/.."
san=${SANITIZE:-}
dir=build${san:+-$san}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRAMFERRY_SANITIZE="$san" >/dev/null
cmake --build "$dir" -j "$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-}
