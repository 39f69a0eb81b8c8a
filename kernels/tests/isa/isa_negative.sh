#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR GPL-2.0-only
#
# isa_negative.sh - the ISA check must catch what it exists to catch.
#  1. bad_fence.hip (fences chip-gated on __gfx1101__/__gfx90a__, weak
#     fallback) built for gfx11-generic and gfx942: isa_check.sh must FAIL
#     at the doorbell (a marked site without its sequence).
#  2. The same source built for gfx1101 and gfx90a: isa_check.sh must pass
#     (so 1 fails for the gate, not for an unrelated reason).
#  3. Our real fence.h with its family gate swapped for __gfx1101__ must
#     not compile for gfx11-generic at all (#error, no weak fallback).
#  4. A missing wait: the real fence.h with the wait after the release
#     writeback deleted (gfx9 buffer_wbl2, gfx12 global_wb), guide_read
#     built for gfx90a, gfx942 and gfx1201: isa_check.sh must FAIL at the
#     doorbell sites.
#     And without the writeback after the doorbell store on gfx90a (a
#     plain store that may sit dirty in L2): must FAIL too.
#  5. clang-19 itself drops that wait: clang_wait.hip (the doorbell as
#     builtin fences + a scoped store, fence.h's code before its inline
#     assembly) still leaves no wait between the writeback and the store on
#     gfx942 and gfx1201 (else the inline assembly could go: SKIP), and
#     isa_check.sh rejects those objects.
#  6. A plain-cached payload on RDNA: guide_read.hip without its
#     payload_acquire(), built for gfx1100 and gfx11-generic: isa_check.sh
#     must FAIL at the payload contract.
#  7. A gfx9 chip fence.h has no sequence for (gfx908) is a compile
#     error, never a fallback.
#  8. The one-load CQE poll (fence::poll_cqe()) with its 128-bit load
#     left cacheable (no glc slc dlc), read_verify (the group API's
#     cq_wait()) for gfx1100: isa_check.sh
#     must FAIL at the poll sites.
#  9. The release and acquire sites, on every AMD family (gfx1100,
#     gfx1201, gfx90a, gfx942), real headers with one fence deleted:
#     release_system() removed from sq_put() (read_verify) and from
#     pq_post() (pthread_io), acquire_system() removed after the phase in
#     cq_wait() (read_verify) and in pq_reap_one() (pthread_io):
#     isa_check.sh must FAIL at the path check (an SQ doorbell reached from
#     an SQE store without a release; a CQ poll with no acquire after it).
# 10. Order, not presence: sq_put()'s release moved before its SQE stores
#     (read_verify, gfx11-generic): every release site is still there and
#     well formed, and isa_check.sh must FAIL at the path check.
# 11. The self-test's plain cell store without its release (selftest.h's
#     store_released() a bare store), selftest for gfx1100 and gfx942: a
#     self-test weaker than the library's SQE writes proves nothing about
#     them, and isa_check.sh must FAIL at its release sites.
#
# usage: isa_negative.sh BUILD_DIR   (env: CLANG, OBJDUMP)
set -u
here=$(cd "$(dirname "$0")" && pwd)
kdir=$(cd "$here/../.." && pwd)
out=${1:?build dir}/negative
CLANG=${CLANG:-clang-19}
OBJDUMP=${OBJDUMP:-llvm-objdump-19}
export OBJDUMP
HIP="-x hip --cuda-device-only --no-gpu-bundle-output -nogpuinc -nogpulib -O2 -std=c++17"
mkdir -p "$out"

n=0 pass=0 fail=0 skip=0
res() { # ok(0/1/skip) desc [diag]
	n=$((n + 1))
	case $1 in
	0) pass=$((pass + 1)); echo "ok $n $2" ;;
	skip) skip=$((skip + 1)); echo "ok $n $2 # SKIP $3" ;;
	*) fail=$((fail + 1)); echo "not ok $n $2 # $3" ;;
	esac
}

echo "KTAP version 1"
echo "1..37"

