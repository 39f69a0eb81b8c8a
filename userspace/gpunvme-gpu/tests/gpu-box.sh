#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR GPL-2.0-only
# Run gpunvme-gpu's GPU tests (tests/gpu_launch.rs) and `gpunvme probe` on a
# GPU machine that has the driver but no Rust toolchain.
#
#   here:        userspace/gpunvme-gpu/tests/gpu-box.sh prepare
#                  builds the test binary, the CLI and `make kernels`, and
#                  stages them in kernels/build/gpu-box/ (next to the code
#                  objects the tests load)
#   GPU machine: kernels/build/gpu-box/gpu-box.sh run [OUTDIR]
#                  runs them; logs to OUTDIR (default ./gpu-box-results)
#
# The staged binaries link glibc 2.34+; the stage carries this machine's
# loader and libc for hosts with an older one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

prepare() {
    local root=$here/../../..
    make -s -C "$root/kernels"
    (cd "$root/userspace" && cargo build -q --release -p gpunvme-cli)
    local bin
    bin=$(cd "$root/userspace" && cargo test -q --release -p gpunvme-gpu --test gpu_launch --no-run \
        --message-format=json 2>/dev/null | sed -nE 's/.*"executable":"([^"]+gpu_launch[^"]*)".*/\1/p' | tail -1)
    [ -x "$bin" ] || { echo "gpu-box: test binary not built" >&2; exit 1; }
    local stage=$root/kernels/build/gpu-box
    rm -rf "$stage" && mkdir -p "$stage/lib"
    cp "$bin" "$stage/gpu_launch"
    cp "$root/userspace/target/release/gpunvme" "$stage/"
    cp "$0" "$stage/gpu-box.sh"
    cp -L /lib64/ld-linux-x86-64.so.2 "$stage/"
    for l in libc.so.6 libm.so.6 libgcc_s.so.1; do cp -L "/lib/x86_64-linux-gnu/$l" "$stage/lib/"; done
    echo "staged in $stage (carry kernels/build to the GPU machine)"
}

run() {
    cd "$here"
    local out=${1:-$PWD/gpu-box-results}
    mkdir -p "$out"
    # Use the host's loader if it can run the binaries, else the staged one.
    local ld=()
    ./gpunvme --version >/dev/null 2>&1 || ld=(./ld-linux-x86-64.so.2 --library-path ./lib)
    { ldd --version | head -1; nvidia-smi -L 2>&1; uname -r; } >"$out/env.txt" 2>&1 || true
    # probe runs the round-trip self-test too (host-mapped memory: no
    # gpunvme module there), from the staged code objects.
    "${ld[@]}" ./gpunvme probe --code-objects "$here/.." >"$out/probe.txt" 2>&1 || true
    "${ld[@]}" ./gpunvme probe --code-objects "$here/.." -o json >"$out/probe.json" 2>&1 || true
    export GPUNVME_KERNELS_BUILD=$here/..
    local rc=0
    timeout 300 "${ld[@]}" ./gpu_launch --include-ignored --test-threads=1 --nocapture \
        >"$out/gpu_launch.log" 2>&1 || rc=$?
    tail -5 "$out/gpu_launch.log"
    return $rc
}

case ${1:-} in
prepare) prepare ;;
run) shift; run "$@" ;;
*) sed -n '2,13p' "$0"; exit 2 ;;
esac
