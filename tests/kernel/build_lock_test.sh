#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/kernel/build_lock_test.sh: two builds of one kernel variant at once
# must not destroy each other, and the kernel is built once.
# Runs tests/kernel/build.sh against a stub kernel tree in a private cache
# (GPUNVME_CACHE): the stub's "bzImage" counts its builds and holds until the
# test releases it, so the second run is driven into the first one's build
# window deterministically. No real kernel is built; takes a few seconds.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-build-lock.XXXXXX")
trap 'touch "$T/release"; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT

n=0 failed=0
result() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n $2"; else echo "not ok $n $2"; failed=$((failed + 1)); fi; }
# until SECS CMD...: poll CMD every 0.1 s, false after SECS.
until_s() { local end=$((SECONDS + $1)); shift; until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }

# A kernel tree with just the targets build.sh uses. bzImage records one build
# per call and waits (at most 60 s) for $T/release.
src=$T/cache/src/linux-source-7.3
mkdir -p "$src/scripts/kconfig"
cat >"$src/Makefile" <<EOF
kernelversion:
	@echo 7.3.0-stub
rustavailable:
	@true
tinyconfig:
	@mkdir -p \$(O) && : > \$(O)/.config
olddefconfig:
	@true
bzImage:
	@echo build >> $T/builds; i=0; while [ ! -e $T/release ] && [ \$\$i -lt 600 ]; do sleep 0.1; i=\$\$((i+1)); done; echo kernel > \$(O)/bzImage
modules:
	@true
modules_install:
	@true
EOF
cat >"$src/scripts/kconfig/merge_config.sh" <<'EOF'
#!/bin/sh
# merge_config.sh -m -O DIR BASE FRAG...: append the fragments
shift; shift; out=$1; shift; base=$1; shift
cat "$@" >> "$out/.config"
EOF
chmod +x "$src/scripts/kconfig/merge_config.sh"

build() { GPUNVME_CACHE=$T/cache bash "$HERE/build.sh"; }
builds() { [ -f "$T/builds" ] && wc -l <"$T/builds" || echo 0; }

# 1. Run A builds and holds inside bzImage; run B starts meanwhile.
build >"$T/a.out" 2>"$T/a.err" & a=$!
until_s 30 grep -q build "$T/builds" 2>/dev/null
result $? "the first build reaches its compile step"
build >"$T/b.out" 2>"$T/b.err" & b=$!
until_s 30 grep -q "another build of the default kernel is running" "$T/b.err"
result $? "the second build waits for the first (says so on stderr)"
kill -0 $b 2>/dev/null && [ "$(builds)" = 1 ]
result $? "while it waits it has not started a build of its own"

# 2. Release A: both finish, with the same directory, from one build.
touch "$T/release"
ra=0 rb=0
wait $a || ra=$?
wait $b || rb=$?
[ $ra = 0 ] && [ $rb = 0 ]
result $? "both builds succeed (exit $ra and $rb)"
out=$(cat "$T/a.out")
[ -n "$out" ] && [ "$out" = "$(cat "$T/b.out")" ] && [ -f "$out/bzImage" ] && [ -f "$out/.gpunvme-built" ]
result $? "both print the same, complete kernel directory"
[ "$(builds)" = 1 ]
result $? "the kernel was built once ($(builds) builds)"
[ "$(build 2>/dev/null)" = "$out" ] && [ "$(builds)" = 1 ]
result $? "a third run reuses the cached kernel without building"
[ "$(GPUNVME_CACHE=$T/cache bash "$HERE/build.sh" --dir)" = "$out" ]
result $? "--dir names the cached kernel's directory"

# 3. A waiter gives up at its deadline with a message, and removes nothing.
rm -f "$T/release" "$out/.gpunvme-built"
build >/dev/null 2>"$T/c.err" & c=$!
builds_are() { [ "$(builds)" = "$1" ]; }
until_s 30 builds_are 2
rd=0; GPUNVME_KERNEL_LOCK_TIMEOUT=1 build >/dev/null 2>"$T/d.err" || rd=$?
[ $rd != 0 ] && grep -q "gave up after 1s" "$T/d.err" && kill -0 $c 2>/dev/null
result $? "a waiter past GPUNVME_KERNEL_LOCK_TIMEOUT fails with a message"
touch "$T/release"; rc=0; wait $c || rc=$?
[ $rc = 0 ] && [ -f "$out/bzImage" ] && [ "$(builds)" = 2 ]
result $? "the running build was left alone and finished"

echo "1..$n"
echo "$((n - failed)) passed, $failed failed"
[ $failed = 0 ]