# build target src obj-without-.o [include-dir]: object and assembly.
build() {
	local v=""
	case $1 in *generic) v="-Xclang -mcode-object-version=6" ;; esac
	mkdir -p "$(dirname "$3")"
	$CLANG $HIP --offload-arch="$1" $v -I"${4:-$kdir/include}" -I"$kdir/examples" \
		-c "$2" -o "$3.o" 2>"$3.log" &&
		$CLANG $HIP --offload-arch="$1" $v -I"${4:-$kdir/include}" -I"$kdir/examples" \
			-S "$2" -o "$3.s" 2>>"$3.log"
}

# must_fail desc target obj grep-pattern-of-the-failing-line
must_fail() {
	local ktap=$3.ktap
	"$here/isa_check.sh" "$2:$3.o" >"$ktap"
	local rc=$?
	sed 's/^/# /' "$ktap" | grep -E '^# not ok|passed'
	if [ $rc -ne 0 ] && grep -Eq "^not ok .*$4" "$ktap"; then
		res 0 "$1"
	else
		res 1 "$1" "checker passed it, or failed elsewhere than /$4/"
	fi
}

must_pass() { # desc target obj
	if "$here/isa_check.sh" "$2:$3.o" >"$3.ktap"; then
		res 0 "$1"
	else
		sed 's/^/# /' "$3.ktap" | grep '^# not ok'
		res 1 "$1" "checker or build failed on the correct target"
	fi
}

# 1 + 2: chip-gated fences.
for t in gfx11-generic gfx942; do
	o=$out/bad_fence-$t/bad_fence
	if build $t "$here/bad_fence.hip" "$o"; then
		must_fail "$t: chip-gated doorbell rejected by isa_check" $t "$o" 'doorbell'
	else
		res 1 "$t: chip-gated doorbell rejected by isa_check" "compile failed: $(head -1 "$o.log")"
	fi
done
for t in gfx1101 gfx90a; do
	o=$out/bad_fence-$t/bad_fence
	if build $t "$here/bad_fence.hip" "$o"; then
		must_pass "control: same source on $t passes isa_check" $t "$o"
	else
		res 1 "control: same source on $t passes isa_check" "compile failed: $(head -1 "$o.log")"
	fi
done

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

# 4: the wait after the writeback deleted from the real fence.h.
nw=$out/nowait-include
rm -rf "$nw" && cp -r "$kdir/include" "$nw"
sed -i -e 's/^\t\t\t"s_waitcnt vmcnt(0) lgkmcnt(0)\\n\\t"$/\t\t\t""/' \
	-e 's/^\t\t\t"s_wait_loadcnt 0x0\\n\\t"   \\$/\t\t\t"" \\/' \
	-e 's/^\t\t\t"s_wait_storecnt 0x0\\n\\t"$/\t\t\t""/' "$nw/gpunvme/fence.h"
edits=$(diff "$kdir/include/gpunvme/fence.h" "$nw/gpunvme/fence.h" | grep -c '^>')
for t in gfx90a gfx942 gfx1201; do
	o=$out/nowait-$t/guide_read
	if [ "$edits" -ne 3 ]; then
		res 1 "$t: doorbell without the wait after the writeback rejected" "sed changed $edits lines of fence.h, want 3"
	elif build $t "$kdir/examples/guide_read.hip" "$o" "$nw"; then
		must_fail "$t: doorbell without the wait after the writeback rejected" $t "$o" 'doorbell'
	else
		res 1 "$t: doorbell without the wait after the writeback rejected" "compile failed: $(head -1 "$o.log")"
	fi
done

nb=$out/nopost-include
rm -rf "$nb" && cp -r "$kdir/include" "$nb"
sed -i 's/^#define GPUNVME_ASM_POST GPUNVME_ASM_WB "s_waitcnt vmcnt(0)\\n\\t"$/#define GPUNVME_ASM_POST ""/' "$nb/gpunvme/fence.h"
o=$out/nopost-gfx90a/guide_read
if cmp -s "$kdir/include/gpunvme/fence.h" "$nb/gpunvme/fence.h"; then
	res 1 "gfx90a: doorbell without the writeback after the store rejected" "sed found no gfx9 POST to remove"
elif build gfx90a "$kdir/examples/guide_read.hip" "$o" "$nb"; then
	must_fail "gfx90a: doorbell without the writeback after the store rejected" gfx90a "$o" 'doorbell'
