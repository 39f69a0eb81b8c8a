#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The Python virtual environment that builds and tests the Python package
# (userspace/gpunvme-python): made from the machine's python3 if missing,
# with userspace/gpunvme-python/requirements-dev.txt installed by pip
# (from the index pip is configured with). Idempotent; prints the
# environment's directory on its last line.
#   GPUNVME_PYENV  where it lives (default: $GPUNVME_CACHE/python-venv,
#                  GPUNVME_CACHE defaulting to /var/cache/gpunvme)
#   PYTHON         the interpreter to make it from (default: python3)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REQ=$ROOT/userspace/gpunvme-python/requirements-dev.txt
VENV=${GPUNVME_PYENV:-${GPUNVME_CACHE:-/var/cache/gpunvme}/python-venv}
PY=${PYTHON:-python3}
log() { printf 'python_env: %s\n' "$*" >&2; }

command -v "$PY" >/dev/null || { log "no $PY (make deps installs python3)"; exit 1; }
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    { log "$PY is $("$PY" --version 2>&1); the package needs CPython 3.11 or newer"; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
    log "making $VENV from $("$PY" --version 2>&1)"
    mkdir -p "$(dirname "$VENV")"
    "$PY" -m venv "$VENV" ||
        { log "python3 -m venv failed (Debian: apt-get install python3-venv)"; exit 1; }
fi
# Reinstall only when the requirements changed since the last install.
stamp=$VENV/.gpunvme-requirements
if ! cmp -s "$REQ" "$stamp"; then
    log "installing $(grep -cv '^#' "$REQ") requirement(s) from $REQ"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" >&2
    cp "$REQ" "$stamp"
fi
echo "$VENV"
