#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/vm/fabrics2.sh: NVMe over TCP, then NVMe over RDMA on Soft-RoCE,
# between two VMs on a private link of this machine (a QEMU socket network:
# -netdev socket,listen= on the target, connect= on the host, an e1000 NIC
# in each; rdma_rxe on that NIC in both). The target VM runs
# tests/selftests/gpunvme_passthrough_test.sh as "target" (nvmet over TCP
# and RDMA on its emulated NVMe disk, configfs), the host VM as "host"
# (connects by writing to /dev/nvme-fabrics, then the passthrough back
# end's checks on the fabrics namespace, the outage and the reconnect, once
# per transport; the target stops and starts a port when the host asks on
# a control port). Both results are counted; last line "N passed, N
# failed".
#
#   tests/vm/fabrics2.sh [--file SRC[:DEST]]... [run.sh options]
# The --file arguments go to both VMs (the CLI, gpunvme_hostrun_pt,
# mke2fs, e2fsck, ...); the test script is tests/selftests/build/boot/.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TEST=$ROOT/tests/selftests/build/boot/gpunvme_passthrough_test.sh
[ -f "$TEST" ] || { echo "fabrics2: $TEST missing (make selftests)" >&2; exit 1; }
work=$(mktemp -d /tmp/gpunvme-fabrics2.XXXXXX)
tpid=
cleanup() {
    [ -n "$tpid" ] && kill "$tpid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# A port of this machine for the link (QEMU's socket network is TCP here).
port=$((20000 + $$ % 20000))
printf 'PT_ROLES=target\nPT_RDMA=1\nPT_TARGET_ADDR=10.77.0.1\nPT_HOST_ADDR=10.77.0.2\nPT_TARGET_DEADLINE=1100\n' >"$work/target.env"
printf 'PT_ROLES=host\nPT_RDMA=1\nPT_TARGET_ADDR=10.77.0.1\nPT_HOST_ADDR=10.77.0.2\n' >"$work/host.env"
# iproute2's rdma makes the Soft-RoCE devices (netlink; rxe has no other way).
rdma=$(PATH=$PATH:/usr/sbin:/sbin command -v rdma) ||
    { echo "fabrics2: no rdma command (iproute2; make deps installs it)"; echo "0 passed, 1 failed"; exit 1; }

echo "=== fabrics2: target VM (nvmet-tcp and nvmet-rdma on 10.77.0.1, link on 127.0.0.1:$port)"
QEMU_EXTRA="${QEMU_EXTRA:-} -netdev socket,id=pt0,listen=127.0.0.1:$port -device e1000,netdev=pt0,mac=52:54:00:77:00:01" \
bash "$HERE/run.sh" --log "$work/target-console.log" --test-timeout 1200 --timeout 1500 \
    --file "$work/target.env:/opt/gpunvme/passthrough.env" --file "$rdma" "$@" -- "$TEST" >"$work/target.log" 2>&1 &
tpid=$!
# The host VM's QEMU connects to the target's socket at start: wait until
# the target's QEMU runs (its /init has started).
for _ in $(seq 1 300); do
    grep -q '^@@gpunvme INIT' "$work/target-console.log" 2>/dev/null && break
    kill -0 "$tpid" 2>/dev/null || break
    sleep 1
done
if ! grep -q '^@@gpunvme INIT' "$work/target-console.log" 2>/dev/null; then
    echo "fabrics2: the target VM did not start within 300 s"
    cat "$work/target.log"
    echo "0 passed, 1 failed"
    exit 1
fi

echo "=== fabrics2: host VM (10.77.0.2, nvme-tcp then nvme-rdma through /dev/nvme-fabrics)"
QEMU_EXTRA="${QEMU_EXTRA:-} -netdev socket,id=pt0,connect=127.0.0.1:$port -device e1000,netdev=pt0,mac=52:54:00:77:00:02" \
bash "$HERE/run.sh" --test-timeout 1100 --timeout 1400 \
    --file "$work/host.env:/opt/gpunvme/passthrough.env" --file "$rdma" "$@" -- "$TEST" 2>&1 | tee "$work/host.log"
wait "$tpid"
tpid=
echo "=== fabrics2: the target VM's run"
cat "$work/target.log"

pass=0 fail=0 skip=0
for l in "$work/host.log" "$work/target.log"; do
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$l" | tail -1)
    if [ -z "$line" ]; then fail=$((fail + 1)); continue; fi
    pass=$((pass + $(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line")))
    fail=$((fail + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")))
    grep -q skipped <<<"$line" && skip=$((skip + $(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$line")))
done
if [ "$skip" -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
[ "$fail" = 0 ]
