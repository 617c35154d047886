#!/usr/bin/env bash
# Runs the Python package's pytest suite against the built library:
#   run.sh LIBRAMFERRY_SO [pytest args...]
# Exit 77 (skipped, visibly) where no Python here has pytest; CI's
# install-deps installs python3-pytest, so there it runs.
set -euo pipefail
lib=$(realpath "$1")
shift
here=$(cd "$(dirname "$0")" && pwd)
for py in python3 /usr/bin/python3; do
  if "$py" -c "import pytest" 2>/dev/null; then
    export RAMFERRY_LIBRARY=$lib
    export PYTHONPATH=$here/../../python${PYTHONPATH:+:$PYTHONPATH}
    cd "$here"
    exec "$py" -m pytest -q -p no:cacheprovider "$@" .
  fi
done
echo "SKIPPED: no python3 with pytest (apt-get install python3-pytest)"
exit 77
