#!/bin/sh
# libramferry.so exports the C API and the public C++ API and nothing else:
# every function ramferry.h declares is exported, every exported C symbol
# is declared there, and no internal namespace (engine, channels, proto)
# or linked-in library (Abseil, asio, libstdc++) leaks out.
# Usage: exports_test.sh LIBRAMFERRY_SO RAMFERRY_H
set -eu
so=$1
header=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

objdump -p "$so" | grep -q 'SONAME *libramferry\.so\.0$' ||
  { echo "FAIL: soname is not libramferry.so.0"; objdump -p "$so" | grep SONAME; exit 1; }

nm -D --defined-only "$so" | awk '{print $3}' | sed 's/@.*//' |
  grep -v '^RAMFERRY_0$' | sort -u > "$tmp/exported"
grep -E '^ramferry_' "$tmp/exported" > "$tmp/c_exported" || true
grep -oE '\bramferry_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u > "$tmp/declared"

status=0
if ! diff -u "$tmp/declared" "$tmp/c_exported" > "$tmp/diff"; then
  echo "FAIL: ramferry.h's functions and the exported C symbols differ:"
  cat "$tmp/diff"
  status=1
fi
nm -D --defined-only -C "$so" | cut -d' ' -f3- | sed 's/@.*//' |
  grep -vE '^(ramferry_[a-z0-9_]+|RAMFERRY_0)$' > "$tmp/cxx" || true
if grep -vE '^ramferry::' "$tmp/cxx" > "$tmp/foreign"; then
  echo "FAIL: exported symbols outside the ramferry API:"
  head -20 "$tmp/foreign"
  status=1
fi
if grep -E '^ramferry::(engine|channels|proto)::' "$tmp/cxx" > "$tmp/internal"; then
  echo "FAIL: internal symbols exported:"
  head -20 "$tmp/internal"
  status=1
fi
for needed in 'ramferry::Sender::Connect' 'ramferry::Receiver::Listen' \
              'ramferry::DirtyBitmap::View' 'ramferry::ReadAuthKeyFile'; do
  grep -q "^$needed(" "$tmp/cxx" ||
    { echo "FAIL: $needed is not exported"; status=1; }
done
[ $status -eq 0 ] && echo "exports: $(wc -l < "$tmp/c_exported") C functions, $(wc -l < "$tmp/cxx") C++ symbols, nothing else"
exit $status
