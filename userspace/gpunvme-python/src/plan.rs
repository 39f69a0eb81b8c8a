// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! A transfer's arguments checked into a plan: which blocks, which bytes
//! of the buffer. Every refusal names the rule: alignment (whole blocks;
//! dword-aligned offsets for the zero-copy paths), bounds (the buffer, the
//! namespace) and empty transfers.

use crate::errors::{fail, FResult, Kind};

/// Which way the data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// From the namespace into the buffer.
    Read,
    /// From the buffer to the namespace.
    Write,
}

impl Dir {
    pub(crate) fn opcode(self) -> u8 {
        match self {
            Dir::Read => gpunvme::command::opcode::READ,
            Dir::Write => gpunvme::command::opcode::WRITE,
        }
    }
}

/// A checked transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) dir: Dir,
    pub(crate) lba: u64,
    pub(crate) count: u64,
    /// Byte offset into the buffer.
    pub(crate) buf_offset: usize,
    /// count * lba_size.
    pub(crate) bytes: usize,
    /// Not checked against the namespace's capacity: the controller
    /// answers (LBA Out of Range), for the tests of NvmeError.
    pub(crate) unchecked: bool,
}

/// What the plan is checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) lba_size: u32,
    pub(crate) capacity: u64,
    pub(crate) nsid: u32,
    /// Bytes of the buffer.
    pub(crate) buf_len: usize,
    /// The buffer is reached by DMA (a HostBuffer or a dma-buf), which
    /// needs dword-aligned offsets; host memory is copied, any offset.
    pub(crate) dma: bool,
    /// Leave the capacity check to the controller.
    pub(crate) unchecked: bool,
}

/// `count` blocks at `lba` (`None`: as many as fill the buffer from
/// `buf_offset`).
pub(crate) fn by_blocks(
    dir: Dir,
    lim: Limits,
    lba: u64,
    count: Option<u64>,
    buf_offset: usize,
) -> FResult<Plan> {
    let bs = lim.lba_size as usize;
    if buf_offset > lim.buf_len {
        return Err(fail(
            Kind::OutOfRange,
            format!(
                "buffer offset {buf_offset} is past the end of the {}-byte buffer",
                lim.buf_len
            ),
        ));
    }
    let count = match count {
        Some(c) => c,
        None => {
            let room = lim.buf_len - buf_offset;
            if room % bs != 0 {
                return Err(fail(
                    Kind::Alignment,
                    format!(
                        "the buffer's {room} bytes from offset {buf_offset} are not a whole number of \
                         {bs}-byte blocks: pass count (blocks) or size (bytes)"
                    ),
                ));
            }
            (room / bs) as u64
        }
    };
    if count == 0 {
        return Err(fail(
            Kind::Invalid,
            "an empty transfer: at least one block (a buffer smaller than a block?)",
        ));
    }
    let bytes = count
        .checked_mul(bs as u64)
        .and_then(|b| usize::try_from(b).ok())
        .filter(|b| {
            buf_offset
                .checked_add(*b)
                .is_some_and(|end| end <= lim.buf_len)
        })
        .ok_or_else(|| {
            fail(
                Kind::OutOfRange,
                format!(
                    "{count} blocks of {bs} bytes at buffer offset {buf_offset} do not fit the \
                     {}-byte buffer",
                    lim.buf_len
                ),
            )
        })?;
    if !lim.unchecked && lba.checked_add(count).is_none_or(|end| end > lim.capacity) {
        return Err(fail(
            Kind::OutOfRange,
            format!(
                "blocks {lba}..{} are beyond namespace {} (blocks 0..{})",
                lba.saturating_add(count),
                lim.nsid,
                lim.capacity
            ),
        ));
    }
    if lim.dma && buf_offset % 4 != 0 {
        return Err(fail(
            Kind::Alignment,
            format!(
                "buffer offset {buf_offset}: the controller DMAs into this buffer directly, which \
                 needs offsets that are multiples of 4"
            ),
        ));
    }
    Ok(Plan {
        dir,
        lba,
        count,
        buf_offset,
        bytes,
        unchecked: lim.unchecked,
    })
}

/// `size` bytes at byte `file_offset` of the namespace (`None`: what fills
/// the buffer); both whole blocks.
pub(crate) fn by_bytes(
    dir: Dir,
    lim: Limits,
    file_offset: u64,
    size: Option<usize>,
    buf_offset: usize,
) -> FResult<Plan> {
    let bs = lim.lba_size as u64;
    if file_offset % bs != 0 {
        return Err(fail(
            Kind::Alignment,
            format!("file_offset {file_offset} is not a multiple of the {bs}-byte block size"),
        ));
    }
    let count = match size {
        None => None,
        Some(s) if s as u64 % bs != 0 => {
            return Err(fail(
                Kind::Alignment,
                format!("size {s} is not a multiple of the {bs}-byte block size"),
            ))
        }
        Some(s) => Some(s as u64 / bs),
    };
    by_blocks(dir, lim, file_offset / bs, count, buf_offset)
}
