#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# CPU-initiated transfers between the SSD and GPU memory (the library's
# GpuBuffer and Transfers, through `gpunvme read/write/verify --gpu` and
# `gpunvme bench --gpu`), with the VM's stand-ins for VRAM: a udmabuf
# (memfd pages exported as a dma-buf) and the edu stand-in (QEMU's edu
# device bound to gpunvme_standin, importing that udmabuf as a GPU driver
# would), whose DMA engine reads back what the SSD wrote: a peer device's
# view. Every byte is checked against the pattern, in both directions:
# written from GPU memory and verified through host memory, written from
# host memory and verified through GPU memory. The bench prints GB/s of
# the same transfers into GPU memory and into host memory (a ratio,
# reported, never asserted) and fio's jobs[] in its JSON.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
BDF=${GPUNVME_BDF:-0000:00:04.0}
EDU=${EDU_BDF:-0000:00:06.0}
PATH=$DIR:$PATH
T=/tmp/gpunvme_gpu_io.$$
mkdir -p "$T"

driver_of() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }

setup() {
	[ -d /sys/module/gpunvme ] || insmod "$DIR/gpunvme.ko" || return 1
	[ "$(driver_of "$BDF")" = gpunvme ] || gpunvme bind "$BDF" || return 1
	[ -c /dev/udmabuf ] || { echo "no /dev/udmabuf (CONFIG_UDMABUF)"; return 1; }
	gpunvme info "$BDF" -o json > "$T/info.json" || return 1
	grep -q '"lba_size"' "$T/info.json"
}

