#!/bin/sh
# The install rules, used as a user uses them: `cmake --install` into a
# temporary prefix, the installed tree checked, then examples/c/
# migrate_self.c built against the INSTALLED package three ways and run
# (a live migration of its own memory, verified):
#   1. pkg-config --cflags --libs ramferry, plain cc (the shared library)
#   2. pkg-config --static: the static libraries and what Libs.private and
#      Requires.private list
#   3. a CMake project with find_package(ramferry) (examples/c/CMakeLists.txt)
# and a C++ program using the C++ API through the same package
# (tests/install/cxx_consumer); bench/attach/workload.c is built with
# pkg-config too and migrated by the installed ramferry-migrate --attach
# into a second copy of itself.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR LIBDIR CC [SIZE_MIB]
# SANITIZE_FLAGS (environment): what a sanitizer build's library needs its
# programs compiled and linked with.
set -eu
build=$1
src=$2
libdir=$3
cc=$4
san=${SANITIZE_FLAGS:-}
size=${5:-64}
cmake=${CMAKE:-cmake}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

fail() { echo "FAIL: $*"; exit 1; }

"$cmake" --install "$build" --prefix "$prefix" > "$tmp/install.log" ||
  { cat "$tmp/install.log"; fail "cmake --install"; }

for f in include/ramferry/ramferry.h include/ramferry/sender.h \
         include/ramferry/receiver.h include/ramferry/dirty_bitmap.h \
         "$libdir/libramferry.so" "$libdir/libramferry.so.0" \
         "$libdir/libramferry.a" "$libdir/libramferry_channels.a" \
         "$libdir/libramferry_proto.a" "$libdir/pkgconfig/ramferry.pc" \
         "$libdir/cmake/ramferry/ramferryConfig.cmake" \
         "$libdir/cmake/ramferry/ramferryConfigVersion.cmake" \
         bin/ramferry-migrate bin/ramferry-bench \
         share/man/man1/ramferry-migrate.1 share/man/man1/ramferry-bench.1 \
         share/man/man3/ramferry.3 \
         "$libdir/python3/dist-packages/ramferry/__init__.py"; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
[ "$(readlink "$prefix/$libdir/libramferry.so")" = libramferry.so.0 ] ||
  fail "libramferry.so does not point at the soname"
"$prefix/bin/ramferry-migrate" --version > /dev/null 2>&1 ||
  fail "the installed ramferry-migrate does not run"
echo "installed: $(cd "$prefix" && find . -type f | sort | tr '\n' ' ')"

# The Python package finds the installed library from where it lies (not
# in a sanitizer build: python cannot load an instrumented library
# without its runtime preloaded).
if [ -z "$san" ] && command -v python3 > /dev/null; then
  [ "$(PYTHONPATH="$prefix/$libdir/python3/dist-packages" python3 -c \
      'import ramferry; print(ramferry.version())')" = \
    "$(sed -n 's/^#define RAMFERRY_VERSION "\(.*\)"$/\1/p' \
         "$prefix/include/ramferry/ramferry.h")" ] ||
    fail "python3 -c 'import ramferry' after install"
  echo "== python: import ramferry from the prefix"
fi

# The example must build from the installed headers alone.
mkdir "$tmp/example"
cp "$src/examples/c/migrate_self.c" "$src/examples/c/export_memory.c" \
  "$src/examples/c/CMakeLists.txt" "$tmp/example/"
cd "$tmp"

export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
[ "$(pkg-config --modversion ramferry)" = \
  "$(sed -n 's/^#define RAMFERRY_VERSION "\(.*\)"$/\1/p' \
       "$prefix/include/ramferry/ramferry.h")" ] ||
  fail "ramferry.pc's version is not the header's"
pc_libdir=$(pkg-config --variable=libdir ramferry)
[ "$(cd "$pc_libdir" && pwd -P)" = "$(cd "$prefix/$libdir" && pwd -P)" ] ||
  fail "ramferry.pc's libdir $pc_libdir is not the installed one"

echo "== pkg-config (shared)"
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -pedantic -Werror $san example/migrate_self.c \
  $(pkg-config --cflags --libs ramferry) -pthread \
  -Wl,-rpath,"$pc_libdir" -o migrate_self_pc || fail "pkg-config build"
