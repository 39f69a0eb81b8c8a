#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""The documentation checks behind tests/docs/check_uapi_reference.sh and
tests/docs/check_links.sh (python3 standard library only).

  docs_check.py uapi  [--header H] [--md M]   the reference against the header
  docs_check.py links [--root DIR] [FILE...]  relative links/images + the SVGs
  docs_check.py self-test                     the checks above fail when they must
  docs_check.py all                           uapi + self-test + links

Output: KTAP-ish "ok N - ..." / "not ok N - ..." lines, then exactly
"N passed, N failed" (", N skipped" is added only when a test was skipped).
Exit status 0 only when nothing failed.

What "the reference matches the header" means (uapi/gpunvme.md conventions):
  - every `#define GPUNVME_*` that is not an ioctl has a table row whose first
    cell is the name and whose second cell is the value, as written in the
    header (comments dropped, whitespace normalised);
  - every ioctl macro (`_IO/_IOR/_IOW/_IOWR`) has a table row
    | name | nr | direction | argument | size | number | that matches the
    header, with the size and the 32-bit ioctl number computed here from the
    struct layout (asm-generic encoding: x86-64, arm64, riscv64), and its own
    heading with an "Errors" part under it;
  - every struct has a heading "struct NAME (SIZE bytes)" followed by a table
    | field | type | offset | ... | with one row per field, in any order,
    type and offset as in the header;
  - nothing in the reference names a GPUNVME_* macro, a struct gpunvme_* or a
    field row that the header no longer has.
When a C compiler is found, one more test compiles the header and compares
its sizes, offsets and ioctl numbers with the ones computed here.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def show(path):
    """A path as the user should read it: relative to the repository when inside it."""
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


class Tap:
    def __init__(self):
        self.n = self.passed = self.failed = self.skipped = 0

    def ok(self, cond, desc, diag=()):
        self.n += 1
        if cond:
            self.passed += 1
            print(f"ok {self.n} - {desc}")
        else:
            self.failed += 1
            print(f"not ok {self.n} - {desc}")
            for d in diag:
                print(f"#   {d}")
        return cond

    def skip(self, desc, why):
        self.n += 1
        self.skipped += 1
        print(f"ok {self.n} - {desc} # SKIP {why}")

    def close(self):
        print(f"1..{self.n}")
        line = f"{self.passed} passed, {self.failed} failed"
        if self.skipped:
            line += f", {self.skipped} skipped"
        print(line)
        return 0 if self.failed == 0 else 1


# ---------------------------------------------------------------- the header

C_TYPES = {
    "__u8": (1, 1), "__s8": (1, 1), "char": (1, 1),
    "__u16": (2, 2), "__s16": (2, 2),
    "__u32": (4, 4), "__s32": (4, 4),
    "__u64": (8, 8), "__s64": (8, 8),
}
IOC_DIRS = {"_IO": 0, "_IOW": 1, "_IOR": 2, "_IOWR": 3}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def norm(s):
    return re.sub(r"\s+", " ", s.strip().strip("`").strip())


def parse_header(path):
    """defines: {name: value}; iocs: {name: (dir, nr, struct)};
    structs: {name: [(field, type, dims)]} in declaration order."""
    with open(path, encoding="utf-8") as f:
        text = strip_comments(f.read())
    defines, iocs = {}, {}
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?:[ \t]+([^\n]*))?$", text, flags=re.M):
        name, value = m.group(1), norm(m.group(2) or "")
        if not name.startswith("GPUNVME_"):
            continue  # the include guard
        io = re.fullmatch(r"(_IO|_IOR|_IOW|_IOWR)\s*\(\s*GPUNVME_IOC_MAGIC\s*,\s*(\w+)\s*(?:,\s*struct\s+(\w+)\s*)?\)", value)
        if io:
            iocs[name] = (io.group(1), int(io.group(2), 0), io.group(3))
        else:
            defines[name] = value
    structs = {}
    for m in re.finditer(r"\bstruct\s+(\w+)\s*\{(.*?)\}\s*;", text, flags=re.S):
        fields = []
        for decl in m.group(2).split(";"):
            decl = norm(decl)
            if not decl:
                continue
            d = re.fullmatch(r"(struct\s+\w+|\w+)\s+(\w+)((?:\s*\[[^\]]+\])*)", decl)
            if not d:
                raise ValueError(f"{path}: struct {m.group(1)}: cannot parse field `{decl}`")
            dims = [norm(x) for x in re.findall(r"\[([^\]]+)\]", d.group(3))]
            fields.append((d.group(2), norm(d.group(1)), dims))
        structs[m.group(1)] = fields
    return defines, iocs, structs