else
	res 1 "gfx90a: doorbell without the writeback after the store rejected" "compile failed: $(head -1 "$o.log")"
fi

# 5: clang-19's own fences drop the wait; the checker rejects them.
for t in gfx942 gfx1201; do
	o=$out/clang-wait-$t/clang_wait
	if ! build $t "$here/clang_wait.hip" "$o"; then
		res 1 "$t: clang-19 drops the wait after its release writeback" "compile failed: $(head -1 "$o.log")"
		res 1 "$t: clang-19's builtin doorbell rejected by isa_check" "compile failed"
		continue
	fi
	case $t in
	gfx12*) wb='global_wb scope:SCOPE_SYS' st='global_store_b32 .*scope:SCOPE_SYS' w='^s_wait_storecnt 0x0$' ;;
	*) wb='buffer_wbl2 sc0 sc1' st='global_store_dword .* sc0 sc1' w='^s_waitcnt vmcnt\(0\)' ;;
	esac
	"$OBJDUMP" -d --mcpu=$t "$o.o" | sed -e 's@[[:space:]]*//.*@@' -e 's/^[[:space:]]*//' |
		grep -Ev '^$|^s_nop 0$' >"$o.dis"
	# The writeback, then the store, with no wait for the writeback
	# (vmcnt / storecnt) in between: scalar waits and moves only.
	if awk -v wb="^$wb\$" -v st="^$st\$" -v w="$w" '
		$0 ~ wb { armed = 1; next }
		$0 ~ w { armed = 0 }
		armed && $0 ~ st { hit = 1 }
		END { exit !hit }' "$o.dis"; then
		awk -v wb="^$wb\$" -v st="^$st\$" '$0 ~ wb { p = 1 } p { print "# " $0 } p && $0 ~ st { exit }' "$o.dis"
		res 0 "$t: clang-19 drops the wait after its release writeback"
	else
		res skip "$t: clang-19 drops the wait after its release writeback" "this clang waits: fence.h's inline assembly is no longer needed for it"
	fi
	must_fail "$t: clang-19's builtin doorbell rejected by isa_check" $t "$o" 'doorbell'
done

# 6: payload read without the acquire on RDNA.
pp=$out/plain-payload
mkdir -p "$pp"
grep -v 'fence::payload_acquire();' "$kdir/examples/guide_read.hip" >"$pp/guide_read.hip"
for t in gfx1100 gfx11-generic; do
	o=$pp/$t/guide_read
	if cmp -s "$kdir/examples/guide_read.hip" "$pp/guide_read.hip"; then
		res 1 "$t: plain-cached payload read rejected" "guide_read.hip has no payload_acquire() to remove"
	elif build $t "$pp/guide_read.hip" "$o"; then
		must_fail "$t: plain-cached payload read rejected" $t "$o" 'payload-acquire'
	else
		res 1 "$t: plain-cached payload read rejected" "compile failed: $(head -1 "$o.log")"
	fi
done

# 7: an unverified gfx9 chip.
if $CLANG $HIP --offload-arch=gfx908 -I"$kdir/include" -c "$kdir/examples/guide_read.hip" \
	-o "$out/gfx908.o" 2>"$out/gfx908.log"; then
	res 1 "gfx908 (no verified gfx9 sequence) is a compile error" "it compiled: a fallback exists"
elif grep -q 'error: "gpunvme/fence.h: gfx9 chip' "$out/gfx908.log"; then
	res 0 "gfx908 (no verified gfx9 sequence) is a compile error"
else
	res 1 "gfx908 (no verified gfx9 sequence) is a compile error" "failed for another reason: $(grep -m1 error: "$out/gfx908.log")"
fi

# 8: the 16-byte CQE poll without its system-scope bits.
np=$out/nosys-poll-include
rm -rf "$np" && cp -r "$kdir/include" "$np"
sed -i 's/^\(\t\t\s*GPUNVME_ASM_LD16 " %0, %1, off"\) GPUNVME_ASM_LD_SYS /\1 /' "$np/gpunvme/fence.h"
o=$out/nosys-poll-gfx1100/read_verify
if cmp -s "$kdir/include/gpunvme/fence.h" "$np/gpunvme/fence.h"; then
	res 1 "gfx1100: cacheable 16-byte CQE poll rejected" "sed found no poll_cqe() load to weaken"
