#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR MIT
#
# isa_negative.sh - the ISA check must catch the field report's trap.
#  1. bad_fence.hip (fence gated on __gfx1101__) built for gfx11-generic:
#     isa_check.sh must FAIL and name the missing buffer_gl1_inv/glc store.
#  2. The same source built for gfx1101: isa_check.sh must pass (so 1 fails
#     for the gate, not for an unrelated reason).
#  3. Our real fence.h with its family gate swapped for __gfx1101__ must
#     not compile for gfx11-generic at all (#error, no weak fallback).
#
# usage: isa_negative.sh BUILD_DIR   (env: CLANG, OBJDUMP)
set -u
here=$(cd "$(dirname "$0")" && pwd)
kdir=$(cd "$here/../.." && pwd)
out=${1:?build dir}/negative
CLANG=${CLANG:-clang-19}
HIP="-x hip --cuda-device-only --no-gpu-bundle-output -nogpuinc -nogpulib -O2 -std=c++17"
mkdir -p "$out"

n=0 pass=0 fail=0
res() { # ok(0/1) desc [diag]
	n=$((n + 1))
	if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok $n $2"
	else fail=$((fail + 1)); echo "not ok $n $2 # $3"; fi
}

echo "KTAP version 1"
echo "1..3"

build() { # target obj
	local v=""
	case $1 in *generic) v="-Xclang -mcode-object-version=6" ;; esac
	$CLANG $HIP --offload-arch="$1" $v -I"$kdir/include" \
		-c "$here/bad_fence.hip" -o "$2" 2>"$out/cc-$1.log"
}

obj=$out/bad_fence-gfx11-generic.o
if ! build gfx11-generic "$obj"; then
	res 1 "gfx11-generic chip-gated fence rejected" "compile failed: $(head -1 "$out/cc-gfx11-generic.log")"
else
	"$here/isa_check.sh" "gfx11-generic:$obj" >"$out/check-generic.ktap"
	rc=$?
	sed 's/^/# /' "$out/check-generic.ktap"
	if [ $rc -ne 0 ] && grep -q '^not ok .*doorbell' "$out/check-generic.ktap"; then
		res 0 "gfx11-generic chip-gated fence rejected by isa_check"
	else
		res 1 "gfx11-generic chip-gated fence rejected by isa_check" "checker passed a weak fence"
	fi
fi

obj=$out/bad_fence-gfx1101.o
if build gfx1101 "$obj" && "$here/isa_check.sh" "gfx1101:$obj" >"$out/check-1101.ktap"; then
	res 0 "control: same source on gfx1101 passes isa_check"
else
	sed 's/^/# /' "$out/check-1101.ktap" 2>/dev/null
	res 1 "control: same source on gfx1101 passes isa_check" "checker or build failed on the correct target"
fi

# 3: real headers, family gate replaced by the chip gate.
rm -rf "$out/include" && cp -r "$kdir/include" "$out/include"
sed -i 's/defined(__GFX11__)/defined(__gfx1101__)/' "$out/include/gpunvme/fence.h"
if ! grep -q '__gfx1101__' "$out/include/gpunvme/fence.h"; then
	res 1 "chip-gated fence.h is a compile error on gfx11-generic" "sed found no __GFX11__ gate to swap"
elif $CLANG $HIP --offload-arch=gfx11-generic -Xclang -mcode-object-version=6 \
	-I"$out/include" -c "$kdir/examples/read_verify.hip" \
	-o "$out/chip-gated.o" 2>"$out/chip-gated.log"; then
	res 1 "chip-gated fence.h is a compile error on gfx11-generic" "it compiled: a weak path exists"
elif grep -q 'error: "gpunvme/fence.h' "$out/chip-gated.log"; then
	grep -m1 'error:' "$out/chip-gated.log" | sed 's/^/# /'
	res 0 "chip-gated fence.h is a compile error on gfx11-generic"
else
	res 1 "chip-gated fence.h is a compile error on gfx11-generic" "failed for another reason: $(grep -m1 error: "$out/chip-gated.log")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
