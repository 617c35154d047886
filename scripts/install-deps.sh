#!/usr/bin/env bash
# Installs every Debian 12 package that building and testing ramferry needs.
# Idempotent: packages already present are left alone; safe to run repeatedly.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  libabsl-dev libboost-dev liburing-dev libibverbs-dev librdmacm-dev
  libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev libssl-dev
  libzstd-dev
  nlohmann-json3-dev util-linux
  clang clang-format clang-tidy
  # scripts/lint.sh: mypy --strict over the Python package.
  mypy
  # scripts/fuzz.sh: libFuzzer and the sanitizer runtimes (only recommended
  # by clang, so --no-install-recommends would skip them), and the
  # symbolizer for readable crash stacks.
  libclang-rt-14-dev llvm-14
  iproute2 procps gnuplot-nox
  # The build compiles through ccache (CMakeLists.txt); scripts/lint.sh's
  # clang-tidy cache is a Python script.
  ccache python3
  # The Python package's tests (tests/python): pytest, numpy for the numpy
  # example, pip for the install check.
  python3-pytest python3-numpy python3-pip
  # tests/protocol's decoder checks and decrypts sealed captures with AES.
  python3-cryptography
  # tests/man renders the man pages as man(1) does.
  man-db groff-base
  qemu-system-x86 cpio xz-utils zstd
)
want=("${PKGS[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#want[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) != 0 ]]; then SUDO=sudo; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
