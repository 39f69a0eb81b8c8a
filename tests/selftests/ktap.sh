# SPDX-License-Identifier: GPL-2.0-only
# KTAP output for shell selftests (sourced). Usage:
#   ktap_plan N; ktap_check "name" cmd args...; ktap_done
__ktap_n=0 __ktap_fail=0
ktap_plan() { echo "TAP version 13"; echo "1..$1"; }
ktap_ok() { __ktap_n=$((__ktap_n + 1)); echo "ok $__ktap_n $1"; }
ktap_not_ok() { __ktap_n=$((__ktap_n + 1)); __ktap_fail=$((__ktap_fail + 1)); echo "not ok $__ktap_n $1"; }
ktap_diag() { echo "# $*"; }
# Run a command; its output becomes diagnostics; its status the result.
ktap_check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then ktap_ok "$name"; else ktap_not_ok "$name"; fi
	[ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/# /'
	return 0
}
ktap_done() { echo "# Totals: pass:$((__ktap_n - __ktap_fail)) fail:$__ktap_fail"; [ "$__ktap_fail" = 0 ]; }
