#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR GPL-2.0-only
#
# isa_check.sh - prove the fences are really in the code objects.
#
# A chip-macro gate (__gfx1101__) compiled for gfx11-generic dropped the
# RDNA doorbell fence without a warning; only the disassembly showed it. So
# every built object is disassembled and each family's required instruction
# sequences are matched in order. KTAP out; exit 1 if any check fails.
#
# Every site, per function (AMD): fence.h opens each of its sequences with
# a marker comment ("; gpunvme:doorbell", poll, release, acquire,
# payload-acquire, payload-release) that survives into the compiler's
# assembly (OBJECT's .s beside it, built from the same source with the same
# flags). Every marked block must be exactly its family's sequence (the
# waits after the gfx9/gfx12 writeback included: clang-19 drops them from
# its own fences), the object must hold exactly as many fenced doorbell
# stores and invalidating polls as the assembly has markers, and, where the
# ISA can tell a system-scope store apart (gfx10/11/12, gfx942), there is
# no system-scope store outside a fenced doorbell. A plain store that
# bypasses doorbell_write() is indistinguishable from a data store on
# gfx90a and is not caught there. Example kernels that touch payload must
# hold the payload-contract sites (read_verify, pthread_io, guide_read,
# guide_array: payload-acquire; write, pthread_io, guide_array:
# payload-release), and every one of
# them, as it submits and reaps, release and acquire sites. The self-test
# kernel (selftest: include/gpunvme/selftest.h) stores to and loads from
# the queue memory the way the library does: its plain stores each before
# a release site, its other stores doorbell sites, its loads poll sites.
#
# Where those sites are, per function, on its control flow graph
# (ring_order.awk; the doorbell markers name their ring, "; gpunvme:
# doorbell sq" / "cq", and queue.h marks where SQE stores begin, "; gpunvme:
# sqe"): every path from an SQE store to an SQ doorbell passes a release
# site (the ringer's own release covers only its own lane), every CQ poll
# (a 16-byte one) has a path to an acquire site before the next CQ poll, a
# function that writes SQEs also releases them and rings, and an example
# kernel names the ring of each of its doorbells. What this does not prove:
# that the acquire is on the phase-hit branch rather than on another path
# out of the poll (it proves a path to one exists), and anything across a
# call (every example kernel is one function; a call would make the
# submitting function fail the check, never pass it).
#
# usage: isa_check.sh TARGET:OBJECT [TARGET:OBJECT...]  (sm_NN:file.ptx for NVIDIA)
# env:   OBJDUMP (default llvm-objdump-19)
set -u
OBJDUMP=${OBJDUMP:-llvm-objdump-19}

n=0 pass=0 fail=0
lines=()

report() { # ok(0/1) description [diagnostic]
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		pass=$((pass + 1))
		lines+=("ok $n $2")
	else
		fail=$((fail + 1))
		lines+=("not ok $n $2 # $3")
	fi
}

# Match a chain of regexes in order, each within GAP instructions of the
# previous one. Prints "<matches> <longest matched prefix>".
chain() { # file gap regex...
	local f=$1 gap=$2
	shift 2
	local IFS=$'\x1f'
	awk -v gap="$gap" -v pats="$*" '
		BEGIN { k = split(pats, P, "\x1f") }
		{ L[NR] = $0 }
		END {
			count = 0; best = 0
			for (i = 1; i <= NR; i++) {
				if (L[i] !~ P[1]) continue
				pos = i; m = 1
				for (s = 2; s <= k; s++) {
					hit = 0
					for (j = pos + 1; j <= pos + gap && j <= NR; j++)
						if (L[j] ~ P[s]) { pos = j; hit = 1; break }
					if (!hit) break
					m = s
				}
				if (m > best) best = m
				if (m == k) count++
			}
			print count, best
		}' "$f"
}