elif build gfx1100 "$kdir/examples/read_verify.hip" "$o" "$np"; then
	must_fail "gfx1100: cacheable 16-byte CQE poll rejected" gfx1100 "$o" 'poll'
else
	res 1 "gfx1100: cacheable 16-byte CQE poll rejected" "compile failed: $(head -1 "$o.log")"
fi

# 9: one release or acquire site deleted from the real headers.
# negative_edit name file sed-script want-lines: a copy of the headers with
# file edited; fails (returns 1) unless sed changed exactly want-lines lines.
negative_edit() {
	local d=$out/$1-include
	rm -rf "$d" && cp -r "$kdir/include" "$d"
	sed -i -e "$3" "$d/gpunvme/$2"
	[ "$(diff "$kdir/include/gpunvme/$2" "$d/gpunvme/$2" | grep -c '^[<>]')" -eq "$4" ]
}
for v in "norel-sqput queue.h read_verify /^\tfence::release_system();\$/d 1 passes a release" \
	"norel-post pqueue.h pthread_io /^\tfence::release_system();.*SQE.*mark/d 1 passes a release" \
	"noacq-cqwait queue.h read_verify /^\t\t\tfence::acquire_system();\$/d 2 acquire after it" \
	"noacq-reap pqueue.h pthread_io /^\t\tfence::acquire_system();\$/d 2 acquire after it"; do
	read -r name file ex script lines want <<<"$v"
	desc="$name: $file without the fence ($ex) rejected"
	if ! negative_edit "$name" "$file" "$script" "$lines"; then
		for t in gfx1100 gfx1201 gfx90a gfx942; do
			res 1 "$t $desc" "sed did not change $lines line(s) of $file"
		done
		continue
	fi
	for t in gfx1100 gfx1201 gfx90a gfx942; do
		o=$out/$name-$t/$ex
		if build $t "$kdir/examples/$ex.hip" "$o" "$out/$name-include"; then
			must_fail "$t $desc" $t "$o" "$want"
		else
			res 1 "$t $desc" "compile failed: $(head -1 "$o.log")"
		fi
	done
done

# 10: the release before the SQE stores instead of after them.
o=$out/release-first-gfx11-generic/read_verify
desc="gfx11-generic: sq_put() releasing before its SQE stores rejected"
if ! negative_edit release-first queue.h \
	'/^\tsqe_store(&q\.sq\[sq_slot(q, i)\], e);$/{i\	fence::release_system(); /* before the stores */
n;/^\tfence::release_system();$/d;}' 2; then
	res 1 "$desc" "sed did not move sq_put()'s release"
elif build gfx11-generic "$kdir/examples/read_verify.hip" "$o" "$out/release-first-include"; then
	must_fail "$desc" gfx11-generic "$o" 'passes a release'
	if grep -Eq '^ok .*every release site is the' "$o.ktap"; then
		res 0 "gfx11-generic: ... while its release site is present and well formed"
	else
		res 1 "gfx11-generic: ... while its release site is present and well formed" "the site check failed too: the order check is not what caught it"
	fi
else
	res 1 "$desc" "compile failed: $(head -1 "$o.log")"
	res 1 "gfx11-generic: ... while its release site is present and well formed" "compile failed"
fi

# 11: the self-test's plain store without its release.
desc="selftest.h's plain cell store without its release rejected"
if ! negative_edit st-norel selftest.h '/^\tfence::release_system();$/d' 1; then
	for t in gfx1100 gfx942; do res 1 "$t $desc" "sed did not change 1 line of selftest.h"; done
else
	for t in gfx1100 gfx942; do
		o=$out/st-norel-$t/selftest
		if build $t "$kdir/examples/selftest.hip" "$o" "$out/st-norel-include"; then
			must_fail "$t $desc" $t "$o" 'release'
		else
			res 1 "$t $desc" "compile failed: $(head -1 "$o.log")"
		fi
	done
fi

if [ "$skip" -gt 0 ]; then
	echo "$pass passed, $fail failed, $skip skipped"
else
	echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ]
