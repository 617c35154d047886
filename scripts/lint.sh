#!/usr/bin/env bash
# The habits CI keeps, in one place:
#   - every C++ file formatted as .clang-format says;
#   - each room includes only the rooms below it (base <- proto <- channels
#     <- engine <- handoff, capi, tools, bench; the public headers in
#     include/ramferry);
#   - clang-tidy, with the repo's .clang-tidy, clean over the library, the
#     tools and the benchmarks (warnings are errors here);
#   - every commit since f70821d with a subject of at most 72 characters
#     (`room: what`) and, where it has a body, a blank line before it;
#   - the Python package (python/ramferry) clean under mypy --strict
#     (skipped, and said so, where mypy is not installed).
#   scripts/lint.sh                 all five (clang-tidy configures its
#                                   own build-lint/; files found clean
#                                   before with the same inputs are not
#                                   checked again: scripts/clang_tidy_cached.py)
#   LINT_TIDY=0 scripts/lint.sh     skips clang-tidy (seconds instead of
#                                   minutes)
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
step() { printf '\n--- lint: %s\n' "$1"; }

step "clang-format"
if git ls-files -z '*.cc' '*.h' | xargs -0 clang-format --dry-run -Werror; then
  echo "every file formatted"
else
  echo "run: git ls-files '*.cc' '*.h' | xargs clang-format -i"
  status=1
fi

step "layering"
layering=0
# room:allowed include prefixes (besides absl/, gtest/, system headers).
# Each names whole rooms, never a single file of another room. "room/."
# is that room's own files, not its sub-rooms: a sub-room may use the
# room it is part of (post-copy, the session's control channel and
# failures), while the room sees only the sub-room's seams (below).
rules=(
  "base/:base/"
  "proto/:base/ proto/"
  "proto/crypto/:base/ proto/crypto/"
  "channels/:base/ proto/ channels/ ramferry/"
  "engine/:base/ proto/ channels/ engine/ ramferry/"
  "engine/compress/:base/ ramferry/ engine/compress/"
  "engine/delta/:base/ proto/ ramferry/ engine/delta/ engine/pages/"
  "engine/pages/:base/ ramferry/ engine/pages/"
  "engine/postcopy/:base/ proto/ ramferry/ engine/postcopy/ engine/pages/ engine/."
  "engine/stream/:base/ proto/ engine/stream/"
  "handoff/:base/ proto/ handoff/ ramferry/"
  "capi/:capi/ ramferry/"
  "include/ramferry/:ramferry/"
  "tools/common/:base/ ramferry/ tools/common/"
  "tools/migrate/:base/ ramferry/ tools/"
  "bench/micro/:base/ proto/ channels/ engine/ ramferry/ bench/"
  "bench/:base/ channels/ ramferry/ tools/common/ bench/"
)
for rule in "${rules[@]}"; do
  room=${rule%%:*}
  read -r -a allowed <<<"${rule#*:}"
  # bench/micro/ has a rule of its own.
  files=$(git ls-files "$room" | grep -E '\.(cc|h)$' |
    { if [[ $room == bench/ ]]; then grep -v '^bench/micro/'; else cat; fi; } || true)
  for f in $files; do
    while IFS= read -r inc; do
      ok=0
      for a in "${allowed[@]}"; do
        if [[ $a == */. ]]; then
          # The room's own files: the prefix, then no further folder.
          rest=${inc#"${a%.}"}
          if [[ $inc == "${a%.}"* && $rest != */* ]]; then ok=1; break; fi
        elif [[ $inc == "$a"* ]]; then
          ok=1
          break
        fi
      done
      if ((!ok)); then
        echo "$f includes \"$inc\": $room may include only ${allowed[*]}"
        layering=1
      fi
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f" | grep -v '^absl/')
  done
done
# The session's own files reach into post-copy only through its seams (the
# destination's target and memory check, the source's half), so
# post-copy's insides stay its own.
seams="postcopy_target.h postcopy_memory.h postcopy_source.h"
for f in $(git ls-files 'engine/*.cc' 'engine/*.h' | grep -v '^engine/postcopy/'); do
  for inc in $(sed -n 's/^#include "engine\/postcopy\/\([^"]*\)".*/\1/p' "$f"); do
    if [[ " $seams " != *" $inc "* ]]; then
      echo "$f includes engine/postcopy/$inc: engine/ may include only post-copy's seams ($seams)"
      layering=1
    fi
  done
done
if ((layering == 0)); then
  echo "every room includes only the rooms below it"
else
  status=1
fi

step "commit messages"
# From f70821d on (the commits before it keep their long subjects): a
# subject git log --oneline shows whole, then a blank line before any body.
since=f70821d
if ! git cat-file -e "$since^{commit}" 2>/dev/null; then
  echo "skipped: $since is not in this history (a shallow clone?)"
else
  messages=0
  for c in $(git rev-list "$since..HEAD"); do
    msg=$(git log -1 --format=%B "$c")
    subject=$(sed -n 1p <<<"$msg")
    second=$(sed -n 2p <<<"$msg")
    # Characters, not bytes: a subject may hold a UTF-8 sign or two.
    length=$(LC_ALL=C.UTF-8 && echo "${#subject}")
    if ((length > 72)); then
      echo "${c:0:7}: the subject has $length characters (at most 72):" \
        "$(LC_ALL=C.UTF-8 && echo "${subject:0:72}")..."
      messages=1
    fi
    if [[ -n $second ]]; then
      echo "${c:0:7}: no blank line between the subject and the body"
      messages=1
    fi
  done
  if ((messages == 0)); then
    echo "every commit since $since has a short subject, then a blank line"
  else
    echo "reword them (git rebase -i $since): a subject of at most 72" \
      "characters in the form 'room: what', a blank line, then the body"
    status=1
  fi
fi

step "mypy"
# The package's own sources, as their users' checkers see them (py.typed).
if ! command -v mypy >/dev/null; then
  echo "skipped: mypy is missing (Debian's mypy: scripts/install-deps.sh)"
elif ! (cd python && mypy --strict ramferry); then
  echo "fix what mypy found above (cd python && mypy --strict ramferry)"
  status=1
fi

if [[ ${LINT_TIDY:-1} != 0 ]]; then
  step "clang-tidy"
  # Its own configuration, one translation unit per file (the build's unity
  # batches would show clang-tidy several files as one); configuring takes
  # seconds and builds nothing.
  cmake -S . -B build-lint -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRAMFERRY_UNITY=OFF -DBUILD_TESTING=OFF >/dev/null
  mapfile -t files < <(git ls-files 'base/*.cc' 'proto/*.cc' 'channels/*.cc' \
    'engine/*.cc' 'handoff/*.cc' 'capi/*.cc' 'tools/*.cc' 'bench/*.cc')
  if ! ./scripts/clang_tidy_cached.py build-lint "${files[@]}"; then
    echo "clang-tidy found the above"
    status=1
  fi
fi
exit "$status"
