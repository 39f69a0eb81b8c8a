#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/dkms/debian-root.sh: build (once) or reuse a Debian trixie root that
# README.md's install lines built: a fresh trixie (debootstrap minbase, plus
# the initramfs-tools a bootable image has), trixie and trixie-backports in
# its apt sources, then the README's `apt install` lines run as written, in
# order (tests/docs/readme_install.py extracts them; their KTAP results are
# kept in the root, .readme-apt, for tests/dkms/debian-stock.sh to report).
# After them only what the test itself needs and the README leaves to the
# reader: trixie's cargo (the stand-in for rustup's, see readme_install.py)
# and ca-certificates (crates.io over https). Prints the root's path on the
# last line; .krel in the root is the kernel release the README's
# linux-headers-amd64 brought (its vmlinuz in /boot, its modules in
# /lib/modules).
#
# Cached outside the repo in $GPUNVME_CACHE/trixie/root-KEY (default
# /var/cache/gpunvme); KEY hashes the recipe version, the README's apt lines
# and the test's own packages, so a changed README line or recipe builds a
# new root. A root is built in a temp dir and renamed only when complete; one
# build at a time (flock, with a deadline); a second caller waits, then
# reuses it.
# The archive is the one this machine's apt sources name (tests/deps.sh's
# debian_mirror), suites trixie and trixie-backports.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
say() { echo "debian-root: $*" >&2; }
die() { say "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot)"

CACHE=${GPUNVME_CACHE:-/var/cache/gpunvme}
RECIPE=2
# The image before the README: minbase has no initramfs generator, which
# every bootable image has (without one, apt would pick dracut for the
# README's linux-image-amd64).
BASE=(initramfs-tools)
# After the README: the test's own (see the header).
EXTRA=(cargo ca-certificates)
command -v python3 >/dev/null || die "python3 not found (make deps)"
records=$(python3 "$ROOT/tests/docs/readme_install.py" "$ROOT/README.md") ||
    die "tests/docs/readme_install.py could not read README.md's install blocks"
mapfile -t apt_lines < <(awk -F'\t' '$1 == "apt" { print $3 }' <<<"$records")
[ ${#apt_lines[@]} -gt 0 ] || die "no apt line in README.md's install block"
key=$(printf '%s\n' "$RECIPE" "${BASE[@]}" "${apt_lines[@]}" "${EXTRA[@]}" | sha256sum | cut -c1-16)
TD=$CACHE/trixie
R=$TD/root-$key
mkdir -p "$TD"

if [ -f "$R/.complete" ]; then
    say "reusing $R"; echo "$R"; exit 0
fi
exec 8>"$TD/.lock"
flock -w 3600 8 || die "another build has held $TD/.lock for an hour"
if [ -f "$R/.complete" ]; then
    say "reusing $R (built while we waited)"; echo "$R"; exit 0
fi

command -v debootstrap >/dev/null || die "debootstrap not installed (make deps, or apt-get install debootstrap)"
eval "$(sed -n '/^debian_mirror() {/,/^}/p' "$ROOT/tests/deps.sh")"
mirror=$(debian_mirror) || die "no Debian archive in this machine's apt sources"

tmp=$TD/build-$key
[ -n "$key" ] && [ "$tmp" != / ] || die "no cache key"
mounts=()
cleanup() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
start=$SECONDS
# An interrupted build resumes after its last completed stage
# (.stage-base: debootstrap done; .stage-readme: the README's lines ran).
if [ ! -f "$tmp/.stage-base" ]; then
    rm -rf "$tmp"
    say "debootstrap --variant=minbase --include=${BASE[*]} trixie into $tmp"
    debootstrap --variant=minbase --include="$(IFS=,; echo "${BASE[*]}")" trixie "$tmp" "$mirror" \
        >"$TD/debootstrap.log" 2>&1 ||
        { tail -n 30 "$TD/debootstrap.log" >&2; die "debootstrap failed (log: $TD/debootstrap.log)"; }
    touch "$tmp/.stage-base"
fi
[ -d "$tmp/etc/apt" ] || die "$tmp is not a debootstrapped root"

# What the README presupposes: "On Debian trixie, with trixie-backports in
# your apt sources, as root". Nothing pins a package: the README's lines
# choose (-t trixie-backports for the kernel, trixie's default for the rest).
printf 'deb %s trixie main\ndeb %s trixie-backports main\n' "$mirror" "$mirror" >"$tmp/etc/apt/sources.list"
# No one at a terminal answers apt's "Do you want to continue?".
echo 'APT::Get::Assume-Yes "true";' >"$tmp/etc/apt/apt.conf.d/90gpunvme-readme-test"
mount -t proc proc "$tmp/proc" && mounts+=("$tmp/proc")
mount --bind /dev "$tmp/dev" && mounts+=("$tmp/dev")
in_root() { chroot "$tmp" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
if [ ! -f "$tmp/.stage-readme" ]; then
    : >"$TD/apt.log"
    say "apt-get update (the sources just written)"
    in_root apt-get update -q >>"$TD/apt.log" 2>&1 ||
        { tail -n 30 "$TD/apt.log" >&2; die "apt-get update in the trixie root failed (log: $TD/apt.log)"; }
    # One line of .readme-apt a README line: exit status, seconds, the line.
    : >"$tmp/.readme-apt"
    for line in "${apt_lines[@]}"; do
        say "README: $line"
        s=$SECONDS
        echo "+ $line" >>"$TD/apt.log"
        rc=0; in_root sh -c "cd /root && $line" >>"$TD/apt.log" 2>&1 || rc=$?
        printf '%s\t%s\t%s\n' "$rc" "$((SECONDS - s))" "$line" >>"$tmp/.readme-apt"
        [ "$rc" = 0 ] || { tail -n 30 "$TD/apt.log" >&2; die "README's '$line' failed in the fresh root, exit $rc (log: $TD/apt.log)"; }
    done
    say "the test's own: apt-get install --no-install-recommends ${EXTRA[*]}"
    in_root apt-get install -y -q --no-install-recommends "${EXTRA[@]}" >>"$TD/apt.log" 2>&1 ||
        { tail -n 30 "$TD/apt.log" >&2; die "apt-get install ${EXTRA[*]} failed (log: $TD/apt.log)"; }
    in_root apt-get clean
    date -u '+%Y-%m-%d %H:%M UTC' >"$tmp/.readme-apt-date"
    touch "$tmp/.stage-readme"
fi
# The kernel the README's linux-headers-amd64 brought.
KREL=$(in_root dpkg-query -W -f='${Depends}' linux-headers-amd64 | tr ',' '\n' |
       sed -nE 's/^ *linux-headers-([^ ]+-amd64)( .*)?$/\1/p' | head -n1)
[ -n "$KREL" ] || die "cannot tell the kernel release from linux-headers-amd64's Depends"
[ -d "$tmp/usr/src/linux-headers-$KREL" ] || die "linux-headers-$KREL not installed"
in_root dpkg-query -W "linux-image-$KREL" >/dev/null 2>&1 || die "linux-image-$KREL not installed"
# Where 7.3.4's packages put them: usr/lib/modules/<release>/{vmlinuz,kernel}
# (older ones: boot/vmlinuz-<release>); /lib is usr/lib in trixie.
vmlinuz=$(cd "$tmp" && ls "boot/vmlinuz-$KREL" "usr/lib/modules/$KREL/vmlinuz" 2>/dev/null | head -n1 || true)
[ -n "$vmlinuz" ] && [ -d "$tmp/usr/lib/modules/$KREL/kernel" ] || die "no vmlinuz or modules of linux-image-$KREL"
echo "$KREL" >"$tmp/.krel"
in_root dpkg-query -W rustc rust-src bindgen dkms gcc-14 cargo linux-image-amd64 linux-headers-amd64 \
    "linux-image-$KREL" "linux-headers-$KREL" linux-source-7.3 >"$tmp/.versions"
sed 's/^/debian-root: /' "$tmp/.versions" >&2
cleanup; mounts=()
rm -f "$tmp"/.stage-*
touch "$tmp/.complete"
mv "$tmp" "$R"
say "built $R in $((SECONDS - start))s"
echo "$R"
