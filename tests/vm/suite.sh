#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The VM suite: the module, the CLI, the GPU stand-in, the device library run
# as host C++ (kernels/hostrun), every selftest, the Python package and the
# passthrough back end, in fifteen boots.
#  1. the default bench: one namespace of 512-byte blocks per controller,
#     IOMMU translating (strict); queue pairs are shared (validated) ones,
#     the trust-model and failure tests run, and owner mode is claimable;
#  2. a Zen CPU model, under which the stand-in reaches the real doorbell
#     (owner mode) by P2P;
#  3. a variant: the gpunvme controller gets a second namespace with 4 KiB
#     blocks; the identify, trust (namespace nodes), namespace and I/O tests
#     run again, and the disk images are checked on the host afterwards for
#     the patterns written;
#  4. owner mode: the generic queue-pair, dma-buf and CLI I/O tests again,
#     with raw queue pairs of the controller's owner (mode.env), and the
#     gpunvme crate's raw pair with its CQ in a dma-buf (a udmabuf standing
#     in for GPU memory; userspace/gpunvme/examples/cq_in_dmabuf.rs);
#  5. iommu=pt: the owner claim is refused (the log names the mode) while
#     shared mode works; the module is reloaded with allow_unsafe_no_iommu=1
#     and the claim works, tainting the kernel; last, lockdown is raised and
#     the claim is refused again;
#  6. nine controllers for eight device nodes: the ninth probe fails before
#     it touches its controller, and binds once a node is free; then the
#     device library's per-thread API on two controllers at once (hostrun),
#     and its array (array.h) over 1, 2 and 4 of them, shared and raw: every
#     element against the CLI's pattern, eviction, one command for a page
#     many threads want, a controller that stops answering, write-back
#     read through the kernel's nvme driver after unbind (hostrun);
#  7. bind safety (default kernel only): `gpunvme bind` refuses a disk the
#     kernel uses (mounts, /dev/root, swap, dm, openers, other namespaces);
#  8. SR-IOV (default kernel only): the PF keeps nvme.ko and a mounted ext4,
#     a VF is bound to gpunvme, written and verified, and handed back;
#  9. hot-unplug: the controller behind a pcie-root-port (run.sh --hotplug)
#     is removed with device_del while a shared pair has reads in flight
#     (on a second namespace QEMU throttles), a namespace file is open and
#     the stand-in holds imports of the pair's dma-bufs; then device_add,
#     bind and write/verify; on the debug kernel (kmemleak=on slub_debug=P)
#     kmemleak must first report a leak the stand-in makes on purpose, then
#     find none from gpunvme;
# 10. the fuzzer (tests/fuzz): seeded random call sequences from four
#     processes, 3 minutes on the debug kernel (KERNEL_VARIANT=debug, with
#     kmemleak=on), 30 s on the default one; then the controller must still
#     write and verify patterns, and both modules must unload. FUZZ_SEED
#     fixes the seed (default: from the clock; it is printed);
# 11. a namespace shared (nvme-subsys) with nvme.ko's controller, detached,
#     reformatted and attached again under an open shared pair;
# 12. the Python package (tests/vm/python.sh): its pytest suite with the
#     interpreter, NumPy and the wheel packed into the initramfs (host
#     buffers, udmabuf-backed dma-bufs, async and asyncio, a fork during
#     transfers, timeouts under a held relay, owner mode), then its
#     overhead bench;
# 13. the passthrough back end, no module (default kernel only): the
#     kernel controller's namespace gets a mounted ext4 partition and a
#     partition used through io_uring passthrough by the CLI and hostrun
#     (gpunvme_hostrun_pt), every byte checked; refusals (the mounted
#     partition, windows reaching into it, writes past the window); bench
#     beside the kernel's io_uring; fsck clean; then the same over NVMe/TCP
#     with nvmet on 127.0.0.1 in the same VM, the target stopped under a
#     bench (an error, not a hang) and back (reconnect);
# 14. (boots 14 and 15 at once, default kernel only) NVMe/TCP, then
#     NVMe/RDMA on Soft-RoCE (rdma_rxe on the link's NIC), between two VMs
#     on a QEMU socket network (tests/vm/fabrics2.sh): one runs nvmet, the
#     other the same checks, the outage and the reconnect asked over a
#     control port, once per transport.
# Expects `make module selftests userspace standin hostrun hostrun-pt fuzz
# python` to have run (make vm-test does).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$ROOT/gpunvme.ko" ] || { echo "suite: $ROOT/gpunvme.ko missing (make module)" >&2; exit 1; }
cli="$ROOT/userspace/target/release/gpunvme"
[ -x "$cli" ] || { echo "suite: $cli missing (make userspace)" >&2; exit 1; }
B="$ROOT/tests/selftests/build"
work=$(mktemp -d /tmp/gpunvme-suite.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0 skip=0

add() { # the closing "N passed, N failed[, N skipped]" line of a log
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$line" ]; then fail=$((fail + 1)); return; fi
    pass=$((pass + $(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line")))
    fail=$((fail + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")))
    grep -q skipped <<<"$line" && skip=$((skip + $(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$line")))
}

S="$ROOT/tests/standin"
[ -f "$S/gpunvme_standin.ko" ] || { echo "suite: $S/gpunvme_standin.ko missing (make standin)" >&2; exit 1; }
H="$ROOT/kernels/build/hostrun/gpunvme_hostrun"
[ -x "$H" ] || { echo "suite: $H missing (make hostrun)" >&2; exit 1; }
HPT="$ROOT/kernels/build/hostrun/gpunvme_hostrun_pt"
[ -x "$HPT" ] || { echo "suite: $HPT missing (make hostrun-pt)" >&2; exit 1; }
# e2fsprogs' mke2fs and e2fsck, util-linux's setpriv: busybox's cannot.
host_tool() { PATH=$PATH:/usr/sbin:/sbin command -v "$1" || echo "/usr/sbin/$1"; }

# The selftests every boot may run: the files directly in $B ($B/boot/
# holds scripts that change the kernel for the rest of their boot).
mapfile -t tests < <(find "$B" -maxdepth 1 -type f | sort)

# Programs the selftests use (gpunvme_bind_test.sh's helper), to /opt/gpunvme.
helpers=()
for h in "$B"/helpers/*; do [ -f "$h" ] && helpers+=(--file "$h"); done

echo "=== boot 1: default controllers, shared mode; the edu stand-in has no P2P path to the NVMe BAR here"
# Every selftest in one boot: on the debug kernel (KASAN, lockdep) that is
# about 10 minutes of TCG (a clean-clone run of 2026-12-03 reached the last
# tests at 585 s of run.sh's default 600), so it gets 20.
bash "$ROOT/tests/vm/run.sh" --timeout 1200 --file "$ROOT/gpunvme.ko" --file "$cli" --file "$S/gpunvme_standin.ko" "${helpers[@]}" "$@" -- \
    "$ROOT/tests/vm/vm-env.sh" "${tests[@]}" "$S"/build/* "$H" 2>&1 | tee "$work/boot1.log"
add "$work/boot1.log"

# A Zen CPU model lets p2pdma route through the (emulated) host bridge, so
# the stand-in can map the doorbell dma-buf through its vIOMMU and ring it.
echo "=== boot 2: Zen CPU model: the stand-in rings the doorbell and reads the CQ by peer DMA"
QEMU_EXTRA="${QEMU_EXTRA:-} -cpu max,family=23" \
bash "$ROOT/tests/vm/run.sh" --file "$ROOT/gpunvme.ko" --file "$S/gpunvme_standin.ko" "$@" -- \
    "$S/build/standin_doorbell_test" 2>&1 | tee "$work/boot2z.log"
add "$work/boot2z.log"

echo "=== boot 3: two namespaces (512 B and 4 KiB blocks), images checked on the host"
truncate -s 32M "$work/ns2.img"
printf 'EXPECT_NAMESPACES=2\nEXPECT_LBS_NS2=4096\n' > "$work/variant.env"
# The trust test before the namespace test: it writes namespace 1's last
# block, whose pattern the namespace test then writes for the image check.
QEMU_EXTRA="${QEMU_EXTRA:-} -drive file=$work/ns2.img,if=none,id=ns2,format=raw -device nvme-ns,drive=ns2,bus=gpunvme0,nsid=2,logical_block_size=4096,physical_block_size=4096" \
bash "$ROOT/tests/vm/run.sh" --keep-images "$work" --file "$ROOT/gpunvme.ko" --file "$cli" \
    --file "$work/variant.env:/opt/gpunvme/variant.env" "$@" -- \
    "$B/gpunvme_info_test" "$B/gpunvme_trust_test" "$B/gpunvme_ns_test.sh" 2>&1 | tee "$work/boot2.log"
add "$work/boot2.log"

# The VM is gone: what gpunvme wrote must be in the images, byte-exact.
check_image() { # name image lba count lba_size seed
    if cmp -s <("$cli" pattern --pattern "$6" --start-block "$3" --block-count "$4" --block-size "$5") \
              <(dd if="$2" bs="$5" skip="$3" count="$4" status=none); then
        echo "ok - host: $1"; pass=$((pass + 1))
    else
        echo "not ok - host: $1"; fail=$((fail + 1))
    fi
}
ns1_blocks=$(( $(stat -c %s "$work/gpunvme0.img") / 512 ))
ns2_blocks=$(( $(stat -c %s "$work/ns2.img") / 4096 ))
check_image "ns1 image holds the first-block pattern" "$work/gpunvme0.img" 0 8 512 101
check_image "ns1 image holds the last-block pattern" "$work/gpunvme0.img" $((ns1_blocks - 8)) 8 512 201
check_image "ns2 image (4 KiB LBAs) holds the first-block pattern" "$work/ns2.img" 0 8 4096 102
check_image "ns2 image holds the last-block pattern" "$work/ns2.img" $((ns2_blocks - 8)) 8 4096 202

echo "=== boot 4: owner mode: the queue-pair, dma-buf, race and CLI I/O tests with the owner's raw queue pairs; the Rust API's CQ in a dma-buf"
printf 'GPUNVME_TEST_QPAIR_MODE=owner\n' > "$work/mode.env"
cq_example="$ROOT/userspace/target/release/examples/cq_in_dmabuf"
[ -x "$cq_example" ] || { echo "suite: $cq_example missing (make userspace)" >&2; exit 1; }
bash "$ROOT/tests/vm/run.sh" --file "$ROOT/gpunvme.ko" --file "$cli" \
    --file "$work/mode.env:/opt/gpunvme/mode.env" "$@" -- \
    "$B/gpunvme_qpair_test" "$B/gpunvme_dmabuf_test" "$B/gpunvme_race_test" "$B/gpunvme_io_test.sh" "$cq_example" 2>&1 | tee "$work/boot4.log"
add "$work/boot4.log"

# Passthrough: the device is in an identity domain, so an owner could DMA
# anywhere. gpunvme_owner_test works out the expected answer from sysfs
# each time it runs; the wrappers reload the module with the waiver and
# raise lockdown (one-way, so last).
echo "=== boot 5: iommu=pt: owner claim refused, then waived (tainted), then refused under lockdown"
bash "$ROOT/tests/vm/run.sh" --append "iommu=pt" --file "$ROOT/gpunvme.ko" "$@" -- \
    "$B/gpunvme_owner_test" "$B/boot/gpunvme_waiver_test.sh" "$B/boot/gpunvme_lockdown_test.sh" \
    2>&1 | tee "$work/boot5.log"
add "$work/boot5.log"

# Eight device nodes, nine controllers: the ninth probe must fail before it
# touches its controller, and bind once a node is free.
echo "=== boot 6: nine controllers for gpunvme's eight device nodes"
extra=""
for i in 0 1 2 3 4 5 6 7; do
    truncate -s 16M "$work/extra$i.img"
    extra="$extra -drive file=$work/extra$i.img,if=none,id=extra$i,format=raw -device nvme,serial=extra$i,drive=extra$i,bus=pcie.0,addr=0x1$i.0"
done
# Then the device library's per-thread API on two of them at once, and its
# array over four of them (hostrun).
QEMU_EXTRA="${QEMU_EXTRA:-} $extra" \
bash "$ROOT/tests/vm/run.sh" --file "$ROOT/gpunvme.ko" --file "$cli" --file "$H" "$@" -- \
    "$B/boot/gpunvme_ninth_controller_test.sh" "$B/boot/gpunvme_two_controllers_hostrun.sh" \
    "$B/boot/gpunvme_array_hostrun.sh" 2>&1 | tee "$work/boot6.log"
add "$work/boot6.log"

# Bind safety: the kernel-driven controller gets partitions, file systems,
# swap and dm; every refusal is checked. On the debug kernel each mkfs/mount
# takes seconds (over 6 minutes in all) and nothing in the module is under
# test, so it runs on the default kernel only.
if [ "${KERNEL_VARIANT:-default}" = default ]; then
    echo "=== boot 7: gpunvme bind refuses a disk the kernel uses"
    bash "$ROOT/tests/vm/run.sh" --file "$ROOT/gpunvme.ko" --file "$cli" "${helpers[@]}" "$@" -- \
        "$B/boot/gpunvme_bind_test.sh" 2>&1 | tee "$work/boot7.log"
    add "$work/boot7.log"
else
    echo "=== boot 7 (bind safety) runs on the default kernel only"
fi

# SR-IOV: the PF keeps nvme.ko and a mounted ext4 while a VF is gpunvme's.
# Like boot 7 it tests the CLI and QEMU's model more than the module (about
# 300 s under the debug kernel): default kernel only.
if [ "${KERNEL_VARIANT:-default}" = default ]; then
    echo "=== boot 8: SR-IOV: PF with nvme.ko and a mounted ext4, a VF with gpunvme"
    bash "$ROOT/tests/vm/run.sh" --sriov --test-timeout 900 --timeout 1200 --file "$ROOT/gpunvme.ko" --file "$cli" \
        --file "$(host_tool mke2fs)" --file "$(host_tool e2fsck)" --file /etc/mke2fs.conf:/etc/mke2fs.conf \
        --file "$(host_tool setpriv)" "$@" -- \
        "$B/boot/gpunvme_sriov_test.sh" 2>&1 | tee "$work/boot8.log"
    add "$work/boot8.log"
else
    echo "=== boot 8 (SR-IOV) runs on the default kernel only"
fi

# The slow namespace: reads at 1 KiB/s, so the 7 reads of 4 KiB the test
# starts take 28 s: still in flight when the kernel removes the device about
# 5 s after device_del (pciehp's button delay). Not slower: unbind deletes
# the I/O queues first, and QEMU's Delete I/O SQ waits for the queue's
# requests with the whole VM stopped (a throttle of 64 B/s froze it for
# 6 minutes). kmemleak=on only matters to the debug kernel (the default
# kernel passes the unknown parameter on to /init, harmlessly); there its
# two scans take 20-80 s under TCG, hence the longer deadlines. The debug
# kernel also gets slub_debug=P: without it SLUB's per-CPU sheaves keep a
# stale pointer to every object they hand out and kmemleak reported no leak
# at all, not even deliberate ones (see gpunvme_hotplug_test.c, whose
# positive control, a leak the stand-in makes on purpose, must be reported
# before its "no leak" result counts).
km_append="kmemleak=on"
[ "${KERNEL_VARIANT:-default}" = debug ] && km_append="$km_append slub_debug=P"
echo "=== boot 9: hot-unplug with I/O in flight, open files and imported dma-bufs; replug, bind, write/verify"
truncate -s 16M "$work/slow.img"
echo 2 > "$work/slow-nsid"
QEMU_EXTRA="${QEMU_EXTRA:-} -object throttle-group,id=slow,x-bps-read=1024 -blockdev driver=file,filename=$work/slow.img,node-name=slow-file -blockdev driver=throttle,throttle-group=slow,file=slow-file,node-name=slow -device nvme-ns,drive=slow,bus=gpunvme0,nsid=2" \
bash "$ROOT/tests/vm/run.sh" --hotplug --append "$km_append" --timeout 900 --test-timeout 600 --file "$ROOT/gpunvme.ko" \
    --file "$S/gpunvme_standin.ko" --file "$work/slow-nsid:/opt/gpunvme/hotplug-slow-nsid" "$@" -- \
    "$B/boot/gpunvme_hotplug_test" 2>&1 | tee "$work/boot9.log"
add "$work/boot9.log"

fuzz_s=30
[ "${KERNEL_VARIANT:-default}" = debug ] && fuzz_s=180
echo "=== boot 10: fuzz for ${fuzz_s} s (4 processes), then write/verify and unload"
bash "$ROOT/tests/fuzz/vm.sh" --seconds "$fuzz_s" --procs 4 ${FUZZ_SEED:+--seed "$FUZZ_SEED"} -- "$@" \
    2>&1 | tee "$work/boot10.log"
add "$work/boot10.log"

echo "=== boot 11: a namespace shared with nvme.ko's controller of the same subsystem detached, reformatted and attached under an open shared pair"
bash "$ROOT/tests/vm/run.sh" --subsys --file "$ROOT/gpunvme.ko" "$@" -- \
    "$B/boot/gpunvme_ns_change_test" 2>&1 | tee "$work/boot11.log"
add "$work/boot11.log"

echo "=== boot 12: the Python package against the module (pytest, then the overhead bench)"
bash "$ROOT/tests/vm/python.sh" "$@" 2>&1 | tee "$work/boot12.log"
add "$work/boot12.log"

# The passthrough back end: userspace on the kernel's own drivers (nothing
# of the module runs), so the default kernel only, like boots 7 and 8.
if [ "${KERNEL_VARIANT:-default}" = default ]; then
    pt_files=(--file "$cli" --file "$HPT" --file "$(host_tool mke2fs)" --file "$(host_tool e2fsck)"
              --file /etc/mke2fs.conf:/etc/mke2fs.conf)
    # fio's io_uring_cmd engine as a second bench baseline, when installed.
    if command -v fio >/dev/null; then pt_files+=(--file "$(command -v fio):/opt/gpunvme/fio"); fi
    echo "=== boot 13: passthrough (no module): a namespace with a mounted ext4 partition; NVMe/TCP on loopback"
    truncate -s 32M "$work/fabrics-ns2.img"
    printf 'PT_ROLES="local loopback"\n' >"$work/pt.env"
    QEMU_EXTRA="${QEMU_EXTRA:-} -drive file=$work/fabrics-ns2.img,if=none,id=fabns2,format=raw -device nvme-ns,drive=fabns2,bus=kernel0,nsid=2" \
    bash "$ROOT/tests/vm/run.sh" --test-timeout 1100 --timeout 1400 "${pt_files[@]}" \
        --file "$ROOT/gpunvme.ko" --file "$work/pt.env:/opt/gpunvme/passthrough.env" "$@" -- \
        "$B/boot/gpunvme_passthrough_test.sh" 2>&1 | tee "$work/boot13.log"
    add "$work/boot13.log"
    echo "=== boots 14 and 15: NVMe/TCP and NVMe/RDMA (Soft-RoCE) between two VMs on a QEMU socket network"
    bash "$ROOT/tests/vm/fabrics2.sh" "${pt_files[@]}" "$@" 2>&1 | tee "$work/boot14.log"
    add "$work/boot14.log"
else
    echo "=== boots 13-15 (passthrough, NVMe over TCP and RDMA) run on the default kernel only"
fi

if [ "$skip" -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
[ "$fail" = 0 ]
