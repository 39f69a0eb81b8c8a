#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Print README.md's install steps (the sh blocks under "### The kernel
module (DKMS)" and "### The command-line tool") as the commands
tests/dkms/debian-stock.sh runs, so the install a newcomer types cannot
rot: make dkms-debian runs each line, as written, on a fresh Debian trixie
root and then in a VM booted on Debian's own kernel, one KTAP result a line.

Output: one record a README line (a line ending in a backslash joined with
the next), tab-separated:

    KIND <TAB> README LINE (its comment dropped) <TAB> COMMAND <TAB> NOTE

KIND says where and when the line runs:
  apt     in the fresh root, as it is built (tests/dkms/debian-root.sh), in
          README order; the root's cache key hashes these records, so a
          changed line builds a new root;
  reboot  a comment: the reboot is the VM boot on Debian's kernel;
  dkms    in the root, in the checkout's copy (/root/gpunvme);
  vm      in the VM booted on Debian's kernel (tests/dkms/debian-stock.sh);
  cargo   in the root, in the checkout's copy, after the module is built.
COMMAND is the line (":", nothing, for the reboot comment) with only the
substitution NOTE states (NOTE empty: none); `$KREL` in it is Debian's
kernel release, set by the caller. A line of any other shape is an error:
teach this script about it, do not skip it.

    readme_install.py README.md              the records
    readme_install.py --notes README.md      the substitutions, one a line
    readme_install.py --vm-script README.md  the vm lines as a KTAP busybox
        sh test (ktap.sh sourced; debian-stock.sh inlines it, as
        tests/selftests/Makefile does): each line as written, the module
        not loaded before it (an earlier test's is unloaded first, said in
        the output), and where it came from checked after it
"""
import re
import sys

BLOCKS = ("### The kernel module (DKMS)", "### The command-line tool")

# Said once, for every apt line: the root has what the README presupposes
# ("On Debian trixie, with trixie-backports in your apt sources, as root"),
# nothing else changes.
APT_NOTE = ("apt runs with DEBIAN_FRONTEND=noninteractive and APT::Get::Assume-Yes "
            "(no one at a terminal to answer its prompts); the root's sources are "
            "trixie and trixie-backports main, from this machine's Debian archive")
DKMS_NOTE = ("KDIR=/lib/modules/$KREL/build added, the comment's own 'KDIR=... for "
             "another': the root is a chroot, its running kernel is the host's")
VM_NOTE = ("runs in the VM booted on Debian's $KREL (the reboot), whose "
           "/lib/modules/$KREL has the module where DKMS installed it")
CARGO_NOTE = ("cargo is trixie's cargo package (1.85, the crates' rust-version), "
              "not rustup's stable: the fresh root has no rustup, and the one "
              "Rust in it is the one the kernel needs; CARGO_HOME and "
              "CARGO_TARGET_DIR are caches under /var/cache/gpunvme, the only "
              "other change")


def block(text, heading):
    at = text.index(heading)
    start = text.index("```sh\n", at) + len("```sh\n")
    end = text.index("```", start)
    lines, cur = [], ""
    for raw in text[start:end].splitlines():
        if not raw.strip() and not cur:
            continue
        # A continuation: the part before the backslash, then the next line.
        if raw.rstrip().endswith("\\") and not raw.lstrip().startswith("#"):
            cur += raw.rstrip()[:-1].rstrip() + " "
            continue
        cur += raw.strip() if cur else raw.rstrip()
        lines.append(cur)
        cur = ""
    if cur:
        lines.append(cur)
    return lines


def command(line):
    # A comment starts at "  # " (two spaces), as the README writes them.
    return re.sub(r"\s+", " ", re.split(r"\s{2,}#", line, maxsplit=1)[0].strip())


def records(text):
    out = []
    for heading in BLOCKS:
        for line in block(text, heading):
            cmd = command(line)
            if line.lstrip().startswith("#"):
                if "reboot" not in line:
                    raise SystemExit(f"readme_install.py: a comment line this test does not know: {line!r}")
                out.append(("reboot", line.strip(), ":", "the VM boot on Debian's kernel below is the reboot"))
            elif cmd.startswith("apt install "):
                out.append(("apt", cmd, cmd, APT_NOTE))
            elif cmd == "bash tests/dkms/install.sh":
                out.append(("dkms", cmd, "KDIR=/lib/modules/$KREL/build " + cmd, DKMS_NOTE))
            elif cmd == "modprobe gpunvme":
                out.append(("vm", cmd, cmd, VM_NOTE))
            elif cmd.startswith("cargo install "):
                out.append(("cargo", cmd, cmd, CARGO_NOTE))
            else:
                raise SystemExit(f"readme_install.py: an install line this test does not know: {line!r} "
                                 "(teach tests/docs/readme_install.py how to run it)")
    kinds = [r[0] for r in out]
    for k in ("apt", "dkms", "vm", "cargo"):
        if k not in kinds:
            raise SystemExit(f"readme_install.py: no {k} line in README.md's install blocks")
    return out


def sh_name(cmd):
    # A test's name, in double quotes: the shell expands nothing in it.
    return cmd.replace("\\", "\\\\").replace('"', "'").replace("$", "\\$").replace("`", "'")


def vm_script(recs):
    vm = [r for r in recs if r[0] == "vm"]
    out = [
        "#!/bin/sh",
        "# Generated from README.md by tests/docs/readme_install.py --vm-script: do not edit.",
        '. "$(dirname "$0")/ktap.sh" 2>/dev/null || true',
        "KREL=$(uname -r)",
        # Where DKMS put it, as modules.dep (depmod) names it.
        "from_dkms() { [ -d /sys/module/gpunvme ] && grep -E '^updates/dkms/gpunvme\\.ko' \"/lib/modules/$KREL/modules.dep\"; }",
        f"ktap_plan {2 * len(vm)}",
    ]
    for _, name, cmd, note in vm:
        if cmd != "modprobe gpunvme":
            raise SystemExit(f"readme_install.py: no VM check for {cmd!r}")
        n = sh_name(name)
        out += [
            # $KREL is the VM's release (uname -r): expanded there.
            f'ktap_diag "README substitution: {sh_name(note).replace(chr(92) + "$KREL", "$KREL")}"',
            '[ -d /sys/module/gpunvme ] && { ktap_diag "an earlier test left gpunvme loaded: rmmod gpunvme first"; rmmod gpunvme; }',
            f'ktap_check "README: {n}" {cmd}',
            'ktap_check "gpunvme loaded from /lib/modules/$KREL/updates/dkms, where DKMS installed it" from_dkms',
        ]
    out.append("ktap_done")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    mode = args[0] if args[:1] in (["--notes"], ["--vm-script"]) else ""
    if mode:
        args = args[1:]
    if len(args) != 1:
        raise SystemExit(__doc__)
    recs = records(open(args[0]).read())
    if mode == "--vm-script":
        print(vm_script(recs))
        return
    notes = mode == "--notes"
    for kind, name, cmd, note in recs:
        for field in (name, cmd, note):
            assert "\t" not in field and "\n" not in field
        if notes:
            if note:
                print(f"{kind}: {name}: {note}")
        else:
            print("\t".join((kind, name, cmd, note)))


if __name__ == "__main__":
    main()
