#!/usr/bin/env bash
# Runs capture_test.py with a python3 that has the cryptography module
# (the decoder's AES for the sealed sessions); exit 77 (skipped, visibly)
# where none has it. CI's install-deps installs python3-cryptography.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for py in python3 /usr/bin/python3; do
  if "$py" -c "import cryptography" 2>/dev/null; then
    exec "$py" "$here/capture_test.py" "$@"
  fi
done
echo "SKIPPED: no python3 with cryptography (apt-get install python3-cryptography)"
exit 77
