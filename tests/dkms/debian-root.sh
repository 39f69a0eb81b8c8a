#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/dkms/debian-root.sh: build (once) or reuse a Debian trixie build root
# holding what a user of Debian's stock 7.3 kernel has: trixie's rustc,
# rust-src, bindgen, dkms and gcc-14, the kernel headers and linux-source-7.3
# from trixie-backports, and, unpacked beside them (not installed: no
# initramfs is needed), the kernel image package for its vmlinuz and modules.
# Prints the root's path on the last line.
#
# Cached outside the repo in $GPUNVME_CACHE/trixie/root-KEY (default
# /var/cache/gpunvme); KEY hashes the recipe version, the kernel release and
# the package list, so a changed recipe builds a new root. A root is built in
# a temp dir and renamed only when complete; one build at a time (flock, with
# a deadline); a second caller waits, then reuses it.
#   DEBIAN_KREL   kernel release (default 7.3.4+deb13-amd64)
# The archive is the one this machine's apt sources name (tests/deps.sh's
# debian_mirror), suites trixie and trixie-backports.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
say() { echo "debian-root: $*" >&2; }
die() { say "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot)"

CACHE=${GPUNVME_CACHE:-/var/cache/gpunvme}
KREL=${DEBIAN_KREL:-7.3.4+deb13-amd64}
RECIPE=1
# The toolchain comes from trixie main (the kernel was built with exactly
# these: rustc 1.85.1, bindgen 0.71.1, gcc-14); trixie-backports also carries
# newer rustc, so the preferences file below pins the Rust packages to trixie.
PKGS=(rustc rust-src bindgen libclang-dev dkms gcc-14 make flex bison bc libelf-dev libssl-dev
      dwarves kmod xz-utils python3 openssl "linux-headers-$KREL" linux-source-7.3)
key=$(printf '%s\n' "$RECIPE" "$KREL" "${PKGS[@]}" | sha256sum | cut -c1-16)
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
mounts=()
cleanup() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
start=$SECONDS
# An interrupted build resumes after its last completed stage
# (.stage-base: debootstrap done; .stage-pkgs: packages installed).
if [ ! -f "$tmp/.stage-base" ]; then
    rm -rf "$tmp"
    say "debootstrap --variant=minbase trixie into $tmp"
    debootstrap --variant=minbase trixie "$tmp" "$mirror" >"$TD/debootstrap.log" 2>&1 ||
        { tail -n 30 "$TD/debootstrap.log" >&2; die "debootstrap failed (log: $TD/debootstrap.log)"; }
    touch "$tmp/.stage-base"
fi
[ -d "$tmp/etc/apt" ] || die "$tmp is not a debootstrapped root"

cat >"$tmp/etc/apt/sources.list" <<EOF
deb $mirror trixie main
deb $mirror trixie-backports main
EOF
cat >"$tmp/etc/apt/preferences.d/gpunvme-toolchain" <<'EOF'
# Debian's 7.3 kernel was built by trixie's own rustc 1.85.1 and bindgen
# 0.71.1; trixie-backports has newer rustc, which cannot read its crates.
Package: rustc rust-src cargo libstd-rust-* bindgen
Pin: release n=trixie
Pin-Priority: 990
EOF
mount -t proc proc "$tmp/proc"; mounts+=("$tmp/proc")
mount --bind /dev "$tmp/dev"; mounts+=("$tmp/dev")
in_root() { chroot "$tmp" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
if [ ! -f "$tmp/.stage-pkgs" ]; then
    say "apt-get install ${PKGS[*]}"
    { in_root apt-get update -q &&
      in_root apt-get install -y -q --no-install-recommends "${PKGS[@]}"; } >"$TD/apt.log" 2>&1 ||
        { tail -n 30 "$TD/apt.log" >&2; die "apt in the trixie root failed (log: $TD/apt.log)"; }
    touch "$tmp/.stage-pkgs"
fi
# The kernel itself is unpacked, not installed (no initramfs is needed): the
# image package and the packages with its vmlinuz and modules (7.3.4's
# linux-image-* depends on linux-binary-* and linux-modules-*).
imgpkgs=("linux-image-$KREL")
imgpkgs+=($(in_root apt-cache show "linux-image-$KREL" | sed -n 's/^Depends: //p' | head -n1 |
            tr ',' '\n' | sed -nE 's/^ *(linux-(binary|modules)-[^ ]+).*/\1/p'))
say "unpacking ${imgpkgs[*]} into /opt/linux-image"
rm -rf "$tmp/opt/linux-image"; mkdir -p "$tmp/opt/linux-image"; chmod 777 "$tmp/opt/linux-image"
{ in_root sh -c 'cd /opt/linux-image && apt-get download "$@" && for d in *.deb; do dpkg-deb -x "$d" . || exit 1; done && rm ./*.deb' sh "${imgpkgs[@]}" &&
  in_root apt-get clean; } >>"$TD/apt.log" 2>&1 ||
    { tail -n 30 "$TD/apt.log" >&2; die "unpacking the kernel image failed (log: $TD/apt.log)"; }
# Where 7.3.4's packages put them: usr/lib/modules/<release>/{vmlinuz,kernel}
# (older ones: boot/vmlinuz-<release>, lib/modules/<release>/kernel).
img=$tmp/opt/linux-image
mdir=$(ls -d "$img"/usr/lib/modules/"$KREL" "$img"/lib/modules/"$KREL" 2>/dev/null | head -n1 || true)
vmlinuz=$(ls "$img/boot/vmlinuz-$KREL" "$mdir/vmlinuz" 2>/dev/null | head -n1 || true)
[ -n "$vmlinuz" ] && [ -d "$mdir/kernel" ] || die "no vmlinuz or modules in ${imgpkgs[*]}"
ln -sfn "${vmlinuz#"$tmp"}" "$img/vmlinuz"; ln -sfn "${mdir#"$tmp"}" "$img/modules"
[ -d "$tmp/usr/src/linux-headers-$KREL" ] || die "linux-headers-$KREL not installed"
in_root dpkg-query -W rustc rust-src bindgen dkms gcc-14 "linux-headers-$KREL" linux-source-7.3 >"$tmp/.versions"
in_root apt-cache show "${imgpkgs[@]}" | awk '/^Package:/ { p = $2 } /^Version:/ { print p "\t" $2 " (unpacked)" }' >>"$tmp/.versions"
sed 's/^/debian-root: /' "$tmp/.versions" >&2
cleanup; mounts=()
rm -f "$tmp"/.stage-*
touch "$tmp/.complete"
mv "$tmp" "$R"
say "built $R in $((SECONDS - start))s"
echo "$R"
