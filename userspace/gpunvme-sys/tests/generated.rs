// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The committed bindings (`src/generated/`) are exactly what the build
//! script generates from `uapi/gpunvme.h` now (feature `regenerate`, which
//! needs bindgen and libclang). After changing the header, run
//! `GPUNVME_SYS_UPDATE=1 cargo test -p gpunvme-sys --features regenerate --test generated`
//! to rewrite them, and commit the result.
#![cfg(feature = "regenerate")]

use std::path::Path;

#[test]
fn committed_bindings_match_the_header() {
    let fresh = Path::new(env!("OUT_DIR"));
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/generated");
    let update = std::env::var_os("GPUNVME_SYS_UPDATE").is_some();
    let mut stale = Vec::new();
    for f in ["bindings.rs", "ioctls.rs", "layout.rs"] {
        let want = std::fs::read_to_string(fresh.join(f)).unwrap();
        let have = std::fs::read_to_string(committed.join(f)).unwrap_or_default();
        if want != have {
            if update {
                std::fs::write(committed.join(f), &want).unwrap();
            } else {
                stale.push(f);
            }
        }
    }
    assert!(
        stale.is_empty(),
        "src/generated/{stale:?} differ from what uapi/gpunvme.h generates: run \
         GPUNVME_SYS_UPDATE=1 cargo test -p gpunvme-sys --features regenerate --test generated"
    );
}
