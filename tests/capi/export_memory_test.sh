#!/bin/sh
# examples/c/export_memory.c end to end: the example exports a memfd and
# writes into it; ramferry-migrate --demo --attach migrates it (pausing
# its writer through the handler for the final round). The report must say
# migrated and verified, and the example must exit 0 once told MIGRATED,
# having stored meanwhile. Exit 77 (skipped) where the kernel has no
# async uffd-wp (Linux 6.7+), which the export needs.
# Usage: export_memory_test.sh EXPORT_MEMORY RAMFERRY_MIGRATE
set -eu
example=$1
migrate=$2
tmp=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$example" --help | grep -q -- '--socket=PATH' || fail "export_memory --help"
"$example" --socket="$tmp/export.sock" --size-mib=16 --timeout-s=60 \
  > "$tmp/out" 2> "$tmp/err" &
pid=$!
i=0
until grep -q listening "$tmp/err"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    pid=
    if grep -q userfaultfd "$tmp/err"; then
      echo "SKIP: no write tracking here: $(cat "$tmp/err")"
      exit 77
    fi
    cat "$tmp/err"
    fail "export_memory exited before it listened"
  fi
  i=$((i + 1))
  [ "$i" -lt 300 ] || fail "export_memory did not listen within 30 s"
  sleep 0.1
done

"$migrate" --demo --json --attach="$tmp/export.sock" \
  > "$tmp/report" 2> "$tmp/migrate.err" ||
  { cat "$tmp/report" "$tmp/migrate.err"; fail "ramferry-migrate --attach"; }
report=$(tail -n 1 "$tmp/report")
echo "$report" | grep -q '"outcome": *"migrated"' || fail "not migrated: $report"
echo "$report" | grep -q '"verified": *true' || fail "not verified: $report"

wait "$pid" || { pid=; cat "$tmp/err"; fail "export_memory exited non-zero"; }
pid=
stores=$(sed -n 's/^export_memory: migrated after \([0-9]*\) stores$/\1/p' \
  "$tmp/out")
[ -n "$stores" ] && [ "$stores" -gt 0 ] ||
  fail "export_memory did not say it migrated after storing: $(cat "$tmp/out")"
echo "PASS: migrated and verified; the example stored $stores times"
