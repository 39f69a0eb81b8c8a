// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Regenerates the gpunvme UAPI bindings from `uapi/gpunvme.h`, with the
//! `regenerate` feature only (it needs bindgen and libclang); a normal build
//! uses the copies committed in `src/generated/` and runs nothing here.
//! `tests/generated.rs` (same feature) checks that the committed files are
//! what this generates (`GPUNVME_SYS_UPDATE=1` rewrites them).
//!
//! Outputs (all in `OUT_DIR`):
//! - `bindings.rs`: structs and integer constants, by bindgen;
//! - `ioctls.rs`: one `const` per `#define GPUNVME_IOC_* _IO*(...)` in the
//!   header, computed in Rust by `crate::ioc` (bindgen cannot expand
//!   function-like macros);
//! - `layout.rs`: the size/alignment/offset table of every struct as rustc
//!   lays out the bindgen types, plus a C program that prints the same
//!   table as a C compiler sees it (compared by `tests/layout.rs`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "regenerate")]
    generate::main();
}

#[cfg(feature = "regenerate")]
mod generate {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::env;
    use std::fmt::Write as _;
    use std::fs;
    use std::path::{Path, PathBuf};
    use std::rc::Rc;

    use bindgen::callbacks::{DeriveInfo, FieldInfo, ParseCallbacks, TypeKind};

    /// The first line of every generated file: the crate's licence.
    const SPDX: &str = "// SPDX-License-Identifier: MIT OR GPL-2.0-only\n";

    /// What bindgen told us about the header while generating.
    #[derive(Default, Debug)]
    struct Seen {
        /// type name -> (is_union, fields in declaration order as Rust names).
        types: BTreeMap<String, (bool, Vec<String>)>,
        /// `GPUNVME_*` integer macros.
        int_macros: BTreeMap<String, i64>,
    }

    #[derive(Debug)]
    struct Collector(Rc<RefCell<Seen>>);

    // bindgen wants `ParseCallbacks: Debug + UnwindSafe`; the build script is
    // single-threaded, so an Rc<RefCell> is enough.
    impl std::panic::UnwindSafe for Collector {}
    impl std::panic::RefUnwindSafe for Collector {}

    impl ParseCallbacks for Collector {
        fn add_derives(&self, info: &DeriveInfo<'_>) -> Vec<String> {
            if info.kind != TypeKind::Enum {
                self.0
                    .borrow_mut()
                    .types
                    .entry(info.name.to_string())
                    .or_insert_with(|| (info.kind == TypeKind::Union, Vec::new()));
            }
            Vec::new()
        }

        fn field_visibility(&self, info: FieldInfo<'_>) -> Option<bindgen::FieldVisibilityKind> {
            let mut seen = self.0.borrow_mut();
            let entry = seen
                .types
                .entry(info.type_name.to_string())
                .or_insert_with(|| (false, Vec::new()));
            if !entry.1.iter().any(|f| f == info.field_name) {
                entry.1.push(info.field_name.to_string());
            }
            None
        }

        fn int_macro(&self, name: &str, value: i64) -> Option<bindgen::callbacks::IntKind> {
            if name.starts_with("GPUNVME_") {
                self.0
                    .borrow_mut()
                    .int_macros
                    .insert(name.to_string(), value);
            }
            None
        }
    }

    /// Rust keywords bindgen renames by appending `_` (see bindgen's
    /// `rust_mangle`); undo that to get the C field name.
    fn c_field_name(rust: &str) -> String {
        const RENAMED: &[&str] = &[
            "abstract", "alignof", "as", "async", "await", "become", "box", "break", "const",
            "continue", "crate", "do", "dyn", "else", "enum", "extern", "false", "final", "fn",
            "for", "gen", "if", "impl", "in", "let", "loop", "macro", "match", "mod", "move",
            "mut", "offsetof", "override", "priv", "proc", "pub", "pure", "ref", "return", "Self",
            "self", "sizeof", "static", "struct", "super", "trait", "true", "try", "type",
            "typeof", "unsafe", "unsized", "use", "virtual", "where", "while", "yield", "str",
            "bool", "f32", "f64", "usize", "isize", "u128", "i128", "u64", "i64", "u32", "i32",
            "u16", "i16", "u8", "i8",
        ];
        match rust.strip_suffix('_') {
            Some(base) if RENAMED.contains(&base) => base.to_string(),
            _ => rust.to_string(),
        }
    }

    /// One `#define GPUNVME_IOC_X _IOWR(GPUNVME_IOC_MAGIC, nr, struct y)`.
    struct IoctlDef {
        name: String,
        dir: &'static str,
        magic: String,
        nr: String,
        arg: Option<String>,
    }

