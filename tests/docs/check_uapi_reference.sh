#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The docs suite of `make check` (tests/check.sh: suite docs).
#
#   tests/docs/check_uapi_reference.sh            everything below
#   tests/docs/check_uapi_reference.sh uapi       only uapi/gpunvme.md against uapi/gpunvme.h
#
# 1. uapi/gpunvme.md against uapi/gpunvme.h: every ioctl (number, direction,
#    struct, size, 32-bit value), every struct (size) and field (type,
#    offset), every GPUNVME_* constant (value) of the header is documented,
#    and the reference names nothing the header lacks. When a C compiler is
#    found, the sizes/offsets/numbers computed by the checker are compared
#    with the compiler's.
# 2. Self-test: the checker run on temporary copies of the header with an
#    extra ioctl, an extra field, a renamed field, a removed define, a
#    changed value, an extra struct and a grown struct must fail, naming the
#    item; the link check run on a broken file must fail.
# 3. Every relative link and image in the Markdown files resolves (anchors
#    too), and every SVG parses as XML and is self-contained
#    (tests/docs/check_links.sh runs only this part).
#
# Output: KTAP-ish "ok N - ..." / "not ok N - ...", then "N passed, N failed".
# Needs python3 (standard library only).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null || { echo "not ok 1 - python3 is needed to check the docs"; echo "0 passed, 1 failed"; exit 1; }
exec python3 "$here/docs_check.py" "${1:-all}"