def field_type(ftype, dims):
    return ftype + "".join(f"[{d}]" for d in dims)


def eval_const(expr, defines, depth=0):
    """A define's value as an integer (only the simple forms the header uses)."""
    if depth > 10:
        raise ValueError(f"cannot evaluate `{expr}`")
    e = expr
    for name in re.findall(r"\b[A-Z_][A-Z0-9_]*\b", e):
        if name in defines:
            e = re.sub(rf"\b{name}\b", f"({eval_const(defines[name], defines, depth + 1)})", e)
    e = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", e)
    if not re.fullmatch(r"[0-9a-fA-FxX()+\-*/<>| ]*", e):
        raise ValueError(f"cannot evaluate `{expr}`")
    return int(eval(e, {"__builtins__": {}}, {}))  # digits and operators only


def layout(structs, defines):
    """{struct: (size, align, {field: offset})} on an LP64 ABI."""
    out = {}

    def one(name):
        if name in out:
            return out[name]
        off, align, offs = 0, 1, {}
        for fname, ftype, dims in structs[name]:
            if ftype.startswith("struct "):
                size, al, _ = one(ftype.split()[1])
            elif ftype in C_TYPES:
                size, al = C_TYPES[ftype]
            else:
                raise ValueError(f"struct {name}: unknown type {ftype}")
            for d in dims:
                size *= eval_const(d, defines)
            off = (off + al - 1) // al * al
            offs[fname] = off
            off += size
            align = max(align, al)
        size = (off + align - 1) // align * align
        out[name] = (size, align, offs)
        return out[name]

    for s in structs:
        one(s)
    return out


def ioc_number(direction, nr, size, magic):
    return (IOC_DIRS[direction] << 30) | (size << 16) | (magic << 8) | nr


# ------------------------------------------------------------- the reference

def md_tables(text):
    """(line_no, [cells]) for every markdown table row (header/separator rows too)."""
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("|") and s.endswith("|") and len(s) > 1:
            rows.append((i, [c.strip() for c in s[1:-1].split("|")]))
    return rows


def md_sections(text):
    """[(level, title, body_lines)] for every ATX heading outside code fences."""
    sections, cur, fence = [], None, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            cur = [len(m.group(1)), m.group(2), []]
            sections.append(cur)
        elif cur is not None:
            cur[2].append(line)
    return [(lv, t, "\n".join(b)) for lv, t, b in sections]


def section_with_subsections(sections, idx):
    lv = sections[idx][0]
    body = [sections[idx][2]]
    for lv2, t2, b2 in sections[idx + 1:]:
        if lv2 <= lv:
            break
        body.append(t2 + "\n" + b2)
    return "\n".join(body)