# check desc file gap regex...: pass when the chain occurs at least once.
check_chain() {
	local desc=$1 f=$2 gap=$3
	shift 3
	local pats=("$@") res count best
	res=$(chain "$f" "$gap" "${pats[@]}")
	count=${res% *}
	best=${res#* }
	if [ "$count" -gt 0 ]; then
		report 0 "$desc" ""
		return
	fi
	# Name every instruction of the chain that is absent altogether.
	local p absent=""
	for p in "${pats[@]}"; do
		grep -Eq "$p" "$f" || absent="$absent${absent:+, }/$p/"
	done
	if [ -n "$absent" ]; then
		report 1 "$desc" "missing instruction(s) $absent"
		return
	fi
	if [ "$best" -eq 0 ]; then
		report 1 "$desc" "missing instruction /${pats[0]}/"
	else
		report 1 "$desc" "missing /${pats[$best]}/ within $gap after /${pats[$((best - 1))]}/"
	fi
}

# check_chain_min desc file min gap regex...: the chain occurs >= min times.
check_chain_min() {
	local desc=$1 f=$2 min=$3 gap=$4
	shift 4
	local res count
	res=$(chain "$f" "$gap" "$@")
	count=${res% *}
	if [ "$count" -ge "$min" ]; then
		report 0 "$desc" ""
	else
		report 1 "$desc" "found $count, want at least $min"
	fi
}

check_count() { # desc file min regex: at least min matching instructions
	local c
	c=$(grep -Ec "$4" "$2")
	if [ "$c" -ge "$3" ]; then
		report 0 "$1" ""
	else
		report 1 "$1" "found $c of /$4/, want at least $3"
	fi
}

# The per-thread API (pqueue.h, examples/pthread_io.hip) rings two
# doorbells of its own (the coalesced SQ ring, the CQ head after a reap),
# each the full family sequence; it stores SQEs as 16-byte stores and
# claims tickets and locks with device-scope atomics: checked on the
# pthread_io objects below.
check_present() { # desc file regex
	if grep -Eq "$3" "$2"; then
		report 0 "$1" ""
	else
		report 1 "$1" "missing instruction /$3/"
	fi
}

check_absent() { # desc file regex
	local hit
	hit=$(grep -Em1 "$3" "$2")
	if [ -z "$hit" ]; then
		report 0 "$1" ""
	else
		report 1 "$1" "forbidden instruction: $hit"
	fi
}

WAIT_ALL='^s_waitcnt (vmcnt\(0\) lgkmcnt\(0\)|lgkmcnt\(0\) vmcnt\(0\))$'
WAIT_VS='^s_waitcnt_vscnt null, 0x0$'
NO_CYCLES='s_memtime|SHADER_CYCLES'


# The marked sites of an assembly file, one line per site:
#   <kind> <function> <line> ok|bad <the block's instructions, ' | '-joined>
# A block is every instruction between the marker and ;;#ASMEND.
sites() { # asm-file
	awk '
		function flush() {
			if (kind != "") print kind, fn, at, body
			kind = ""; body = ""
		}
		{ t = $0; sub(/^[ \t]+/, "", t); sub(/[ \t]+$/, "", t); gsub(/[ \t]+/, " ", t) }
		t ~ /^[A-Za-z_][A-Za-z0-9_.$]*:/ && t !~ /^\.L/ { fn = t; sub(/:.*/, "", fn) }
		t ~ /^; gpunvme:[a-z-]+( (sq|cq))?$/ { flush(); kind = substr(t, 11); sub(/ .*/, "", kind); at = NR; body = ""; next }
		kind != "" && t == ";;#ASMEND" { flush(); next }
		kind != "" && t != "" && t !~ /^;/ { body = body (body == "" ? "" : " | ") t }
	' "$1"
}

# Does a ' | '-joined block match one of the family's sequences for its
# kind? Each sequence is a list of regexes, one per instruction, in order.
block_ok() { # kind block
	local want
	case $1 in
	doorbell) want=("${REL[@]}" "$ST" "${ST_WAIT[@]}" "${POST[@]}" "${INV[@]}") ;;
	release | payload-release) want=("${REL[@]}") ;;
	acquire | payload-acquire) want=("${ACQ_WAIT[@]}" "${INV[@]}") ;;
	poll)
		# One load (a 32-bit word, or a whole 16-byte CQE), or the
		# per-thread reaper's batch of 8 CQEs: the same invalidate before
		# and wait after, the same system-scope bits on every load; a
		# 128-bit load differs from the 32-bit one only in width.
		want=("${INV[@]}" "$LD" "$LD_WAIT")
		seq_match "$2" "${want[@]}" && return 0
		want=("${INV[@]}" "$LD16" "$LD_WAIT")
		seq_match "$2" "${want[@]}" && return 0
		want=("${INV[@]}" "$LD16" "$LD16" "$LD16" "$LD16" "$LD16" "$LD16" "$LD16" "$LD16" "$LD_WAIT")
		;;
	*) return 1 ;;
	esac
	seq_match "$2" "${want[@]}"
}

