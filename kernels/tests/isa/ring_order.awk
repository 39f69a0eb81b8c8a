# SPDX-License-Identifier: GPL-2.0 OR MIT
#
# ring_order.awk - where the release and acquire sites are, on the control
# flow graph of each function of a compiler assembly file (AMDGPU .s).
#
# fence.h and queue.h mark their sequences with comments that survive
# into the assembly: "; gpunvme:sqe" (SQE stores follow), "release",
# "doorbell sq", "doorbell cq", "doorbell" (no ring named), "poll" (a CQ
# poll when its block loads 16 bytes; else the 32-bit stop-flag poll) and
# "acquire". Per function, on the graph of its basic blocks (labels,
# s_branch, s_cbranch_*, s_endpgm, s_setpc_b64), it finds:
#   unreleased  SQ doorbells that some path reaches from an SQE store
#               without passing a release site (a may-analysis: the SQEs
#               another lane stored are out only through that lane's own
#               release, never through the ringer's);
#   unacquired  CQ polls from which no path reaches an acquire site before
#               the next CQ poll or the end of the function (the hit has
#               no acquire after it);
#   badsqe      SQE markers not followed by 4 16-byte stores before the
#               next inline assembly or the end of their block.
# Exec masking: a masked-off lane runs a block without its stores taking
# effect; the graph's edges (s_cbranch_execz skips included) are a
# superset of every lane's paths, so a may-analysis on them is safe.
#
# Out, one line per function:
#   fn NAME sqe N release N dbsq N dbcq N dbnone N cqpoll N acquire N \
#       unreleased L,L unacquired L,L badsqe L,L
# (L: .s line numbers; "-" when none).

function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); gsub(/[ \t]+/, " ", s); return s }

function new_block(name) {
	nb++
	bname[nb] = name
	if (name != "") bid[name] = nb
	nev[nb] = 0
	nsucc[nb] = 0
	cur = nb
}

function add_succ(b, name) { nsucc[b]++; succname[b, nsucc[b]] = name }

function add_event(kind, line) {
	nev[cur]++
	ev[cur, nev[cur]] = kind
	evline[cur, nev[cur]] = line
	cnt[kind]++
}

function sqe_close(line) {
	if (sqe_need > 0) badsqe = badsqe (badsqe == "" ? "" : ",") sqe_at
	sqe_need = 0
}

function list(s) { return s == "" ? "-" : s }

function finish_fn(   b, i, j, s, changed, p, k, q, head, tail, seen, found, start) {
	if (fn == "") return
	sqe_close(0)
	# Resolve successors; a block without a terminator falls through.
	for (b = 1; b <= nb; b++)
		for (i = 1; i <= nsucc[b]; i++) {
			s = succname[b, i]
			succ[b, i] = s == "\001next" ? (b < nb ? b + 1 : 0) : (s in bid ? bid[s] : 0)
		}
	# May-analysis: P = an SQE store not yet released on some path.
	for (b = 1; b <= nb; b++) { pin[b] = 0; pout[b] = 0 }
	do {
		changed = 0
		for (b = 1; b <= nb; b++) {
			p = pin[b]
			for (i = 1; i <= nev[b]; i++) {
				if (ev[b, i] == "sqe") p = 1
				else if (ev[b, i] == "release") p = 0
			}
			if (p != pout[b]) { pout[b] = p; changed = 1 }
			for (i = 1; i <= nsucc[b]; i++) {
				s = succ[b, i]
				if (s && p && !pin[s]) { pin[s] = 1; changed = 1 }
			}
		}
	} while (changed)
	unrel = ""
	for (b = 1; b <= nb; b++) {
		p = pin[b]
		for (i = 1; i <= nev[b]; i++) {
			if (ev[b, i] == "sqe") p = 1
			else if (ev[b, i] == "release") p = 0
			else if (ev[b, i] == "dbsq" && p)
				unrel = unrel (unrel == "" ? "" : ",") evline[b, i]
		}
	}
	# Each CQ poll: does some path reach an acquire before a CQ poll?
	unacq = ""
	for (b = 1; b <= nb; b++)
		for (i = 1; i <= nev[b]; i++) {
			if (ev[b, i] != "cqpoll") continue
			found = 0
			for (j = i + 1; j <= nev[b]; j++) {
				if (ev[b, j] == "acquire") { found = 1; break }
				if (ev[b, j] == "cqpoll") break
			}
			if (!found && j > nev[b]) {
				# Breadth-first over the successors, each block from its start.
				split("", seen)
				head = 1; tail = 0
				for (k = 1; k <= nsucc[b]; k++)
					if (succ[b, k]) { q[++tail] = succ[b, k] }
				while (head <= tail && !found) {
					start = q[head++]
					if (start in seen) continue
					seen[start] = 1
					stop = 0
					for (j = 1; j <= nev[start]; j++) {
						if (ev[start, j] == "acquire") { found = 1; break }
						if (ev[start, j] == "cqpoll") { stop = 1; break }
					}
					if (found || stop) continue
					for (k = 1; k <= nsucc[start]; k++)
						if (succ[start, k] && !(succ[start, k] in seen)) q[++tail] = succ[start, k]
				}
			}
			if (!found) unacq = unacq (unacq == "" ? "" : ",") evline[b, i]
		}
	printf "fn %s sqe %d release %d dbsq %d dbcq %d dbnone %d cqpoll %d acquire %d unreleased %s unacquired %s badsqe %s\n",
		fn, cnt["sqe"], cnt["release"], cnt["dbsq"], cnt["dbcq"], cnt["dbnone"],
		cnt["cqpoll"], cnt["acquire"], list(unrel), list(unacq), list(badsqe)
	fn = ""
}