def check_uapi(tap, header, md, expect_clean=True):
    """All reference tests; returns the number of failures."""
    start = tap.failed
    try:
        defines, iocs, structs = parse_header(header)
        lay = layout(structs, defines)
        magic = eval_const(defines["GPUNVME_IOC_MAGIC"], defines)
    except (OSError, ValueError, KeyError) as e:
        tap.ok(False, f"parse {show(header)}", [str(e)])
        return tap.failed - start
    try:
        with open(md, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        tap.ok(False, f"read {md}", [str(e)])
        return tap.failed - start
    hname, mname = show(header), show(md)
    rows = md_tables(text)
    by_first = {}
    for ln, cells in rows:
        if cells:
            by_first.setdefault(norm(cells[0]), []).append((ln, [norm(c) for c in cells]))
    sections = md_sections(text)

    # Plain defines: name and value.
    for name, value in defines.items():
        found = by_first.get(name, [])
        good = [ln for ln, c in found if len(c) > 1 and c[1] == value]
        diag = [f"{hname}: #define {name} {value}"]
        if found and not good:
            diag += [f"{mname}:{ln}: documents value `{c[1] if len(c) > 1 else ''}`" for ln, c in found]
        elif not found:
            diag.append(f"{mname}: no table row starting with `{name}`")
        tap.ok(bool(good), f"define {name} = {value} is documented", diag)

    # ioctls: number, direction, struct, size, value; a section with errors.
    for name, (direction, nr, sname) in iocs.items():
        size = lay[sname][0] if sname else 0
        want = [name, f"0x{nr:02x}", direction, f"struct {sname}" if sname else "none",
                str(size), f"0x{ioc_number(direction, nr, size, magic):08x}"]
        found = by_first.get(name, [])
        good = [ln for ln, c in found if [x.lower() for x in c[:6]] == [x.lower() for x in want]]
        diag = [f"{hname}: {name} = {direction}(GPUNVME_IOC_MAGIC, 0x{nr:02x}, struct {sname}); want row | "
                + " | ".join(want) + " |"]
        diag += [f"{mname}:{ln}: has | " + " | ".join(c[:6]) + " |" for ln, c in found]
        tap.ok(bool(good), f"ioctl {name} ({direction}, nr 0x{nr:02x}, struct {sname}, {size} bytes) is in the ioctl table", diag)
        idx = [i for i, (lv, t, b) in enumerate(sections)
               if re.match(rf"{re.escape(name)}\b", norm(t.replace("`", "")))]
        has_err = bool(idx) and re.search(r"\bErrors?\b", section_with_subsections(sections, idx[0])) is not None
        tap.ok(has_err, f"ioctl {name} has its own section with its errors",
               [f"{mname}: want a heading `{name}` with an Errors part under it"])

    # Structs: heading with size; field table rows with type and offset.
    for sname, fields in structs.items():
        size, _, offs = lay[sname]
        idx = [i for i, (lv, t, b) in enumerate(sections)
               if re.search(rf"\bstruct {re.escape(sname)}\b", t.replace("`", ""))]
        heads = [sections[i][1] for i in idx]
        sized = [i for i in idx if re.search(rf"\(\s*{size}\s+bytes\s*\)", sections[i][1])]
        tap.ok(bool(sized), f"struct {sname} ({size} bytes) has a section",
               [f"{mname}: want a heading `struct {sname} ({size} bytes)`"] + [f"found heading: {h}" for h in heads])
        body = sections[sized[0]][2] if sized else (sections[idx[0]][2] if idx else "")
        frows = {}
        for ln, cells in md_tables(body):
            if cells and re.fullmatch(r"`?\w+`?", cells[0]) and cells[0].strip("`") not in ("field",):
                frows[norm(cells[0])] = [norm(c) for c in cells]
        for fname, ftype, dims in fields:
            t = field_type(ftype, dims)
            want = [fname, t, str(offs[fname])]
            got = frows.get(fname)
            tap.ok(got is not None and got[:3] == want,
                   f"field {sname}.{fname} ({t}, offset {offs[fname]}) is documented",
                   [f"want row | {' | '.join(want)} | under `struct {sname}`",
                    f"found: | {' | '.join(got[:3])} |" if got else "found: no row"])
        stale = [f for f in frows if f not in {x[0] for x in fields}]
        tap.ok(not stale, f"struct {sname}: the reference documents no field the header lacks",
               [f"{mname}: field `{f}` is not in struct {sname} of {hname}" for f in stale])

    # Nothing documented that the header lacks.
    known = set(defines) | set(iocs)
    tokens = set(re.findall(r"\bGPUNVME_[A-Z0-9_]*[A-Z0-9]\b(?!_?\*)", text))
    stale = sorted(t for t in tokens if t not in known)
    tap.ok(not stale, f"{mname} names no GPUNVME_* macro that {hname} lacks",
           [f"{mname} documents {t}, which {hname} does not define" for t in stale])
    snames = set(re.findall(r"\bstruct\s+(gpunvme_\w+)", text))
    stale = sorted(s for s in snames if s not in structs)
    tap.ok(not stale, f"{mname} names no struct that {hname} lacks",
           [f"{mname} documents struct {s}, which {hname} does not declare" for s in stale])
    return tap.failed - start


def cc_crosscheck(tap, header):
    """Compile the header; compare sizes, offsets and ioctl numbers."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        tap.skip("the C compiler agrees with the layout computed here", "no C compiler")
        return
    try:
        defines, iocs, structs = parse_header(header)
        lay = layout(structs, defines)
        magic = eval_const(defines["GPUNVME_IOC_MAGIC"], defines)
    except (OSError, ValueError, KeyError) as e:
        tap.ok(False, "the C compiler agrees with the layout computed here", [f"cannot parse the header: {e}"])
        return
    lines, want = [], []
    for s, fields in structs.items():
        lines.append(f'printf("sizeof {s} %zu\\n", sizeof(struct {s}));')
        want.append(f"sizeof {s} {lay[s][0]}")
        for f, _, _ in fields:
            lines.append(f'printf("offsetof {s}.{f} %zu\\n", offsetof(struct {s}, {f}));')
            want.append(f"offsetof {s}.{f} {lay[s][2][f]}")
    for name, (d, nr, sname) in iocs.items():
        lines.append(f'printf("{name} 0x%08x\\n", (unsigned int){name});')
        size = lay[sname][0] if sname else 0
        want.append(f"{name} 0x{ioc_number(d, nr, size, magic):08x}")
    prog = ("#include <stdio.h>\n#include <stddef.h>\n"
            f'#include "{os.path.abspath(header)}"\nint main(void)\n{{\n' + "\n".join(lines) + "\nreturn 0;\n}\n")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        with open(src, "w") as f:
            f.write(prog)
        r = subprocess.run([cc, "-Wall", "-o", exe, src], capture_output=True, text=True)
        if r.returncode != 0:
            if re.search(r"linux/\w+\.h.*(No such file|not found)", r.stderr):
                tap.skip("the C compiler agrees with the layout computed here", "no kernel UAPI headers (linux-libc-dev)")
            else:
                tap.ok(False, f"the C compiler ({cc}) builds the header", r.stderr.splitlines()[:10])
            return
        got = subprocess.run([exe], capture_output=True, text=True).stdout.split("\n")[:-1]
    diff = [f"computed `{w}`, {cc} says `{g}`" for w, g in zip(want, got) if w != g]
    tap.ok(not diff and len(got) == len(want),
           f"the C compiler ({os.path.basename(cc)}) agrees with the layout computed here ({len(want)} values)", diff[:20])


# --------------------------------------------------------- links and pictures

def slug(title, seen):
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)
    t = t.replace("`", "").replace("*", "").strip().lower()
    t = "".join(ch for ch in t if ch.isalnum() or ch in " -_")
    t = t.replace(" ", "-")
    n = seen.get(t, 0)
    seen[t] = n + 1
    return t if n == 0 else f"{t}-{n}"


def anchors(path):
    seen = {}
    with open(path, encoding="utf-8") as f:
        return {slug(t, seen) for _, t, _ in md_sections(f.read())}


def md_links(text):
    """(line, target) of inline links/images, reference definitions and
    <img src>, outside code fences and code spans; link text may span lines."""
    lines, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            lines.append("")
            continue
        lines.append("" if fence else re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line))
    body = "\n".join(lines)
    out = []

    def line_of(pos):
        return body.count("\n", 0, pos) + 1

    for m in re.finditer(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", body):
        out.append((line_of(m.start(1)), m.group(1)))
    for m in re.finditer(r"^[ \t]*\[[^\]]+\]:[ \t]*<?(\S+?)>?(?:\s|$)", body, flags=re.M):
        out.append((line_of(m.start(1)), m.group(1)))
    for m in re.finditer(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", body):
        out.append((line_of(m.start(1)), m.group(1)))
    return sorted(out)


def doc_files(root):
    try:
        r = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard",
                            "*.md", "*.svg"], capture_output=True, text=True, check=True)
        files = sorted(set(r.stdout.split()))
    except (OSError, subprocess.CalledProcessError):
        files = []
    files = [f for f in files if os.path.exists(os.path.join(root, f))]
    if not files:
        files = [f for f in ("README.md", "rust/README.md", "userspace/README.md", "tests/README.md",
                             "uapi/gpunvme.md", "uapi/architecture.svg", "rust/bridge/bridge.md",
                             "tests/hardware/README.md", "kernels/README.md")
                 if os.path.exists(os.path.join(root, f))]
    return files


def check_svg(tap, path, name):
    try:
        tree = ET.parse(path)
    except (ET.ParseError, OSError) as e:
        tap.ok(False, f"{name} parses as XML", [str(e)])
        return
    tap.ok(True, f"{name} parses as XML")
    r = tree.getroot()
    problems = []
    if r.tag != "{http://www.w3.org/2000/svg}svg":
        problems.append(f"root element is {r.tag}, not svg in the SVG namespace")
    if not re.fullmatch(r"\s*-?[\d.]+[ ,]+-?[\d.]+[ ,]+[\d.]+[ ,]+[\d.]+\s*", r.get("viewBox", "")):
        problems.append("no usable viewBox")
    for el in r.iter():
        tag = el.tag.split("}")[-1]
        if tag in ("image", "foreignObject", "script"):
            problems.append(f"<{tag}> element (the picture must be self-contained)")
        for k, v in el.attrib.items():
            if k.split("}")[-1] == "href" and not v.startswith("#"):
                problems.append(f"<{tag}> refers to {v}")
        if tag == "style" and re.search(r"@import|@font-face|url\(", el.text or ""):
            problems.append("<style> loads something from outside")
    tap.ok(not problems, f"{name} is a self-contained SVG with a viewBox", problems)


def check_links(tap, root, files):
    for rel in files:
        path = os.path.join(root, rel)
        if rel.endswith(".svg"):
            check_svg(tap, path, rel)
            continue
        with open(path, encoding="utf-8") as f:
            links = md_links(f.read())
        bad = []
        for ln, target in links:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):
                continue  # http:, https:, mailto: ...
            file_part, _, frag = target.partition("#")
            dest = path if not file_part else os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if not os.path.exists(dest):
                bad.append(f"{rel}:{ln}: {target}: {os.path.relpath(dest, root)} does not exist")
            elif frag and dest.endswith(".md") and frag not in anchors(dest):
                bad.append(f"{rel}:{ln}: {target}: no heading with anchor #{frag} in {os.path.relpath(dest, root)}")
        tap.ok(not bad, f"{rel}: all {len(links)} relative links and images resolve", bad)


# ------------------------------------------------------------------ self-test

def run_self(args):
    r = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def self_test(tap, header, md):
    with open(header, encoding="utf-8") as f:
        orig = f.read()

    def mutate(desc, new_text, must_name):
        with tempfile.TemporaryDirectory() as d:
            h = os.path.join(d, "gpunvme.h")
            with open(h, "w", encoding="utf-8") as f:
                f.write(new_text)
            rc, out = run_self(["uapi", "--header", h, "--md", md])
        named = [l for l in out.splitlines() if all(w in l for w in must_name)]
        ok = rc != 0 and re.search(r"^not ok ", out, flags=re.M) and named and re.search(
            r"^\d+ passed, [1-9]\d* failed", out, flags=re.M)
        tap.ok(bool(ok), f"self-test: {desc} makes the checker fail, naming {' '.join(must_name)}",
               [f"exit {rc}; lines naming it: {len(named)}"] + ["  " + l for l in out.splitlines()
                                                               if l.startswith("not ok")][:8])

    def before_guard(text, add):
        i = text.rfind("#endif")
        return text[:i] + add + text[i:] if i >= 0 else text + add

    def in_struct(name, fn):
        def m(text):
            st = re.search(rf"struct {name}\s*\{{.*?\}};", text, flags=re.S)
            if not st:
                return None
            new = fn(st.group(0))
            return None if new in (None, st.group(0)) else text[:st.start()] + new + text[st.end():]
        return m

    def sub_once(pattern, repl):
        def m(text):
            new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
            return new if n else None
        return m

    mutations = [
        ("an undocumented ioctl in a copy of the header",
         lambda t: before_guard(t, "#define GPUNVME_IOC_FAKE _IOW(GPUNVME_IOC_MAGIC, 0x7f, struct gpunvme_unmap)\n"),
         ["GPUNVME_IOC_FAKE"]),
        ("an undocumented field in a copy of the header",
         in_struct("gpunvme_unmap", lambda b: b.replace("{", "{\n\t__u32 fake_field;\n\t__u32 fake_pad;", 1)),
         ["gpunvme_unmap.fake_field"]),
        ("a field renamed in a copy of the header (the old name is stale in the reference)",
         in_struct("gpunvme_unmap", lambda b: re.sub(r"\bhandle;", "cookie;", b)),
         ["`handle`", "not in struct gpunvme_unmap"]),
        ("a define removed from a copy of the header (stale in the reference)",
         sub_once(r"^[ \t]*#[ \t]*define[ \t]+GPUNVME_EXPORT_CQ\b.*\n", ""),
         ["documents GPUNVME_EXPORT_CQ"]),
        ("a define's value changed in a copy of the header",
         sub_once(r"^([ \t]*#[ \t]*define[ \t]+GPUNVME_MIN_QUEUE_DEPTH[ \t]+)(\S+)", r"\1(\2 + 1)"),
         ["GPUNVME_MIN_QUEUE_DEPTH"]),
        ("an undocumented struct in a copy of the header",
         lambda t: before_guard(t, "struct gpunvme_fake {\n\t__u32 size;\n\t__u32 version;\n};\n"),
         ["struct gpunvme_fake"]),
        ("a struct that grew (sizes and ioctl numbers change) in a copy of the header",
         in_struct("gpunvme_unmap", lambda b: re.sub(r"reserved\[(\d+)\]", lambda m: f"reserved[{int(m.group(1)) + 1}]", b)),
         ["GPUNVME_IOC_UNMAP"]),
    ]
    for desc, fn, must_name in mutations:
        new_text = fn(orig)
        if new_text is None:
            tap.ok(False, f"self-test: {desc}",
                   ["the header no longer has what this mutation changes: update self_test() in tests/docs/docs_check.py"])
            continue
        mutate(desc, new_text, must_name)

    # Links and pictures: a broken file link, a broken anchor, a bad SVG.
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "a.md"), "w") as f:
            f.write("# Title\n\n[ok](#title) [gone](missing.md) [bad anchor](#nowhere)\n"
                    "![pic](pic.svg) [text over\ntwo lines](gone2.md) `[in a span](ignored.md)`\n\n"
                    "```\n[in code](ignored.md)\n```\n")
        with open(os.path.join(d, "pic.svg"), "w") as f:
            f.write('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><text>unclosed</svg>')
        rc, out = run_self(["links", "--root", d, "a.md", "pic.svg"])
    want = ["missing.md does not exist", "anchor #nowhere", "gone2.md does not exist",
            "not ok 2 - pic.svg parses as XML"]
    lost = [w for w in want if w not in out]
    tap.ok(rc != 0 and not lost and "ignored.md" not in out,
           "self-test: a missing file (also behind link text on two lines), a missing anchor and a broken SVG make the link check fail",
           [f"exit {rc}; not reported: {lost}"] + out.splitlines()[:8])


# ------------------------------------------------------------------------ main

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["uapi", "links", "self-test", "all"])
    p.add_argument("--header", default=os.path.join(ROOT, "uapi", "gpunvme.h"))
    p.add_argument("--md", default=os.path.join(ROOT, "uapi", "gpunvme.md"))
    p.add_argument("--root", default=ROOT)
    p.add_argument("files", nargs="*")
    a = p.parse_intermixed_args()
    tap = Tap()
    print("KTAP version 1")
    try:
        run_checks(tap, a)
    except Exception as e:  # a crash is one failure, and the closing line still comes
        tap.ok(False, "the docs checker ran to the end", [f"{type(e).__name__}: {e}"])
    return tap.close()


def run_checks(tap, a):
    if a.what in ("uapi", "all"):
        print(f"# {show(a.md)} against {show(a.header)}")
        check_uapi(tap, a.header, a.md)
        if a.what == "all":
            cc_crosscheck(tap, a.header)
    if a.what in ("self-test", "all"):
        print("# self-test: the checks must fail on broken input")
        self_test(tap, a.header, a.md)
    if a.what in ("links", "all"):
        files = a.files or doc_files(a.root)
        print(f"# links and pictures in {len(files)} file(s)")
        check_links(tap, a.root, files)


if __name__ == "__main__":
    sys.exit(main())