seq_match() { # block regex...
	local block=$1
	shift
	local IFS=$'\x1f'
	awk -v b="$block" -v pats="$*" 'BEGIN {
		n = split(b, I, / \| /); k = split(pats, P, "\x1f")
		if (n != k) exit 1
		for (i = 1; i <= n; i++) if (I[i] !~ P[i]) exit 1
		exit 0 }'
}

# Check every site of an assembly file; one KTAP line per kind.
check_sites() { # tag asm-file need-kinds...
	local tag=$1 asm=$2
	shift 2
	local kind fn at body cnt bad first fns
	sites "$asm" >"$tmp/sites"
	for kind in doorbell poll release acquire payload-acquire payload-release; do
		cnt=0 bad=0 first="" fns=""
		while read -r k fn at body; do
			[ "$k" = "$kind" ] || continue
			cnt=$((cnt + 1))
			case " $fns " in *" $fn "*) ;; *) fns="$fns${fns:+ }$fn" ;; esac
			if ! block_ok "$kind" "$body"; then
				bad=$((bad + 1))
				[ -n "$first" ] || first="$fn (.s line $at): $body"
			fi
		done <"$tmp/sites"
		local need=0 w
		for w in "$@"; do [ "$w" = "$kind" ] && need=1; done
		[ "$cnt" -eq 0 ] && [ "$need" -eq 0 ] && continue
		eval "count_${kind//-/_}=$cnt"
		if [ "$cnt" -eq 0 ]; then
			report 1 "$tag: every $kind site is the $FAMILY sequence" "no $kind site (marker) in any function"
		elif [ "$bad" -gt 0 ]; then
			report 1 "$tag: every $kind site is the $FAMILY sequence" "$bad of $cnt wrong, first in $first"
		else
			report 0 "$tag: every $kind site is the $FAMILY sequence ($cnt in $fns)" ""
		fi
	done
}

