#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR MIT
#
# isa_check.sh - prove the fences are really in the code objects.
#
# A chip-macro gate (__gfx1101__) compiled for gfx11-generic dropped the
# RDNA doorbell fence without a warning; only the disassembly showed it. So
# every built object is disassembled and each family's required instruction
# sequences are matched in order. KTAP out; exit 1 if any check fails.
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
		check_present "$tag: CQ poll ld.acquire.sys.u32" "$dis" '^ld\.acquire\.sys\.u32 '
		check_present "$tag: wall clock %globaltimer" "$dis" '%globaltimer'
		if [ "${name%.ptx}" = pthread_io ]; then
			check_chain_min "$tag: per-thread API: SQ and CQ doorbells both fence.sc.sys; st.volatile/st.mmio.relaxed.sys" \
				"$dis" 2 1 '^fence\.sc\.sys;$' '^st\.(volatile|mmio\.relaxed\.sys)\.u32 \['
			check_count "$tag: per-thread API: SQE as 4 x 16-byte stores" "$dis" 4 '^st(\.global)?\.v2\.u64 '
			check_present "$tag: per-thread API: 64-bit ticket add" "$dis" '^atom(\.global)?\.relaxed\.gpu(\.global)?\.add\.u64 '
			check_present "$tag: per-thread API: lock CAS with acquire" "$dis" '^atom(\.global)?\.acquire\.gpu(\.global)?\.cas\.b32 '
			check_present "$tag: per-thread API: ring re-check fence.sc.gpu" "$dis" '^fence\.sc\.gpu;$'
			check_present "$tag: per-thread API: warp reaper polls ld.relaxed.sys.u32" "$dis" '^ld\.relaxed\.sys\.u32 '
			check_present "$tag: per-thread API: warp reaper agrees by vote.sync.ballot" "$dis" '^vote\.sync\.ballot\.b32 '
			check_present "$tag: per-thread API: one 16-byte CQE load" "$dis" '^ld\.volatile\.v4\.u32 '
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

	case $target in
	gfx10* | gfx11*)
		check_chain "$tag: doorbell drain; global_store glc slc dlc; drain; buffer_gl1_inv; buffer_gl0_inv" \
			"$dis" 1 "$WAIT_ALL" "$WAIT_VS" \
			'^global_store_(dword|b32) .* glc slc dlc$' \
			"$WAIT_ALL" "$WAIT_VS" '^buffer_gl1_inv$' '^buffer_gl0_inv$'
		check_chain "$tag: CQ poll buffer_gl1_inv; buffer_gl0_inv; global_load glc slc dlc" \
			"$dis" 1 '^buffer_gl1_inv$' '^buffer_gl0_inv$' \
			'^global_load_(dword|b32) .* glc slc dlc$'
		case $target in
		gfx10*) clk="^s_memrealtime " clkname=s_memrealtime ;;
		*) clk="^s_sendmsg_rtn_b64 .*MSG_RTN_GET_REALTIME" clkname="s_sendmsg_rtn_b64 MSG_RTN_GET_REALTIME" ;;
		esac
		check_present "$tag: wall clock ${clkname}" "$dis" "$clk"
		;;
	gfx12*)
		check_chain "$tag: doorbell global_wb scope:SCOPE_SYS; store scope:SCOPE_SYS; global_inv scope:SCOPE_SYS" \
			"$dis" 4 '^global_wb scope:SCOPE_SYS$' \
			'^global_store_b32 .*scope:SCOPE_SYS$' '^global_inv scope:SCOPE_SYS$'
		check_chain "$tag: CQ poll global_inv scope:SCOPE_SYS; global_load scope:SCOPE_SYS" \
			"$dis" 2 '^global_inv scope:SCOPE_SYS$' '^global_load_b32 .*scope:SCOPE_SYS$'
		check_present "$tag: wall clock s_sendmsg_rtn_b64 MSG_RTN_GET_REALTIME" \
			"$dis" '^s_sendmsg_rtn_b64 .*MSG_RTN_GET_REALTIME'
		;;
	gfx94*)
		check_chain "$tag: doorbell buffer_wbl2 sc0 sc1; global_store sc0 sc1; buffer_inv sc0 sc1" \
			"$dis" 4 '^buffer_wbl2 sc0 sc1$' '^global_store_dword .* sc0 sc1$' \
			'^buffer_inv sc0 sc1$'
		check_chain "$tag: CQ poll buffer_inv sc0 sc1; global_load sc0 sc1" \
			"$dis" 2 '^buffer_inv sc0 sc1$' '^global_load_dword .* sc0 sc1$'
		check_present "$tag: wall clock s_memrealtime" "$dis" '^s_memrealtime '
		;;
	gfx9*)
		check_chain "$tag: doorbell buffer_wbl2; global_store; buffer_invl2; buffer_wbinvl1_vol" \
			"$dis" 4 '^buffer_wbl2$' '^global_store_dword ' '^buffer_invl2$' \
			'^buffer_wbinvl1_vol$'
		check_chain "$tag: CQ poll buffer_invl2; buffer_wbinvl1_vol; global_load glc" \
			"$dis" 2 '^buffer_invl2$' '^buffer_wbinvl1_vol$' '^global_load_dword .* glc$'
		check_present "$tag: wall clock s_memrealtime" "$dis" '^s_memrealtime '
		;;
	*)
		report 1 "$tag: family" "no ISA rules for target $target: add them before shipping it"
		continue
		;;
	esac
	if [ "$name" = pthread_io ]; then
		case $target in
		gfx10* | gfx11*) db=("$WAIT_ALL" "$WAIT_VS" '^global_store_(dword|b32) .* glc slc dlc$' "$WAIT_ALL" "$WAIT_VS" '^buffer_gl1_inv$' '^buffer_gl0_inv$') gap=1 ;;
		gfx12*) db=('^global_wb scope:SCOPE_SYS$' '^global_store_b32 .*scope:SCOPE_SYS$' '^global_inv scope:SCOPE_SYS$') gap=4 ;;
		gfx94*) db=('^buffer_wbl2 sc0 sc1$' '^global_store_dword .* sc0 sc1$' '^buffer_inv sc0 sc1$') gap=4 ;;
		*) db=('^buffer_wbl2$' '^global_store_dword ' '^buffer_invl2$' '^buffer_wbinvl1_vol$') gap=4 ;;
		esac
		case $target in
		gfx10* | gfx11*) bl='^global_load_(dword|b32) .* glc slc dlc$' ;;
		gfx12*) bl='^global_load_b32 .*scope:SCOPE_SYS$' ;;
		gfx94*) bl='^global_load_dword .* sc0 sc1$' ;;
		*) bl='^global_load_dword .* glc$' ;;
		esac
		check_count "$tag: per-thread API: CQ batch poll, 8 system-scope loads" "$dis" 9 "$bl"
		check_present "$tag: per-thread API: one 16-byte CQE load" "$dis" '^global_load_(dwordx4|b128) '

		check_chain_min "$tag: per-thread API: SQ and CQ doorbells both through the fenced store" \
			"$dis" 2 "$gap" "${db[@]}"
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
