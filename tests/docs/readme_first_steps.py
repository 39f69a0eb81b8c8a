#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Turn README.md's "First steps on a spare SSD" block into a KTAP shell
test for the VM (tests/selftests/Makefile builds it as
gpunvme_readme_first_steps.sh; boot 1 runs it), so the steps a newcomer
types cannot rot: each line of the block runs as it is written, with only
these substitutions, each said in the test's output:

- the README's example address 0000:01:00.0 becomes the VM's $GPUNVME_BDF;
- `modprobe gpunvme` becomes `insmod $GPUNVME_DIR/gpunvme.ko` (the README's
  own alternative: the test kernel's VM has no installed module tree for
  it); with --modprobe it runs as written (tests/dkms/debian-stock.sh: the
  DKMS-installed module is in the VM's /lib/modules);
- `gpunvme` is the one in $GPUNVME_DIR (the checkout's build); with
  --cli-dir DIR the one in DIR, put first on PATH (debian-stock.sh:
  /usr/local/bin, where the README's `cargo install` put it; the VM's init
  has no /usr/local/bin on PATH), and a first result checks that it is;
- the lines that look at the root file system's disks (findmnt, lsblk) are
  skipped: the VM's root is an initramfs, not a disk;
- the GPU lines (probe, gpu-run) must fail with the CLI's "no GPU" message:
  the VM has no GPU, and a clear refusal is what the README promises there.

Every other line must exit 0. A README block that changes changes the test.

    readme_first_steps.py [--modprobe] [--cli-dir DIR] README.md
"""
import argparse
import re

HEADING = "## First steps on a spare SSD"
EXAMPLE_BDF = "0000:01:00.0"


def block(text):
    at = text.index(HEADING)
    start = text.index("```sh\n", at) + len("```sh\n")
    end = text.index("```", start)
    return [l for l in text[start:end].splitlines() if l.strip()]


def command(line):
    # A comment starts at "  # " (two spaces), as the README writes them.
    return re.split(r"\s{2,}#", line, maxsplit=1)[0].strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modprobe", action="store_true",
                    help="run `modprobe gpunvme` as written (the module is in /lib/modules)")
    ap.add_argument("--cli-dir", help="run the gpunvme in this directory (first on PATH)")
    ap.add_argument("readme")
    args = ap.parse_args()
    lines = block(open(args.readme).read())
    cli_dir = args.cli_dir
    if cli_dir and not re.fullmatch(r"/[A-Za-z0-9_./-]+", cli_dir):
        raise SystemExit(f"--cli-dir wants a plain absolute path: {cli_dir!r}")
    out = [
        "#!/bin/sh",
        "# Generated from README.md by tests/docs/readme_first_steps.py: do not edit.",
        '. "$(dirname "$0")/ktap.sh" 2>/dev/null || true',
        "DIR=${GPUNVME_DIR:-/opt/gpunvme}",
        "BDF=${GPUNVME_BDF:-0000:00:04.0}",
        f"PATH={cli_dir}:$PATH" if cli_dir else "PATH=$DIR:$PATH",
        "no_gpu() { out=$(\"$@\" 2>&1); rc=$?; printf '%s\\n' \"$out\";"
        " [ $rc != 0 ] && printf '%s' \"$out\" | grep -q 'no GPU'; }",
        "skip() { __ktap_n=$((__ktap_n + 1)); echo \"ok $__ktap_n $1 # SKIP $2\"; }",
        f"ktap_plan {len(lines) + (1 if cli_dir else 0)}",
        f'ktap_diag "README substitution: its {EXAMPLE_BDF} is this VM\'s $BDF"',
    ]
    if cli_dir:
        out.append(f'ktap_diag "README substitution: PATH={cli_dir}:\\$PATH (the VM\'s init has no {cli_dir} on PATH)"')
        out.append(f'ktap_check "the gpunvme on PATH is {cli_dir}/gpunvme" sh -c \'command -v gpunvme; [ "$(command -v gpunvme)" = "$0" ]\' "{cli_dir}/gpunvme"')
    for line in lines:
        cmd = command(line)
        # The test's name is the line, quoted so the shell expands nothing.
        name = cmd.replace("\\", "\\\\").replace('"', "'").replace("$", "\\$").replace("`", "'")
        run = cmd.replace(EXAMPLE_BDF, '"$BDF"')
        if cmd.startswith(("findmnt", "lsblk")):
            out.append(f'skip "README: {name}" "the VM\'s root is an initramfs, not a disk"')
        elif cmd == "modprobe gpunvme" and args.modprobe:
            out.append(f'ktap_check "README: {name}" {run}')
        elif cmd == "modprobe gpunvme":
            out.append(f'ktap_diag "README: {name} -> insmod $DIR/gpunvme.ko"')
            out.append(f'ktap_check "README: {name}" sh -c \'[ -d /sys/module/gpunvme ] || insmod "$0"\' "$DIR/gpunvme.ko"')
        elif re.match(r"gpunvme (probe|gpu-run)\b", cmd):
            out.append(f'ktap_check "README: {name} (no GPU here: refused clearly)" no_gpu {run}')
        else:
            out.append(f'ktap_check "README: {name}" {run}')
    out.append("ktap_done")
    print("\n".join(out))


if __name__ == "__main__":
    main()
