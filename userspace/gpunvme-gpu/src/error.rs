// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The error type: what was attempted and what the runtime answered.

use std::fmt;

/// A GPU operation that failed, with the runtime's own error name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuError(pub String);

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, GpuError>;

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GpuError {}

impl From<String> for GpuError {
    fn from(s: String) -> Self {
        GpuError(s)
    }
}

impl From<&str> for GpuError {
    fn from(s: &str) -> Self {
        GpuError(s.to_string())
    }
}

impl From<GpuError> for String {
    fn from(e: GpuError) -> Self {
        e.0
    }
}
