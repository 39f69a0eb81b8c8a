#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR GPL-2.0-only
#
# guide_sync.sh - the programming guide (kernels/README.md) shows code as
# regions
#
#   <!-- include: PATH -->
#   ```LANG
#   ...the file at PATH (relative to kernels/), verbatim...
#   ```
#   <!-- end include -->
#
# and this check fails unless every region is its file byte for byte, and
# the guide's kernels (examples/guide_read.hip and guide_array.hip, which
# make kernels builds and hostrun runs) and their Rust launchers
# (gpunvme-gpu's examples/guide_read.rs and guide_array.rs, which cargo
# builds) are all shown. So the guide's code is the code that is built
# and run, and cannot rot.
#
# usage: guide_sync.sh [--update]   (--update rewrites the regions from the files)
# Last, it checks itself: a copy of the guide with one line of a region
# changed must fail.
# KTAP out; "N passed, N failed"; exit 1 on any failure.
set -u
kdir=$(cd "$(dirname "$0")/.." && pwd)
readme=${GUIDE_README:-$kdir/README.md}
required=(examples/guide_read.hip ../userspace/gpunvme-gpu/examples/guide_read.rs examples/guide_array.hip
	../userspace/gpunvme-gpu/examples/guide_array.rs)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ "${1:-}" = --update ]; then
	awk -v kdir="$kdir" '
		/^<!-- include: .* -->$/ {
			print; path = $3; getline fence; print fence
			f = kdir "/" path
			while ((getline l < f) > 0) print l
			close(f)
			skip = 1; next
		}
		skip && /^```$/ { skip = 0 }
		!skip { print }
	' "$readme" >"$tmp/README.md" && cp "$tmp/README.md" "$readme"
	echo "updated $readme"
	exit 0
fi

# Split the regions out: region N's path in $tmp/N.path, its text in $tmp/N.
awk -v out="$tmp" '
	/^<!-- include: .* -->$/ { n++; print $3 > (out "/" n ".path"); want_fence = 1; next }
	want_fence { want_fence = 0; if ($0 !~ /^```[a-z]*$/) { print "bad" > (out "/" n ".bad") } inside = 1; printf "" > (out "/" n); next }
	inside && /^```$/ { inside = 0; getline end; if (end != "<!-- end include -->") print "bad" > (out "/" n ".bad"); next }
	inside { print > (out "/" n) }
	END { print n + 0 > (out "/count") }
' "$readme"

n=0 pass=0 fail=0
lines=()
report() {
	n=$((n + 1))
	if [ "$1" = 0 ]; then pass=$((pass + 1)); lines+=("ok $n $2")
	else fail=$((fail + 1)); lines+=("not ok $n $2 # $3"); fi
}

count=$(cat "$tmp/count")
shown=()
for ((i = 1; i <= count; i++)); do
	path=$(cat "$tmp/$i.path")
	shown+=("$path")
	if [ -e "$tmp/$i.bad" ]; then
		report 1 "README.md region $i ($path) is well formed" "want <!-- include -->, a \`\`\` fence, the file, \`\`\`, <!-- end include -->"
	elif [ ! -f "$kdir/$path" ]; then
		report 1 "README.md shows $path verbatim" "no such file"
	elif cmp -s "$kdir/$path" "$tmp/$i"; then
		report 0 "README.md shows $path verbatim"
	else
		diff -u "$kdir/$path" "$tmp/$i" | head -20 | sed 's/^/# /' >"$tmp/diff"
		report 1 "README.md shows $path verbatim" "differs (tests/guide_sync.sh --update rewrites it)"
		while IFS= read -r l; do lines+=("$l"); done <"$tmp/diff"
	fi
done
for r in "${required[@]}"; do
	case " ${shown[*]} " in
	*" $r "*) report 0 "README.md shows $r" ;;
	*) report 1 "README.md shows $r" "no include region for it" ;;
	esac
done

if [ -z "${GUIDE_README:-}" ]; then
	sed '/^<!-- include: examples\/guide_read.hip -->$/,/^<!-- end include -->$/ s/pq_wait(q, ticket, &c)/pq_wait(q, ticket, nullptr)/' \
		"$readme" >"$tmp/changed.md"
	if cmp -s "$readme" "$tmp/changed.md"; then
		report 1 "self-test: a changed line in a region fails the check" "found no pq_wait() line to change"
	elif GUIDE_README=$tmp/changed.md "$0" >/dev/null; then
		report 1 "self-test: a changed line in a region fails the check" "the changed copy passed"
	else
		report 0 "self-test: a changed line in a region fails the check"
	fi
fi

echo "KTAP version 1"
echo "1..$n"
for l in "${lines[@]}"; do echo "$l"; done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