    /// Finds the ioctl request macros in the header text. Anything named
    /// `GPUNVME_IOC_*` that looks like an `_IO*()` call but can't be parsed is
    /// a build error: silently missing an ioctl is worse than a failed build.
    fn parse_ioctls(header: &str) -> Vec<IoctlDef> {
        let joined = header.replace("\\\n", " ");
        let mut out = Vec::new();
        for line in joined.lines() {
            let line = line.trim();
            let Some(rest) = line.strip_prefix("#define") else {
                continue;
            };
            let rest = rest.trim_start();
            let Some((name, body)) = rest.split_once(char::is_whitespace) else {
                continue;
            };
            if !name.starts_with("GPUNVME_IOC_") {
                continue;
            }
            // Drop a trailing C comment.
            let body = body.split("/*").next().unwrap_or("").trim();
            let (dir, args) = if let Some(a) = body.strip_prefix("_IOWR(") {
                ("readwrite", a)
            } else if let Some(a) = body.strip_prefix("_IOR(") {
                ("read", a)
            } else if let Some(a) = body.strip_prefix("_IOW(") {
                ("write", a)
            } else if let Some(a) = body.strip_prefix("_IO(") {
                ("none", a)
            } else {
                continue; // e.g. GPUNVME_IOC_MAGIC
            };
            let args = args
                .strip_suffix(')')
                .unwrap_or_else(|| panic!("cannot parse ioctl macro {name}: {body}"));
            let parts: Vec<&str> = args.split(',').map(str::trim).collect();
            let (magic, nr, arg) = match (dir, parts.as_slice()) {
                ("none", [m, n]) => (m.to_string(), n.to_string(), None),
                (_, [m, n, t]) => {
                    let t = t
                        .strip_prefix("struct ")
                        .or_else(|| t.strip_prefix("union "))
                        .unwrap_or(t);
                    (m.to_string(), n.to_string(), Some(t.trim().to_string()))
                }
                _ => panic!("cannot parse ioctl macro {name}: {body}"),
            };
            out.push(IoctlDef {
                name: name.to_string(),
                dir,
                magic,
                nr,
                arg,
            });
        }
        out
    }