function start_fn(name) {
	finish_fn()
	fn = name
	nb = 0
	split("", bid); split("", cnt); split("", ev); split("", evline)
	split("", succname); split("", succ); split("", nsucc); split("", nev)
	badsqe = ""; sqe_need = 0; inasm = 0
	new_block("")
}

{ t = trim($0) }

# A function: a label declared ".type NAME,@function"; its end; its blocks.
t ~ /^\.type [A-Za-z_][A-Za-z0-9_.$]*, *@function$/ { name = t; sub(/^\.type /, "", name); sub(/,.*/, "", name); isfn[name] = 1; next }
t ~ /^[A-Za-z_][A-Za-z0-9_.$]*:/ { name = t; sub(/:.*/, "", name); if (name in isfn) { start_fn(name); next } }
fn != "" && t ~ /^\.Lfunc_end[0-9]*:/ { finish_fn(); next }
fn == "" { next }
t ~ /^\.LBB[0-9_]+:/ {
	name = t; sub(/:.*/, "", name)
	sqe_close(NR)
	# Whatever block precedes falls through (after a terminator it is
	# an empty, unreachable one).
	prev = cur
	new_block(name)
	add_succ(prev, "\001next")
	next
}

t == ";;#ASMSTART" { sqe_close(NR); inasm = 1; akind = ""; a16 = 0; aline = NR; next }
t == ";;#ASMEND" {
	inasm = 0
	if (akind == "sqe") { add_event("sqe", aline); sqe_need = 4; sqe_at = aline }
	else if (akind == "release") add_event("release", aline)
	else if (akind == "acquire") add_event("acquire", aline)
	else if (akind == "doorbell sq") add_event("dbsq", aline)
	else if (akind == "doorbell cq") add_event("dbcq", aline)
	else if (akind == "doorbell") add_event("dbnone", aline)
	else if (akind == "poll" && a16) add_event("cqpoll", aline)
	next
}
inasm && t ~ /^; gpunvme:/ { akind = substr(t, 11); aline = NR; next }
inasm && t ~ /^global_load_(dwordx4|b128) / { a16 = 1 }
inasm { next }
t ~ /^;/ || t ~ /^\./ || t == "" { next }

# An instruction outside inline assembly. A terminator ends its block; the
# block after it (unnamed until a label) is the fall-through successor.
{
	if (sqe_need > 0 && t ~ /^global_store_(dwordx4|b128) /) sqe_need--
	op = t; sub(/ .*/, "", op)
	if (op == "s_branch") {
		sqe_close(NR)
		add_succ(cur, $2)
		new_block("")
	} else if (op ~ /^s_cbranch_/) {
		sqe_close(NR)
		add_succ(cur, $2)
		add_succ(cur, "\001next")
		new_block("")
	} else if (op == "s_endpgm" || op == "s_setpc_b64") {
		sqe_close(NR)
		new_block("")
	}
}

END { finish_fn() }
