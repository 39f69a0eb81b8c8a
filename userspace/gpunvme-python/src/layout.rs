// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The size of an array's memory, and whether it is one dense run of bytes
//! (what a transfer needs): DLPack and the CUDA array interface describe
//! arrays by shape, strides and element size. Tested through
//! `inspect_buffer` (tests/test_buffers.py): this crate's tests are Python's.

/// Bytes of a dense (C-contiguous) array of `shape` and `itemsize`-byte
/// elements whose strides, in bytes, are `strides` (`None`: dense by
/// definition). Dimensions of extent 1 may have any stride (NumPy and
/// PyTorch give them odd ones). An error says why the layout is unusable.
pub(crate) fn dense_bytes(
    shape: &[i64],
    strides: Option<&[i64]>,
    itemsize: usize,
) -> Result<usize, String> {
    if itemsize == 0 {
        return Err("elements of 0 bytes".into());
    }
    let mut total = itemsize;
    for &d in shape {
        let d = usize::try_from(d).map_err(|_| format!("a negative extent in shape {shape:?}"))?;
        total = total
            .checked_mul(d)
            .ok_or_else(|| format!("shape {shape:?} overflows"))?;
    }
    let Some(strides) = strides else {
        return Ok(total);
    };
    if strides.len() != shape.len() {
        return Err(format!(
            "{} strides for {} dimensions",
            strides.len(),
            shape.len()
        ));
    }
    if total == 0 {
        return Ok(0);
    }
    // Row-major: the last dimension moves by one element.
    let mut want = itemsize as i64;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != want {
            return Err(format!(
                "not contiguous: shape {shape:?}, strides {strides:?} (bytes; {itemsize}-byte \
                 elements); a C-contiguous copy works (.contiguous(), np.ascontiguousarray)"
            ));
        }
        want = want.saturating_mul(d);
    }
    Ok(total)
}