ldd ./migrate_self_pc | grep -q "libramferry.so.0 => $prefix" ||
  fail "migrate_self_pc does not load the installed libramferry.so.0"
./migrate_self_pc --size-mib="$size" || fail "migrate_self (pkg-config)"

echo "== pkg-config: an attached workload, migrated by the installed tool"
# bench/attach/workload.c exports its memfd; the installed
# ramferry-migrate attaches to it and hands the memory to a second copy
# that adopts it; both report a digest of the memory, which must match.
cp "$src/bench/attach/workload.c" example/attached_workload.c
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -pedantic -Werror $san \
  example/attached_workload.c $(pkg-config --cflags --libs ramferry) \
  -pthread -Wl,-rpath,"$pc_libdir" -o attached_workload ||
  fail "pkg-config build of attached_workload"
./attached_workload --export="$tmp/w.sock" --size-mib=16 --regions=2 \
  --baseline-seconds=0.1 --ready-file="$tmp/w.ready" > w.json 2> w.log &
wpid=$!
./attached_workload --adopt="$tmp/a.sock" --seconds=0 \
  --ready-file="$tmp/a.ready" > a.json 2> a.log &
apid=$!
i=0
while [ ! -e "$tmp/w.ready" ] || [ ! -e "$tmp/a.ready" ]; do
  i=$((i + 1))
  [ "$i" -lt 300 ] || { kill "$wpid" "$apid"; fail "the workloads did not start"; }
  sleep 0.1
done
"$prefix/bin/ramferry-migrate" --demo --attach="$tmp/w.sock" \
  --export="$tmp/a.sock" > migrate.log 2>&1 ||
  { cat migrate.log w.log a.log; kill "$wpid" "$apid"; fail "ramferry-migrate --attach"; }
wait "$wpid" || { cat w.log; fail "the exporting workload"; }
wait "$apid" || { cat a.log; fail "the adopting workload"; }
wd=$(sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p' w.json)
ad=$(sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p' a.json)
[ -n "$wd" ] && [ "$wd" = "$ad" ] ||
  fail "the adopted memory ($ad) is not the workload's ($wd)"

echo "== pkg-config --static"
static_libs=$(pkg-config --static --libs ramferry |
  sed -e 's/-lramferry_channels//' -e 's/-lramferry_proto//' \
      -e 's/-lramferry\b/-l:libramferry.a -l:libramferry_channels.a -l:libramferry_proto.a/')
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -pedantic -Werror $san example/migrate_self.c \
  $(pkg-config --static --cflags ramferry) $static_libs \
  -o migrate_self_static || fail "pkg-config --static build"
if ldd ./migrate_self_static | grep -q libramferry; then
  fail "migrate_self_static loads libramferry.so"
fi
./migrate_self_static --size-mib="$size" --fork || fail "migrate_self (static)"

echo "== find_package(ramferry)"
"$cmake" -S example -B cmake-build -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="$san" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" > cmake.log 2>&1 ||
  { cat cmake.log; fail "configuring the find_package project"; }
"$cmake" --build cmake-build > build.log 2>&1 ||
  { cat build.log; fail "building the find_package project"; }
ldd cmake-build/migrate_self | grep -q "libramferry.so.0 => $prefix" ||
  fail "the find_package build does not load the installed libramferry.so.0"
./cmake-build/migrate_self --size-mib="$size" || fail "migrate_self (CMake)"
echo "== find_package(ramferry), C++"
cp -r "$src/tests/install/cxx_consumer" cxx
"$cmake" -S cxx -B cxx-build -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" > cxx.log 2>&1 ||
  { cat cxx.log; fail "configuring the C++ find_package project"; }
"$cmake" --build cxx-build > cxx-build.log 2>&1 ||
  { cat cxx-build.log; fail "building the C++ find_package project"; }
ldd cxx-build/cxx_consumer | grep -q "libramferry.so.0 => $prefix" ||
  fail "the C++ program does not load the installed libramferry.so.0"
./cxx-build/cxx_consumer || fail "cxx_consumer"
echo "install test: OK"
