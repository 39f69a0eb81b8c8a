#!/usr/bin/env bash
# make deps: install every build and test dependency on Debian bookworm (root).
# Idempotent: each step checks before it acts, so a second run takes seconds.
set -euo pipefail
export PATH="$HOME/.cargo/bin:$PATH"

CACHE=${GPUNVME_CACHE:-/var/cache/gpunvme}
mkdir -p "$CACHE"
log() { printf 'deps: %s\n' "$*"; }

# ---- Debian packages -------------------------------------------------------
PKGS=(build-essential gcc-12 flex bison bc libelf-dev libssl-dev cpio kmod
      libclang-19-dev clang-19 lld-19 llvm-19 qemu-system-x86 qemu-utils busybox-static
      python3 xz-utils zstd dkms ca-certificates)
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
if ! command -v bindgen >/dev/null 2>&1; then
    log "installing bindgen-cli"
    cargo install --locked bindgen-cli
fi

# ---- Linux 7.3 source from Debian's trixie-backports ----------------------
# A private apt configuration: the machine's own sources stay untouched.
SRC_DIR="$CACHE/src"
if ! ls -d "$SRC_DIR"/linux-source-7.3* >/dev/null 2>&1; then
    log "fetching linux-source-7.3"
    APT="$CACHE/apt"
    mkdir -p "$APT/lists/partial" "$APT/archives/partial" "$SRC_DIR"
    echo "deb http://deb.debian.org/debian trixie-backports main" > "$APT/sources.list"
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