    /// A C integer literal or a `GPUNVME_*` macro name, as a Rust expression.
    fn c_int_expr(s: &str, macros: &BTreeMap<String, i64>) -> String {
        let t = s.trim_end_matches(['u', 'U', 'l', 'L']);
        if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            if u64::from_str_radix(h, 16).is_ok() {
                return format!("0x{h}");
            }
        } else if t.parse::<u64>().is_ok() {
            return t.to_string();
        }
        if macros.contains_key(s) {
            return format!("crate::{s} as u32");
        }
        panic!(
            "ioctl macro argument `{s}` is neither an integer literal nor a GPUNVME_ integer macro"
        );
    }

    pub(crate) fn main() {
        let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
        let header = manifest.join("../../uapi/gpunvme.h");
        let header = header
            .canonicalize()
            .unwrap_or_else(|e| panic!("cannot find the UAPI header {}: {e}", header.display()));
        println!("cargo:rerun-if-changed={}", header.display());
        println!("cargo:rerun-if-changed=build.rs");
        println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");

        if env::var_os("LIBCLANG_PATH").is_none() {
            let fallback = Path::new("/usr/lib/llvm-19/lib");
            if fallback.join("libclang.so").exists() || fallback.join("libclang-19.so").exists() {
                // SAFETY-equivalent note: the build script is single-threaded here.
                env::set_var("LIBCLANG_PATH", fallback);
            }
        }

        let seen = Rc::new(RefCell::new(Seen::default()));
        let bindings = bindgen::Builder::default()
            .header(header.to_str().expect("UAPI header path is not UTF-8"))
            .allowlist_type("gpunvme_.*")
            .allowlist_var("GPUNVME_.*")
            .use_core()
            .ctypes_prefix("::core::ffi")
            .derive_default(true)
            .derive_debug(true)
            .derive_eq(true)
            .impl_debug(false)
            .generate_comments(true)
            .parse_callbacks(Box::new(Collector(seen.clone())))
            .generate()
            .unwrap_or_else(|e| {
                panic!(
                    "bindgen failed on {}: {e} (is libclang installed? set LIBCLANG_PATH)",
                    header.display()
                )
            });

        let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
        // Each generated file carries the crate's licence, as its source
        // does (the UAPI header's syscall note lets any program use it).
        fs::write(out.join("bindings.rs"), format!("{SPDX}{bindings}")).expect("write bindings.rs");

        let header_text = fs::read_to_string(&header).expect("read UAPI header");
        let seen = seen.borrow();
        let ioctls = parse_ioctls(&header_text);

        // --- ioctls.rs -------------------------------------------------------
        let mut rs = String::from(SPDX);
        let mut table = String::new();
        for io in &ioctls {
            let magic = c_int_expr(&io.magic, &seen.int_macros);
            let nr = c_int_expr(&io.nr, &seen.int_macros);
            let (size, arg) = match &io.arg {
                Some(t) => {
                    assert!(
                        seen.types.contains_key(t),
                        "ioctl {} takes `{t}`, which bindgen did not generate",
                        io.name
                    );
                    (
                        format!("::core::mem::size_of::<crate::{t}>()"),
                        format!("Some(\"{t}\")"),
                    )
                }
                None => ("0".to_string(), "None".to_string()),
            };
            let dir = match io.dir {
                "none" => "crate::ioc::NONE",
                "read" => "crate::ioc::READ",
                "write" => "crate::ioc::WRITE",
                _ => "crate::ioc::READ | crate::ioc::WRITE",
            };
            writeln!(
                rs,
                "/// `{}` from the UAPI header, encoded by [`crate::ioc::ioc`].\n\
                 pub const {}: crate::IoctlRequest = crate::ioc::ioc({dir}, {magic}, {nr}, {size});",
                io.name, io.name
            )
            .unwrap();
            writeln!(
                table,
                "    crate::IoctlDef {{ name: \"{}\", request: {}, arg_type: {arg} }},",
                io.name, io.name
            )
            .unwrap();
        }
        writeln!(rs, "/// Every ioctl request defined in the UAPI header.\npub const IOCTLS: &[crate::IoctlDef] = &[\n{table}];").unwrap();
        fs::write(out.join("ioctls.rs"), rs).expect("write ioctls.rs");

        // --- layout.rs: Rust side + C program ---------------------------------
        let mut rust_lines = String::new();
        let mut c = String::new();
        c.push_str(
            "#include <stddef.h>\n#include <stdio.h>\n#include \"gpunvme.h\"\n\nint main(void)\n{\n",
        );
        for (ty, (is_union, fields)) in seen.types.iter() {
            if !ty.starts_with("gpunvme_") || ty.contains("__bindgen") {
                continue; // anonymous nested types have no C name
            }
            let ctag = if *is_union { "union" } else { "struct" };
            writeln!(
                rust_lines,
                "    v.push(format!(\"type {ty} size {{}} align {{}}\", \
                 ::core::mem::size_of::<crate::{ty}>(), ::core::mem::align_of::<crate::{ty}>()));"
            )
            .unwrap();
            writeln!(
                c,
                "\tprintf(\"type {ty} size %zu align %zu\\n\", sizeof({ctag} {ty}), _Alignof({ctag} {ty}));"
            )
            .unwrap();
            for f in fields {
                if f.starts_with("__bindgen") || f.starts_with("_bitfield") {
                    continue;
                }
                let cf = c_field_name(f);
                writeln!(
                    rust_lines,
                    "    v.push(format!(\"field {ty}.{cf} offset {{}} size {{}}\", \
                     ::core::mem::offset_of!(crate::{ty}, {f}), field_size::<crate::{ty}, _>(|s| &s.{f})));"
                )
                .unwrap();
                writeln!(
                    c,
                    "\tprintf(\"field {ty}.{cf} offset %zu size %zu\\n\", offsetof({ctag} {ty}, {cf}), \
                     sizeof((({ctag} {ty} *)0)->{cf}));"
                )
                .unwrap();
            }
        }
        for io in &ioctls {
            writeln!(
                rust_lines,
                "    v.push(format!(\"ioctl {} {{}}\", crate::{} as u64));",
                io.name, io.name
            )
            .unwrap();
            writeln!(
                c,
                "\tprintf(\"ioctl {} %llu\\n\", (unsigned long long)({}));",
                io.name, io.name
            )
            .unwrap();
        }
        for (name, value) in &seen.int_macros {
            writeln!(rust_lines, "    v.push(format!(\"const {name} {value}\"));").unwrap();
            writeln!(
                c,
                "\tprintf(\"const {name} %lld\\n\", (long long)({name}));"
            )
            .unwrap();
        }
        c.push_str("\treturn 0;\n}\n");

        let layout = format!(
            "{SPDX}/// The directory holding `gpunvme.h` (the source tree's `uapi/`).\n\
             pub const UAPI_INCLUDE_DIR: &str = concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/../../uapi\");\n\n\
             /// A C program that prints [`rust_layout`]'s lines as a C compiler sees\n\
             /// the header. Compile it with `-I` [`UAPI_INCLUDE_DIR`].\n\
             pub const C_LAYOUT_PROGRAM: &str = {c:?};\n\n\
             fn field_size<T, F>(_: fn(&T) -> &F) -> usize {{ ::core::mem::size_of::<F>() }}\n\n\
             /// Size, alignment and field offsets of every UAPI type as rustc lays\n\
             /// out the bindgen types, every ioctl request number as computed in\n\
             /// Rust, and every `GPUNVME_*` integer constant, one fact per line.\n\
             pub fn rust_layout() -> ::std::vec::Vec<::std::string::String> {{\n\
             \x20   let mut v = ::std::vec::Vec::new();\n{rust_lines}    v\n}}\n",
        );
        fs::write(out.join("layout.rs"), layout).expect("write layout.rs");
    }
}