lba_size() { sed -n 's/.*"lba_size": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1; }
io_queues() { sed -n 's/.*"io_queues": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1; }

# SSD <- GPU memory: written from a udmabuf, verified through host memory;
# 2048 blocks in several MDTS-sized commands.
write_from_gpu_memory() {
	out=$(gpunvme write "$BDF" --gpu udmabuf -p 301 -s 10000 -c 2048 --qd 8 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "through GPU memory: udmabuf" || return 1
	gpunvme verify "$BDF" -p 301 -s 10000 -c 2048
}

# SSD -> GPU memory: written through host memory, verified in a udmabuf
# (poisoned first, so a read that moved nothing cannot pass).
read_into_gpu_memory() {
	gpunvme write "$BDF" -p 302 -s 14096 -c 2048 || return 1
	out=$(gpunvme verify "$BDF" --gpu udmabuf -p 302 -s 14096 -c 2048 -o json 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q '"ok": true' && echo "$out" | grep -q '"memory": "udmabuf'
}

# The bytes read into GPU memory, copied out, equal gpunvme pattern's.
read_data_equals_pattern() {
	gpunvme read "$BDF" --gpu udmabuf -s 14096 -c 64 --data "$T/r" || return 1
	gpunvme pattern -p 302 -s 14096 -c 64 --block-size "$(lba_size)" > "$T/p" || return 1
	cmp "$T/r" "$T/p"
}

# A wrong seed through GPU memory is a mismatch (exit 3), not a pass.
gpu_memory_mismatch_is_caught() {
	out=$(gpunvme verify "$BDF" --gpu udmabuf -p 999 -s 14096 -c 8 2>&1)
	rc=$?
	echo "$out"
	[ "$rc" = 3 ] && echo "$out" | grep -q "first mismatch at LBA 14096"
}

# One block per command on a depth-4 pair: 96 commands into GPU memory,
# the ring wraps many times.
many_commands_through_gpu_memory() {
	out=$(gpunvme write "$BDF" --gpu udmabuf -p 303 -s 18192 -c 96 --qd 3 --max-cmd-blocks 1 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "96 command(s) on shared qid [0-9]* of depth 4" || return 1
	gpunvme verify "$BDF" --gpu udmabuf -p 303 -s 18192 -c 96 --qd 3 --max-cmd-blocks 1
}

# The edu stand-in, as tests/standin/standin_env.h sets it up.
edu_up() {
	[ -d /sys/module/gpunvme_standin ] || insmod "$DIR/gpunvme_standin.ko" || return 1
	if [ ! -e "/sys/bus/pci/drivers/gpunvme_standin/$EDU" ]; then
		echo gpunvme_standin > "/sys/bus/pci/devices/$EDU/driver_override" || return 1
		echo "$EDU" > /sys/bus/pci/drivers_probe
	fi
	[ -c /dev/gpunvme_standin ]
}
edu_down() {
	[ -e "/sys/bus/pci/drivers/gpunvme_standin/$EDU" ] && echo "$EDU" > /sys/bus/pci/drivers/gpunvme_standin/unbind
	echo > "/sys/bus/pci/devices/$EDU/driver_override"
}

# What the SSD wrote into the udmabuf, read by edu's DMA engine through
# its own (vIOMMU) mapping of the dma-buf: 64 blocks, 8 edu reads or more.
peer_reads_what_the_ssd_wrote() {
	edu_up || { echo "the edu stand-in did not come up on $EDU"; return 1; }
	gpunvme write "$BDF" -p 304 -s 20000 -c 64 || return 1
	out=$(gpunvme verify "$BDF" --gpu edu -p 304 -s 20000 -c 64 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "read back by the edu stand-in" || return 1
	gpunvme read "$BDF" --gpu edu -s 20000 -c 16 --data "$T/e" || return 1
	gpunvme pattern -p 304 -s 20000 -c 16 --block-size "$(lba_size)" > "$T/ep" || return 1
	cmp "$T/e" "$T/ep" || return 1
	# And the other way: the SSD writes from the buffer edu imported.
	gpunvme write "$BDF" --gpu edu -p 305 -s 20100 -c 32 || return 1
	gpunvme verify "$BDF" -p 305 -s 20100 -c 32
}

# GB/s into GPU memory (udmabuf) and into host memory, the same transfers
# in one run: 128 KiB sequential reads, and 4 KiB random reads. The ratio
# is printed; only its presence is checked.
bench_gpu_against_host() {
	q=1
	[ "$(io_queues)" -ge 2 ] && q=1,2
	for w in "read --bs 128k" "randread --bs 4k"; do
		# shellcheck disable=SC2086
		gpunvme bench "$BDF" --gpu udmabuf --rw $w --qd 8 --qpairs $q --range 8M \
			--runtime 1s --ramp-time 100ms -o json > "$T/gpu.json" || return 1
		grep -q '"target": "transfers-gpu"' "$T/gpu.json" && grep -q '"target": "transfers-host"' "$T/gpu.json" &&
			grep -q '"gbps_gpu_over_host"' "$T/gpu.json" && grep -q '"jobs"' "$T/gpu.json" || { cat "$T/gpu.json"; return 1; }
		echo "rw=$w: GB/s GPU memory / host memory per cell:"
		tr -d ' \n' < "$T/gpu.json" | grep -o '"gbps_gpu_over_host":[0-9.e+-]*' | sed 's/^/  /'
	done
	# The table, for the log.
	gpunvme bench "$BDF" --gpu udmabuf --rw read --bs 128k --qd 8 --qpairs 1 --range 8M --runtime 500ms
}

# A mixed workload on the plain gpunvme path, fio's jobs[] in the JSON,
# kept in the log between markers for fio's tools on the host.
bench_fio_json() {
	gpunvme bench "$BDF" --rw randrw --rwmixread 70 --bs 4k --qd 4 --qpairs 1 --range 8M \
		--runtime 500ms -o json > "$T/fio.json" || return 1
	grep -q '"fio version"' "$T/fio.json" && grep -q '"clat_ns"' "$T/fio.json" &&
		grep -q '"99.990000"' "$T/fio.json" && grep -q '"usr_cpu"' "$T/fio.json" || { cat "$T/fio.json"; return 1; }
	echo "BEGIN FIO JSON"
	cat "$T/fio.json"
	echo "END FIO JSON"
}

ktap_plan 9
ktap_check "setup: module loaded, controller bound, /dev/udmabuf" setup
ktap_check "write from GPU memory (udmabuf), verify through host memory" write_from_gpu_memory
ktap_check "write through host memory, verify in GPU memory (udmabuf)" read_into_gpu_memory
ktap_check "read --gpu --data equals gpunvme pattern" read_data_equals_pattern
ktap_check "a wrong seed through GPU memory is a mismatch (exit 3)" gpu_memory_mismatch_is_caught
ktap_check "96 one-block commands into GPU memory (queue wrap)" many_commands_through_gpu_memory
ktap_check "edu stand-in: a peer's DMA reads what the SSD wrote, and the SSD writes what it holds" peer_reads_what_the_ssd_wrote
edu_down
ktap_check "bench --gpu: GB/s into GPU memory against host memory (ratio reported)" bench_gpu_against_host
ktap_check "bench --rw randrw: fio's jobs[] in the JSON" bench_fio_json
rm -rf "$T"
ktap_done
