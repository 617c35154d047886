#!/usr/bin/env bash
# ctest-run.sh [--kernel=PKG] [--stage=FILE]... BINARY [ARG...] — what an
# rdma-vm ctest entry runs.
#
# Checks that this host can run the Soft-RoCE VM at all, prepares the cache,
# then runs BINARY ARG... inside the VM via run.sh and returns its status.
# BINARY may be a script; each --stage FILE is copied next to it (e.g. the
# program a driver script runs). --kernel boots that kernel package (or
# metapackage, e.g. linux-image-6.12-amd64) instead of the default, from
# its own cache beside the default one ($RAMFERRY_RXE_CACHE-6.12-amd64), so
# tests on different kernels do not rebuild each other's cache.
# When the VM cannot be had here — no qemu-system-x86_64, no TCG in it, the
# Debian archive unreachable for prepare, or a host tool missing — it prints
# the reason and exits 77, which the test registers as SKIP_RETURN_CODE: the
# test shows up as skipped with that reason, never as passed.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# ctest shows a skipped test's output only with -V (or in
# Testing/Temporary/LastTest.log), so the reason also goes to the terminal
# when there is one.
skip() {
  echo "SKIP rdma-vm test: $*"
  { echo "SKIP rdma-vm test $(basename "$binary"): $*" >/dev/tty; } 2>/dev/null
  exit 77
}

staged=()
while [[ ${1:-} == --* ]]; do
  case $1 in
    --stage=*) staged+=("${1#--stage=}") ;;
    --kernel=*)
      export RAMFERRY_RXE_KERNEL_PKG=${1#--kernel=}
      export RAMFERRY_RXE_CACHE=${RAMFERRY_RXE_CACHE:-${HOME:-/tmp}/.cache/ramferry-rxe}-${RAMFERRY_RXE_KERNEL_PKG#linux-image-}
      ;;
    *) echo "ctest-run: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
binary=${1:-}
[[ -n $binary ]] || { echo "usage: $0 [--kernel=PKG] [--stage=FILE]... BINARY [ARG...]" >&2; exit 2; }
shift
for f in "$binary" "${staged[@]}"; do
  [[ -x $f ]] || { echo "ctest-run: $f is not an executable" >&2; exit 1; }
done

command -v qemu-system-x86_64 >/dev/null ||
  skip "qemu-system-x86_64 is not installed (scripts/install-deps.sh installs qemu-system-x86)"

# TCG is qemu's software CPU: no /dev/kvm needed. Starting an empty machine
# and quitting it through the monitor proves this qemu has it.
if ! probe=$(printf 'quit\n' | timeout 60 qemu-system-x86_64 -accel tcg -machine none \
  -nodefaults -no-user-config -display none -monitor stdio 2>&1); then
  skip "qemu-system-x86_64 cannot run TCG here: $(printf '%s' "$probe" | grep -v '^QEMU\|^(qemu)' | tail -n 2 | tr '\n' ' ')"
fi

bash "$here/prepare.sh"
case $? in
  0) ;;
  69) skip "a host tool needed to build the VM image is missing (see the prepare output above)" ;;
  75) skip "the Debian package archive is unreachable, so the VM kernel and rdma-core cannot be fetched (see above)" ;;
  *) echo "ctest-run: prepare.sh failed" >&2; exit 1 ;;
esac

stage=$(mktemp -d "${TMPDIR:-/tmp}/ramferry-rxe-stage.XXXXXX") || exit 1
trap 'rm -rf "$stage"' EXIT
cp "$binary" "${staged[@]}" "$stage/" || exit 1
bash "$here/run.sh" "$stage" -- "./$(basename "$binary")" "$@"
