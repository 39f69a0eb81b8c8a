#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Every relative link and image in the repository's Markdown files resolves
# to an existing file (and heading anchor), and every SVG parses as XML, has
# a viewBox and loads nothing from outside. Part of
# tests/docs/check_uapi_reference.sh (make check); this runs only that part.
#
#   tests/docs/check_links.sh                 all *.md and *.svg git knows about
#   tests/docs/check_links.sh FILE...         only these (paths from the repo root)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null || { echo "not ok 1 - python3 is needed to check the docs"; echo "0 passed, 1 failed"; exit 1; }
exec python3 "$here/docs_check.py" links "$@"
