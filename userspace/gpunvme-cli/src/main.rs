// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme`: command-line tool for the gpunvme kernel module (the
//! definition and the commands are in the library, src/lib.rs).

fn main() -> std::process::ExitCode {
    gpunvme_cli::main()
}
