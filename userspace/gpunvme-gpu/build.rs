// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Compiles the CPU half of the round-trip self-test from the device
//! library's header (kernels/include/gpunvme/selftest.h), so the checks
//! `gpunvme gpu-run` and `gpunvme probe` make are the very code the host
//! harness (kernels/tests/host_selftest_test.cpp) tests, not a copy. It
//! is plain C, built by the C compiler rustc links with.

fn main() {
    let include = "../../kernels/include";
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/selftest_cpu.c");
    println!("cargo:rerun-if-changed={include}/gpunvme/selftest.h");
    cc::Build::new()
        .file("csrc/selftest_cpu.c")
        .include(include)
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("gpunvme_selftest_cpu");
}
