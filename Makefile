# SPDX-License-Identifier: GPL-2.0-only
# gpunvme top-level Makefile.
#
#   make demo     the main job: boot the test VM and drive the controller
#   make check    every test (host, ISA, VM); ends with "N passed, N failed"
#
# Both first run `make deps`, so a fresh Debian bookworm machine (as root)
# needs nothing else. The kernel module itself is built the standard way,
# against a Rust-enabled kernel build tree:  make -C $KDIR M=$PWD LLVM=1
#
# KERNEL_VARIANT=debug selects the KASAN/lockdep/KFENCE test kernel.

SHELL := /bin/bash
# Sub-makes (and the kernel-version query in tests/kernel/build.sh) must not
# print "Entering directory" lines into captured output.
MAKEFLAGS += --no-print-directory
# rustup installs cargo, rustc and bindgen here; CI shells may not have it on PATH.
export PATH := $(HOME)/.cargo/bin:$(PATH)
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
KERNEL_VARIANT ?= default
export KERNEL_VARIANT
# The test kernel is built with LLVM (KASAN with Rust needs clang); modules
# must use the same toolchain as their kernel.
KLLVM ?= -19
CARGO ?= cargo

.PHONY: all deps kernel module selftests userspace kernels vm-test host-test \
	isa-check demo check clean dkms-install dkms-check dkms-debian bench standin hostrun fuzz fuzz-vm \
	hostrun-pt hostrun-pt-model python python-test python-vm

all: module userspace

deps:
	@bash $(ROOT)/tests/deps.sh

# Prints nothing; builds or reuses the cached kernel for KERNEL_VARIANT.
kernel: deps
	@bash $(ROOT)/tests/kernel/build.sh >/dev/null

module: kernel
	$(MAKE) -C "$$(bash $(ROOT)/tests/kernel/build.sh)" M=$(ROOT) LLVM=$(KLLVM) modules

selftests:
	$(MAKE) -C $(ROOT)/tests/selftests

# The fuzzer (tests/fuzz): a static binary for the VM, like the selftests.
fuzz:
	$(MAKE) -C $(ROOT)/tests/fuzz

# Boot the VM and fuzz for FUZZ_SECONDS (default 30; the debug kernel with
# KERNEL_VARIANT=debug), then check the controller still works.
FUZZ_SECONDS ?= 30
fuzz-vm: module userspace standin fuzz
	bash $(ROOT)/tests/fuzz/vm.sh --seconds $(FUZZ_SECONDS)

userspace:
	cd $(ROOT)/userspace && $(CARGO) build --release --locked
	cd $(ROOT)/userspace && $(CARGO) build --release --locked -p gpunvme --example cq_in_dmabuf

# The Python package (userspace/gpunvme-python): an abi3 wheel for CPython
# 3.11 and newer in userspace/target/wheels, built by maturin in the virtual
# environment of tests/userspace/python_env.sh (pip install it from there).
python:
	bash $(ROOT)/tests/userspace/python.sh build

# Its tests that need no device (pytest on the host, in make check).
python-test:
	bash $(ROOT)/tests/userspace/python.sh test

# Its tests inside the VM against the real module, and the overhead bench.
python-vm: deps module userspace
	bash $(ROOT)/tests/vm/python.sh

kernels:
	$(MAKE) -C $(ROOT)/kernels

isa-check:
	$(MAKE) -C $(ROOT)/kernels isa-check

host-test:
	cd $(ROOT)/userspace && $(CARGO) test --locked

# The test-only GPU stand-in: a module driving QEMU's edu device as a peer.
standin: module
	$(MAKE) -C $(ROOT)/tests/standin KDIR="$$(bash $(ROOT)/tests/kernel/build.sh)" KLLVM=$(KLLVM)

# The device library compiled as host C++ (threads as lanes), run in the VM
# against the emulated controller, direct and bridged.
hostrun:
	$(MAKE) -C $(ROOT)/kernels hostrun

# The same built against the gpunvme library's passthrough back end (no
# module: a namespace the kernel drives, through io_uring NVMe passthrough).
hostrun-pt: userspace
	$(MAKE) -C $(ROOT)/kernels hostrun-pt

# hostrun-pt on the library's model namespace (a RAM disk in place of the
# kernel): the device library and the example kernels through the
# passthrough relay, checks and threads, on the host, no VM.
hostrun-pt-model: hostrun-pt
	GPUNVME_PT_DEVICE=model:65536:512 timeout 600 $(ROOT)/kernels/build/hostrun/gpunvme_hostrun_pt

# The VM suite: every selftest against the emulated controllers.
vm-test: module selftests standin userspace hostrun hostrun-pt fuzz python
	bash $(ROOT)/tests/vm/suite.sh

demo: deps module userspace hostrun
	bash $(ROOT)/tests/vm/run.sh --file $(ROOT)/gpunvme.ko \
		--file $(ROOT)/userspace/target/release/gpunvme \
		--file $(ROOT)/kernels/build/hostrun/gpunvme_hostrun \
		--script $(ROOT)/tests/vm/demo.sh

# Polled path vs the kernel nvme driver, one VM run: table, JSON and SVG,
# and the library's transfers into GPU memory (udmabuf) against host
# memory; then tenant isolation on one relay thread (a second boot).
bench: deps module userspace
	$(MAKE) -C $(ROOT)/tests/bench OUT=build
	bash $(ROOT)/tests/bench/run.sh

check: deps
	@bash $(ROOT)/tests/check.sh

dkms-install: deps
	bash $(ROOT)/tests/dkms/install.sh

# DKMS build against the test kernel (temporary DKMS trees), then the VM
# module test with the DKMS-built module.
dkms-check: deps selftests
	bash $(ROOT)/tests/dkms/ci.sh

# DKMS on Debian's stock 7.3 kernel: a cached trixie root builds gpunvme
# against Debian's own headers (the missing Rust artifacts rebuilt), then the
# VM boots Debian's own vmlinuz with that module (module, I/O, shared mode).
dkms-debian: deps selftests userspace
	bash $(ROOT)/tests/dkms/debian-stock.sh

clean:
	rm -rf $(ROOT)/tests/selftests/build $(ROOT)/kernels/build $(ROOT)/tests/standin/build \
		$(ROOT)/tests/fuzz/build $(ROOT)/tests/bench/build
	-[ -d "$$(bash $(ROOT)/tests/kernel/build.sh 2>/dev/null)" ] && \
		$(MAKE) -C "$$(bash $(ROOT)/tests/kernel/build.sh)" M=$(ROOT) LLVM=$(KLLVM) clean
