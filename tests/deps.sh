#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# make deps: install every build and test dependency on Debian bookworm (root).
# Idempotent: each step checks before it acts, so a second run takes seconds.
set -euo pipefail
export PATH="$HOME/.cargo/bin:$PATH"

CACHE=${GPUNVME_CACHE:-/var/cache/gpunvme}
mkdir -p "$CACHE"
# Two `make` runs at once (make demo beside make check) take turns here.
exec 9>"$CACHE/.deps.lock"
flock -w 1800 9 || { echo "deps: another 'make deps' has held $CACHE/.deps.lock for 30 minutes" >&2; exit 1; }
log() { printf 'deps: %s\n' "$*"; }

# ---- Debian packages -------------------------------------------------------
PKGS=(build-essential gcc-12 flex bison bc libelf-dev libssl-dev cpio kmod
      libclang-19-dev clang-19 lld-19 llvm-19 qemu-system-x86 qemu-utils busybox-static
      python3 python3-venv xz-utils zstd dkms ca-certificates debootstrap
      fio python3-six   # fio: its fio_jsonplus_clat2csv reads the bench JSON in a test (needs six)
      iproute2)         # rdma: Soft-RoCE devices in the NVMe/RDMA VMs (rdma link add)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- Rust for the kernel: rust-src and bindgen ----------------------------
if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src'; then
    log "adding rust-src"
    rustup component add rust-src
fi
# The userspace crates' declared rust-version, for tests/userspace/lint.sh's
# MSRV build ("1.85" is toolchain 1.85.0; minimal profile, about 70 MB).
msrv=$(sed -n 's/^rust-version *= *"\([0-9.]*\)"/\1/p' "$(dirname "$0")/../userspace/Cargo.toml" | head -1)
case $msrv in *.*.*) ;; ?*) msrv=$msrv.0 ;; esac
if [ -n "$msrv" ] && ! rustup run "$msrv" rustc --version >/dev/null 2>&1; then
    log "installing the userspace MSRV toolchain $msrv"
    rustup toolchain install "$msrv" --profile minimal
fi
if ! command -v bindgen >/dev/null 2>&1; then
    log "installing bindgen-cli"
    cargo install --locked bindgen-cli
fi

# ---- Python: maturin, pytest and NumPy for the Python package --------------
# A virtual environment in the cache (Debian's python3 takes no pip installs
# of its own), from the index pip is configured with.
log "python environment: $(GPUNVME_CACHE=$CACHE bash "$(dirname "$0")/userspace/python_env.sh" | tail -n1)"

# The Debian archive this machine already uses (its own apt sources, one-line
# or deb822 format): the URI of an entry whose suite is a Debian release
# (not -security), so no archive host name is written into this project.
debian_mirror() {
    local f uri
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(awk '$1 == "deb" { for (i = 2; i < NF; i++) if ($i ~ /^[a-z]+:\/\// && $(i + 1) ~ /^(buster|bullseye|bookworm|trixie|forky|sid|stable|testing|unstable)(-updates|-backports)?$/) { print $i; exit } }' "$f")
        [ -n "$uri" ] && { echo "${uri%/}"; return 0; }
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(awk 'BEGIN { RS = ""; FS = "\n" }
                   /(^|\n)Types:[^\n]*deb/ && !/Suites:[^\n]*security/ && /Signed-By:[^\n]*debian-archive/ {
                       for (i = 1; i <= NF; i++) if ($i ~ /^URIs:/) { split($i, a, " "); print a[2]; exit } }' "$f")
        [ -n "$uri" ] && { echo "${uri%/}"; return 0; }
    done
    return 1
}

# ---- Linux 7.3 source from Debian's trixie-backports ----------------------
# A private apt configuration: the machine's own sources stay untouched.
SRC_DIR="$CACHE/src"
if ! ls -d "$SRC_DIR"/linux-source-7.3* >/dev/null 2>&1; then
    log "fetching linux-source-7.3"
    APT="$CACHE/apt"
    mkdir -p "$APT/lists/partial" "$APT/archives/partial" "$SRC_DIR"
    mirror=$(debian_mirror) || { echo "deps: no Debian archive in this machine's apt sources" >&2; exit 1; }
    echo "deb $mirror trixie-backports main" > "$APT/sources.list"
    apt_opts=(-o Dir::Etc::SourceList="$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o Dir::State::Lists="$APT/lists" -o Dir::Cache::Archives="$APT/archives"
              -o APT::Get::List-Cleanup=0)
    apt-get "${apt_opts[@]}" update -qq
    ver=$(apt-cache "${apt_opts[@]}" madison linux-source-7.3 | awk '{print $3; exit}')
    [ -n "$ver" ] || { echo "deps: linux-source-7.3 not found in trixie-backports" >&2; exit 1; }
    (cd "$APT" && apt-get "${apt_opts[@]}" download "linux-source-7.3=$ver")
    dpkg-deb -x "$APT"/linux-source-7.3_*.deb "$APT/x"
    tarball=$(ls "$APT"/x/usr/src/linux-source-7.3*.tar.* | head -1)
    tar -C "$SRC_DIR" -xf "$tarball"
    rm -rf "$APT/x" "$APT"/*.deb
fi
log "ok: $(ls -d "$SRC_DIR"/linux-source-7.3*)"