# Per family: the instruction regexes of fence.h's sequences (whitespace
# collapsed). The object's disassembly prints waits canonically; the
# assembly prints inline asm as written: either wait order is accepted.
family() { # target
	local V='v\[[0-9]+:[0-9]+\]' R='v[0-9]+'
	case $1 in
	gfx10* | gfx11*)
		FAMILY="gfx10/11 (RDNA)"
		REL=("$WAIT_ALL" "$WAIT_VS")
		ACQ_WAIT=("$WAIT_ALL")
		INV=('^buffer_gl1_inv$' '^buffer_gl0_inv$')
		ST="^global_store_(dword|b32) $V, $R, off glc slc dlc\$"
		LD="^global_load_(dword|b32) $R, $V, off glc slc dlc\$"
		LD16="^global_load_(dwordx4|b128) $V, $V, off glc slc dlc\$"
		ST_WAIT=("$WAIT_ALL" "$WAIT_VS")
		POST=()
		LD_WAIT='^s_waitcnt vmcnt\(0\)$'
		SYS_ST='^global_store_(dword|b32) .* glc slc dlc$'
		;;
	gfx12*)
		FAMILY="gfx12"
		REL=('^global_wb scope:SCOPE_SYS$' '^s_wait_loadcnt 0x0$' '^s_wait_storecnt 0x0$')
		ACQ_WAIT=('^s_wait_loadcnt 0x0$' '^s_wait_storecnt 0x0$')
		INV=('^global_inv scope:SCOPE_SYS$' '^s_wait_loadcnt 0x0$')
		ST="^global_store_b32 $V, $R, off scope:SCOPE_SYS\$"
		LD="^global_load_b32 $R, $V, off scope:SCOPE_SYS\$"
		LD16="^global_load_b128 $V, $V, off scope:SCOPE_SYS\$"
		ST_WAIT=('^s_wait_storecnt 0x0$')
		POST=('^global_wb scope:SCOPE_SYS$' '^s_wait_storecnt 0x0$')
		LD_WAIT='^s_wait_loadcnt 0x0$'
		SYS_ST='^global_store_[a-z0-9_]+ .*scope:SCOPE_SYS$'
		;;
	gfx94*)
		FAMILY="gfx940-942"
		REL=('^buffer_wbl2 sc0 sc1$' "$WAIT_ALL")
		ACQ_WAIT=("$WAIT_ALL")
		INV=('^buffer_inv sc0 sc1$')
		ST="^global_store_dword $V, $R, off sc0 sc1\$"
		LD="^global_load_dword $R, $V, off sc0 sc1\$"
		LD16="^global_load_dwordx4 $V, $V, off sc0 sc1\$"
		ST_WAIT=('^s_waitcnt vmcnt\(0\)$')
		POST=('^buffer_wbl2 sc0 sc1$' '^s_waitcnt vmcnt\(0\)$')
		LD_WAIT='^s_waitcnt vmcnt\(0\)$'
		SYS_ST='^global_store_[a-z0-9_]+ .* sc0 sc1$'
		;;
	gfx90a)
		FAMILY="gfx90a"
		REL=('^buffer_wbl2$' "$WAIT_ALL")
		ACQ_WAIT=("$WAIT_ALL")
		INV=('^buffer_invl2$' '^buffer_wbinvl1_vol$')
		ST="^global_store_dword $V, $R, off\$"
		LD="^global_load_dword $R, $V, off glc\$"
		LD16="^global_load_dwordx4 $V, $V, off glc\$"
		ST_WAIT=('^s_waitcnt vmcnt\(0\)$')
		POST=('^buffer_wbl2$' '^s_waitcnt vmcnt\(0\)$')
		LD_WAIT='^s_waitcnt vmcnt\(0\)$'
		SYS_ST=""
		;;
	*) return 1 ;;
	esac
}

# What each example kernel must hold besides doorbells and polls: every
# one submits and reaps, so release and acquire sites, and its payload
# contract's sites.
needs() { # object name
	case $1 in
	read_verify | guide_read) echo release acquire payload-acquire ;;
	sweep) echo release acquire ;;
	write) echo release acquire payload-release ;;
	pthread_io | guide_array) echo release acquire payload-acquire payload-release ;;
	selftest) echo release ;; # its GPU-to-CPU stores: plain + release, doorbell
	esac
}

