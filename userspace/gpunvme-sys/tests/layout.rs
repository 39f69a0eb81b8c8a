// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Checks the bindings against a C compiler: a generated C program prints
//! the size, alignment and field offsets of every UAPI struct, every ioctl
//! request number and every integer constant as the C compiler sees
//! `uapi/gpunvme.h`; the Rust side prints the same facts from the bindgen
//! types and the Rust `_IOC` encoding. Any difference fails.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use gpunvme_sys::layout::{rust_layout, C_LAYOUT_PROGRAM, UAPI_INCLUDE_DIR};

fn c_layout() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("layout-c");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, C_LAYOUT_PROGRAM).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-I")
        .arg(UAPI_INCLUDE_DIR)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        out.status.success(),
        "C compiler failed on the generated layout program:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the layout program");
    assert!(run.status.success());
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn rust_and_c_agree_on_every_struct_ioctl_and_constant() {
    let rust = rust_layout();
    let c = c_layout();
    assert!(!c.is_empty());
    let rs: BTreeSet<_> = rust.iter().cloned().collect();
    let cs: BTreeSet<_> = c.iter().cloned().collect();
    let only_rust: Vec<_> = rs.difference(&cs).collect();
    let only_c: Vec<_> = cs.difference(&rs).collect();
    assert!(
        only_rust.is_empty() && only_c.is_empty(),
        "layout mismatch\n only in Rust: {only_rust:#?}\n only in C: {only_c:#?}"
    );
    assert_eq!(rust.len(), c.len(), "duplicate facts");
}

#[test]
fn the_table_covers_the_known_abi() {
    let rust = rust_layout();
    for needle in [
        "type gpunvme_info size",
        "field gpunvme_info.size offset 0 size 4",
        "field gpunvme_info.version offset 4 size 4",
        "field gpunvme_info.cap offset 8 size 8",
        "field gpunvme_info.bdf offset",
        "field gpunvme_info.reserved offset",
        "ioctl GPUNVME_IOC_GET_INFO ",
        "const GPUNVME_UAPI_VERSION 2",
        "const GPUNVME_BDF_LEN 16",
        "field gpunvme_info.iommu_mode offset",
        "field gpunvme_info.modes offset",
        "field gpunvme_info.shared_max_transfer offset",
        "field gpunvme_info.node_nsid offset",
        "field gpunvme_qpair_create.prp_offset offset",
        "field gpunvme_qpair_create.prp_size offset",
        "field gpunvme_qpair_create.prp_dma offset",
        "type gpunvme_owner size 32 align 8",
        "field gpunvme_owner.iommu_mode offset 12 size 4",
        "ioctl GPUNVME_IOC_CLAIM_OWNER ",
        "const GPUNVME_QPAIR_RAW 2",
        "const GPUNVME_EXPORT_PRP_POOL 4",
        "const GPUNVME_MODE_SHARED 1",
        "const GPUNVME_MODE_OWNER 2",
        "const GPUNVME_IOMMU_NONE 0",
        "const GPUNVME_IOMMU_LAZY 3",
        "const GPUNVME_IOMMU_OTHER 4",
    ] {
        assert!(
            rust.iter().any(|l| l.starts_with(needle)),
            "missing `{needle}` in {rust:#?}"
        );
    }
    // Version 1's bridged flag (bit 0) is gone: a set bit 0 is EINVAL now.
    assert!(
        !rust.iter().any(|l| l.contains("GPUNVME_QPAIR_BRIDGED")),
        "{rust:#?}"
    );
}

/// Independent of the generated table: a hand-written C program computes
/// GPUNVME_IOC_GET_INFO with the kernel's own `_IOWR` macro.
#[test]
fn get_info_request_matches_the_c_macro() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ioctl-c");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("ioctl.c");
    let exe = dir.join("ioctl");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include \"gpunvme.h\"\n\
         int main(void) { printf(\"%lu\\n\", (unsigned long)GPUNVME_IOC_GET_INFO); return 0; }\n",
    )
    .unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let st = Command::new(&cc)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-I")
        .arg(UAPI_INCLUDE_DIR)
        .status()
        .expect("run the C compiler");
    assert!(st.success());
    let out = Command::new(&exe).output().unwrap();
    let c_value: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // c_ulong is u32 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let rust_value = u64::from(gpunvme_sys::GPUNVME_IOC_GET_INFO);
    assert_eq!(rust_value, c_value);
}