# Where the release and acquire sites are, per function, on its control
# flow graph (ring_order.awk): every path from an SQE store to an SQ
# doorbell passes a release, every CQ poll has an acquire after it, every
# SQE marker is followed by its stores; a function that writes SQEs rings
# them and releases them itself; and a library example kernel names the
# ring of every doorbell and both submits and reaps.
check_order() { # tag asm-file example(0/1)
	local tag=$1 asm=$2 ex=$3
	local line fn sqe rel dbsq dbcq dbnone cqpoll acq unrel unacq badsqe
	local sub=0 reap=0 e_rel="" e_acq="" e_sqe="" e_fn="" e_ring="" fns=""
	awk -f "$here/ring_order.awk" "$asm" >"$tmp/order"
	while read -r _ fn _ sqe _ rel _ dbsq _ dbcq _ dbnone _ cqpoll _ acq _ unrel _ unacq _ badsqe; do
		fns="$fns${fns:+ }$fn"
		[ "$unrel" = - ] || e_rel="$e_rel${e_rel:+; }$fn at .s line(s) $unrel"
		[ "$unacq" = - ] || e_acq="$e_acq${e_acq:+; }$fn at .s line(s) $unacq"
		[ "$badsqe" = - ] || e_sqe="$e_sqe${e_sqe:+; }$fn at .s line(s) $badsqe"
		if [ "$sqe" -gt 0 ] || [ "$dbsq" -gt 0 ]; then
			sub=$((sub + 1))
			if [ "$sqe" -eq 0 ] || [ "$dbsq" -eq 0 ] || [ "$rel" -eq 0 ]; then
				e_fn="$e_fn${e_fn:+; }$fn: $sqe SQE marker(s), $rel release(s), $dbsq SQ doorbell(s)"
			fi
		fi
		[ "$cqpoll" -gt 0 ] && reap=$((reap + 1))
		[ "$ex" = 1 ] && [ "$dbnone" -gt 0 ] && e_ring="$e_ring${e_ring:+; }$fn: $dbnone"
	done <"$tmp/order"
	if [ "$ex" = 1 ] && [ "$sub" -eq 0 ]; then
		e_fn="${e_fn}${e_fn:+; }no function writes SQEs and rings an SQ doorbell"
	fi
	if [ "$ex" = 1 ] && [ "$reap" -eq 0 ]; then
		e_acq="${e_acq}${e_acq:+; }no function polls a CQ"
	fi
	report "$([ -z "$e_fn" ] && echo 0 || echo 1)" \
		"$tag: each submitting function writes SQEs, releases them and rings the SQ ($sub in ${fns:-no function})" "$e_fn"
	report "$([ -z "$e_rel" ] && echo 0 || echo 1)" \
		"$tag: every path from an SQE store to an SQ doorbell passes a release" "unreleased SQ doorbell in $e_rel"
	report "$([ -z "$e_acq" ] && echo 0 || echo 1)" \
		"$tag: every CQ poll has an acquire after it ($reap reaping function(s))" "CQ poll without an acquire after it: $e_acq"
	report "$([ -z "$e_sqe" ] && echo 0 || echo 1)" \
		"$tag: every SQE marker is followed by its 4 16-byte stores" "marker without its stores in $e_sqe"
	if [ "$ex" = 1 ]; then
		report "$([ -z "$e_ring" ] && echo 0 || echo 1)" \
			"$tag: every doorbell names its ring (sq_/cq_doorbell_write)" "doorbell_write() with no ring named in $e_ring"
	fi
}

here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for spec in "$@"; do
	target=${spec%%:*}
	obj=${spec#*:}
	name=$(basename "$obj" .o)
	tag="$target $name"
	dis=$tmp/$target-$name.s
	# PTX is already text; AMD objects are disassembled.
	case $target in
	sm_*)
		sed -e 's@[[:space:]]*//.*@@' -e 's/^[[:space:]]*//' "$obj" | grep -v '^$' >"$dis"
		check_chain "$tag: doorbell fence.sc.sys; st.volatile.u32 or st.mmio.relaxed.sys.u32 (generic)" \
			"$dis" 1 '^fence\.sc\.sys;$' '^st\.(volatile|mmio\.relaxed\.sys)\.u32 \['
		check_present "$tag: stop flag poll ld.acquire.sys.u32" "$dis" '^ld\.acquire\.sys\.u32 '
		if [ "${name%.ptx}" = selftest ]; then
			# The self-test's stores are the library's: a plain store then
			# the release (as SQEs), and the doorbell store (above).
			check_chain_min "$tag: self-test: plain cell stores each followed by the release fence.sc.sys" \
				"$dis" 2 1 '^st(\.global)?\.u32[[:space:]]+\[' '^fence\.sc\.sys;$'
		else
			check_present "$tag: CQ poll: ONE 16-byte load ld.volatile.v4.u32 (relaxed, system scope)" "$dis" '^ld\.volatile(\.global)?\.v4\.u32 '
			check_present "$tag: acquire after the phase fence.acq_rel.sys" "$dis" '^fence\.acq_rel\.sys;$'
			check_count "$tag: SQE as 4 x 16-byte stores" "$dis" 4 '^st(\.global)?\.v2\.u64 '
		fi
		check_present "$tag: wall clock %globaltimer" "$dis" '%globaltimer'
		if [ "${name%.ptx}" = pthread_io ]; then
			check_chain_min "$tag: per-thread API: SQ and CQ doorbells both fence.sc.sys; st.volatile/st.mmio.relaxed.sys" \
				"$dis" 2 1 '^fence\.sc\.sys;$' '^st\.(volatile|mmio\.relaxed\.sys)\.u32 \['
			check_count "$tag: per-thread API: SQE as 4 x 16-byte stores" "$dis" 4 '^st(\.global)?\.v2\.u64 '
			check_present "$tag: per-thread API: 64-bit ticket add" "$dis" '^atom(\.global)?\.relaxed\.gpu(\.global)?\.add\.u64 '
			check_present "$tag: per-thread API: lock CAS with acquire" "$dis" '^atom(\.global)?\.acquire\.gpu(\.global)?\.cas\.b32 '
			check_present "$tag: per-thread API: a take frees its slot by CAS with release" "$dis" '^atom(\.global)?\.release\.gpu(\.global)?\.cas\.b32 '
			check_chain_min "$tag: per-thread API: fence.sc.sys after the SQ and CQ doorbell stores (before unlock)" \
				"$dis" 2 1 '^(st\.volatile|st\.mmio\.relaxed\.sys)\.u32 \[' '^fence\.sc\.sys;$'
			check_present "$tag: per-thread API: ring re-check fence.sc.gpu" "$dis" '^fence\.sc\.gpu;$'
			check_present "$tag: per-thread API: warp reaper agrees by vote.sync.ballot" "$dis" '^vote\.sync\.ballot\.b32 '
			check_present "$tag: per-thread API: warp-aggregated claims and ring (bar.warp.sync)" "$dis" '^bar\.warp\.sync '
		fi
		check_absent "$tag: no SM cycle clock (%clock, %clock64)" "$dis" '%clock(64)?\b'
		continue
		;;
	esac
	# Instructions only: no comments/encodings, padding or blank lines.
	if ! "$OBJDUMP" -d --mcpu="$target" "$obj" >"$tmp/raw" 2>"$tmp/err"; then
		report 1 "$tag: disassemble" "$(head -1 "$tmp/err")"
		continue
	fi
	sed -e 's@[[:space:]]*//.*@@' -e 's/^[[:space:]]*//' "$tmp/raw" |
		grep -Ev '^$|^s_nop 0$|^s_code_end$|file format|^Disassembly' >"$dis"

	if ! family "$target"; then
		report 1 "$tag: family" "no ISA rules for target $target: add them before shipping it"
		continue
	fi
	asm=${obj%.o}.s
	if [ ! -f "$asm" ]; then
		report 1 "$tag: assembly beside the object" "$asm missing (built by make -C kernels)"
		continue
	fi
	count_doorbell=0 count_poll=0 count_release=0
	# shellcheck disable=SC2046 # needs prints words
	check_sites "$tag" "$asm" doorbell poll $(needs "$name")
	if [ "$name" = selftest ]; then
		# mark and the restore (plain + release), ack and nack (doorbell),
		# the cell word and the stop flag (polls).
		if [ "$count_release" -ge 2 ] && [ "$count_doorbell" -ge 2 ] && [ "$count_poll" -ge 2 ]; then
			report 0 "$tag: self-test: its cell stores are release and doorbell sites, its loads poll sites" ""
		else
			report 1 "$tag: self-test: its cell stores are release and doorbell sites, its loads poll sites" \
				"$count_release release, $count_doorbell doorbell, $count_poll poll site(s); want 2, 2, 2"
		fi
	fi
	case $name in read_verify | write | sweep | pthread_io | guide_read | guide_array) ex=1 ;; *) ex=0 ;; esac
	check_order "$tag" "$asm" "$ex"
	db=("${REL[@]}" "$ST" "${ST_WAIT[@]}" "${POST[@]}" "${INV[@]}")
	pl=("${INV[@]}" "($LD|$LD16)")
	# The object: as many fenced doorbells and invalidating polls as markers.
	res=$(chain "$dis" 1 "${db[@]}")
	if [ "${res% *}" -eq "$count_doorbell" ] && [ "$count_doorbell" -gt 0 ]; then
		report 0 "$tag: object holds the fenced doorbell store at all $count_doorbell marked sites" ""
	else
		report 1 "$tag: object holds the fenced doorbell store at all $count_doorbell marked sites" \
			"object has ${res% *} complete sequences"
	fi
	res=$(chain "$dis" 1 "${pl[@]}")
	if [ "${res% *}" -eq "$count_poll" ] && [ "$count_poll" -gt 0 ]; then
		report 0 "$tag: object holds the invalidating poll at all $count_poll marked sites" ""
	else
		report 1 "$tag: object holds the invalidating poll at all $count_poll marked sites" \
			"object has ${res% *} complete sequences"
	fi
	if [ -n "$SYS_ST" ]; then
		c=$(grep -Ec "$SYS_ST" "$dis")
		if [ "$c" -eq "$count_doorbell" ]; then
			report 0 "$tag: no system-scope store outside a fenced doorbell ($c stores)" ""
		else
			report 1 "$tag: no system-scope store outside a fenced doorbell" \
				"$c system-scope stores, $count_doorbell fenced doorbells"
		fi
	fi
	case $target in
	gfx10*) clk="^s_memrealtime " clkname=s_memrealtime ;;
	gfx11* | gfx12*) clk="^s_sendmsg_rtn_b64 .*MSG_RTN_GET_REALTIME" clkname="s_sendmsg_rtn_b64 MSG_RTN_GET_REALTIME" ;;
	*) clk="^s_memrealtime " clkname=s_memrealtime ;;
	esac
	check_present "$tag: wall clock ${clkname}" "$dis" "$clk"
	case $name in read_verify | write | sweep | pthread_io | guide_read | guide_array) # the library's examples
		check_chain "$tag: CQ poll: invalidate, then ONE 16-byte system-scope load" "$dis" 1 "${INV[@]}" "$LD16" ;;
	esac
	if [ "$name" = pthread_io ]; then
		check_count "$tag: per-thread API: CQ batch poll, 8 system-scope 16-byte CQE loads" "$dis" 8 "$LD16"

		check_chain_min "$tag: per-thread API: SQ and CQ doorbells both through the fenced store" \
			"$dis" 2 1 "${db[@]}"
		check_count "$tag: per-thread API: SQE as 4 x 16-byte stores" "$dis" 4 '^global_store_(dwordx4|b128) '
		check_present "$tag: per-thread API: 64-bit ticket add" "$dis" '^(global|flat)_atomic_add_(x2|u64) '
		check_present "$tag: per-thread API: lock CAS" "$dis" '^(global|flat)_atomic_cmpswap(_b32)? '
	fi
	check_absent "$tag: no shader-cycle clock (s_memtime, SHADER_CYCLES)" "$dis" "$NO_CYCLES"
done

echo "KTAP version 1"
echo "1..$n"
for l in "${lines[@]}"; do echo "$l"; done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
