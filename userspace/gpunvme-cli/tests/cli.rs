// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Runs the built `gpunvme` binary.

use std::fs;
use std::os::unix::fs::{symlink, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gpunvme(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpunvme"))
        .args(args)
        .output()
        .expect("run gpunvme")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(p: &Path, s: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, s).unwrap();
}

fn fake_sysfs(tag: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-sysfs-{tag}"));
    let _ = fs::remove_dir_all(&root);
    let pci = root.join("bus/pci");
    write(&pci.join("drivers/nvme/unbind"), "");
    write(&pci.join("drivers_probe"), "");
    let d = pci.join("devices/0000:03:00.0");
    write(&d.join("class"), "0x010802\n");
    write(&d.join("vendor"), "0x144d\n");
    write(&d.join("device"), "0xa808\n");
    write(&d.join("driver_override"), "(null)\n");
    symlink("../../drivers/nvme", d.join("driver")).unwrap();
    write(&d.join("nvme/nvme0/nvme0n1/dev"), "259:0\n");
    let g = pci.join("devices/0000:00:02.0");
    write(&g.join("class"), "0x030000\n");
    write(&g.join("vendor"), "0x8086\n");
    write(&g.join("device"), "0x1234\n");
    root
}

#[test]
fn help_lists_exactly_the_subcommands() {
    let o = gpunvme(&["--help"]);
    assert!(o.status.success());
    let out = stdout(&o);
    let section = out.split("Commands:").nth(1).expect("a Commands section");
    let section = section.split("Options:").next().unwrap();
    let names: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        names,
        [
            "list",
            "info",
            "bind",
            "unbind",
            "probe",
            "read",
            "write",
            "verify",
            "pattern",
            "bench",
            "gpu-run",
            "sriov",
            "completions",
            "man",
            "help"
        ],
        "{out}"
    );
    for sub in [
        "list", "info", "bind", "unbind", "probe", "read", "write", "verify", "pattern", "bench",
        "gpu-run", "sriov",
    ] {
        let o = gpunvme(&[sub, "--help"]);
        assert!(o.status.success(), "{sub} --help");
    }
    assert!(stdout(&gpunvme(&["unbind", "--help"])).contains("--to-nvme"));
    let i = stdout(&gpunvme(&["info", "--help"]));
    for opt in [
        "--output-format",
        "DEVICE",
        "/dev/gpunvmeN",
        "IOMMU mode",
        "shared, owner",
    ] {
        assert!(i.contains(opt), "info --help lacks {opt}");
    }
    for sub in ["read", "write", "verify"] {
        let h = stdout(&gpunvme(&[sub, "--help"]));
        for opt in [
            "DEVICE",
            "--namespace-id",
            "--start-block",
            "--block-count",
            "--qd",
            "--max-cmd-blocks",
            "--output-format",
            "--no-range-check",
            "--timeout-ms",
            "--owner",
            "--gpu",
            "udmabuf",
            "raw queue pair",
            "shared queue pair",
        ] {
            assert!(h.contains(opt), "{sub} --help lacks {opt}");
        }
        assert!(!h.contains("--bridged"), "{sub} --help: {h}");
    }
    assert!(stdout(&gpunvme(&["write", "--help"])).contains("--pattern"));
    let b = stdout(&gpunvme(&["bench", "--help"]));
    for opt in [
        "--block-device",
        "--qd",
        "--qpairs",
        "--runtime",
        "--ramp-time",
        "--rw",
        "--rwmixread",
        "--bs",
        "--iodepth",
        "--numjobs",
        "--cpus-allowed",
        "--gpu",
        "--ops",
        "--output-format",
        "--range",
        "--owner",
        "shared/raw",
    ] {
        assert!(b.contains(opt), "bench --help lacks {opt}");
    }
    let g = stdout(&gpunvme(&["gpu-run", "--help"]));
    for opt in [
        "--kernel",
        "--qpairs",
        "--qd",
        "--cmds",
        "--cmd-blocks",
        "--start-block",
        "--pattern",
        "--owner",
        "--code-objects",
        "--gpu",
        "--timeout-ms",
        "--output-format",
        "read-verify",
        "shared queue pairs",
    ] {
        assert!(g.contains(opt), "gpu-run --help lacks {opt}");
    }
    assert!(!g.contains("--mode"), "{g}");
    assert!(stdout(&gpunvme(&["probe", "--help"])).contains("IOMMU mode"));
}

#[test]
fn owner_flag_on_a_missing_node_fails_cleanly() {
    for args in [
        vec!["read", "gpunvme97", "-s", "0", "--owner"],
        vec!["bench", "gpunvme97", "--owner", "--ops", "1"],
        vec!["gpu-run", "gpunvme97", "--kernel", "write", "--owner"],
        vec!["info", "/nonexistent/gpunvme97n1"],
    ] {
        let o = gpunvme(&args);
        assert!(!o.status.success(), "{args:?}");
        let e = stderr(&o);
        assert!(e.contains("gpunvme97"), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
    }
    // The mode flags of UAPI version 1 are gone.
    assert!(!gpunvme(&["read", "gpunvme97", "-s", "0", "--bridged"])
        .status
        .success());
    let e = stderr(&gpunvme(&[
        "gpu-run",
        "gpunvme97",
        "--kernel",
        "write",
        "--mode",
        "direct",
    ]));
    assert!(e.contains("--mode"), "{e}");
}

#[test]
fn gpu_run_without_a_controller_node_fails_cleanly() {
    let o = gpunvme(&["gpu-run", "gpunvme97", "--kernel", "write"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("/dev/gpunvme97"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn pattern_prints_the_expected_blocks() {
    let o = gpunvme(&["pattern", "-p", "7", "-s", "100", "-c", "3", "-b", "512"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout.len(), 3 * 512);
    for (j, w) in o.stdout.chunks(8).enumerate() {
        let off = 100 * 512 + 8 * j as u64;
        assert_eq!(w, gpunvme::pattern::word(7, off).to_le_bytes());
    }
    // The byte offset decides: a 4096-byte LBA 101 holds 512-byte LBAs
    // 808..816.
    let big = gpunvme(&[
        "pattern",
        "--pattern",
        "7",
        "--start-block",
        "101",
        "--block-size",
        "4k",
    ]);
    assert_eq!(big.stdout.len(), 4096);
    let small = gpunvme(&["pattern", "-p", "7", "-s", "808", "-c", "8"]);
    assert_eq!(big.stdout, small.stdout);
    assert!(!gpunvme(&["pattern", "-p", "1", "-s", "0", "-b", "3"])
        .status
        .success());
}

/// `gpunvme pattern` and the GPU examples' `pattern(seed, off)` of
/// kernels/examples/example.h make the same bytes: the header compiled as
/// host C++ (as kernels/hostrun does) prints its words for a few seeds and
/// offsets. Skipped, saying so, without a host C++ compiler.
#[test]
fn pattern_matches_the_gpu_examples() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let cxx = ["clang++-19", "clang++", "g++"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok());
    let Some(cxx) = cxx else {
        eprintln!("SKIP: no host C++ compiler (clang++-19, clang++, g++)");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pattern-cxx");
    fs::create_dir_all(&dir).unwrap();
    let src = dir.join("p.cpp");
    fs::write(
        &src,
        r#"#include <cstdio>
#include <cstdlib>
#include "example.h"
int main(int argc, char **argv)
{
	unsigned long long seed = strtoull(argv[1], 0, 0), off = strtoull(argv[2], 0, 0);
	for (int j = 0; j < 64; j++)
		printf("%016llx\n", (unsigned long long)gx::pattern(seed, off + 8ull * j));
	return 0;
}
"#,
    )
    .unwrap();
    let bin = dir.join("p");
    let o = Command::new(cxx)
        .args(["-std=c++17", "-O1", "-x", "c++"])
        .arg(format!("-I{root}/kernels/include"))
        .arg(format!("-I{root}/kernels/examples"))
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(o.status.success(), "{cxx}: {}", stderr(&o));
    for (seed, lba, bs) in [
        (1u64, 0u64, 512u64),
        (7, 100, 512),
        (42, 3, 4096),
        (u64::MAX, 1 << 30, 512),
    ] {
        let cpp = Command::new(&bin)
            .args([seed.to_string(), (lba * bs).to_string()])
            .output()
            .unwrap();
        let want: Vec<u8> = stdout(&cpp)
            .lines()
            .flat_map(|l| u64::from_str_radix(l, 16).unwrap().to_le_bytes())
            .collect();
        let (s, l, b) = (seed.to_string(), lba.to_string(), bs.to_string());
        let got = gpunvme(&["pattern", "-p", &s, "-s", &l, "-b", &b]).stdout;
        assert_eq!(
            &got[..512],
            &want[..],
            "seed {seed} LBA {lba} ({bs}-byte blocks)"
        );
    }
}

#[test]
fn exit_codes_usage_failure_and_documented() {
    // Usage errors are clap's 2; could-not-run is 1.
    assert_eq!(gpunvme(&["read", "gpunvme97"]).status.code(), Some(2));
    assert_eq!(gpunvme(&["bind", "not-a-bdf"]).status.code(), Some(2));
    assert_eq!(gpunvme(&["info", "8"]).status.code(), Some(2));
    assert_eq!(
        gpunvme(&["read", "gpunvme97", "-s", "0"]).status.code(),
        Some(1)
    );
    // info /dev/gpunvmeN is a device, not a usage error.
    let o = gpunvme(&["info", "/dev/gpunvme97"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let h = stdout(&gpunvme(&["verify", "--help"]));
    assert!(h.contains("3    data mismatch"), "{h}");
    assert!(h.contains("130  interrupted"), "{h}");
}

#[test]
fn completions_and_man_page() {
    for (sh, want) in [
        ("bash", "_gpunvme()"),
        ("zsh", "#compdef gpunvme"),
        ("fish", "complete -c gpunvme"),
    ] {
        let o = gpunvme(&["completions", sh]);
        assert!(o.status.success(), "{sh}");
        let out = stdout(&o);
        assert!(out.contains(want), "{sh}: {out:.200}");
        assert!(out.contains("start-block"), "{sh}");
    }
    let o = gpunvme(&["man"]);
    assert!(o.status.success());
    let m = stdout(&o);
    assert!(
        m.starts_with(".ie") || m.contains(".TH gpunvme"),
        "{m:.300}"
    );
    assert!(
        m.contains("gpunvme\\-read") || m.contains("read"),
        "{m:.300}"
    );
}

#[test]
fn io_commands_on_a_missing_node_fail_cleanly() {
    let o = gpunvme(&["read", "gpunvme97", "-s", "0"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("/dev/gpunvme97"), "{e}");
    assert!(
        !gpunvme(&["write", "gpunvme97", "-s", "0"]).status.success(),
        "--pattern is required"
    );
}

#[test]
fn list_reads_sysfs() {
    let root = fake_sysfs("list");
    let o = gpunvme(&["list", "--sysfs-root", root.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("0000:03:00.0"), "{out}");
    assert!(out.contains("144d:a808"), "{out}");
    assert!(out.contains("nvme0: nvme0n1"), "{out}");
    assert!(!out.contains("0000:00:02.0"), "{out}");

    let o = gpunvme(&["list", "-o", "json", "--sysfs-root", root.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["bdf"], "0000:03:00.0");
    assert_eq!(v[0]["driver"], "nvme");
    assert_eq!(v[0]["vendor"], 0x144d);
}

#[test]
fn errors_are_one_line_and_fail() {
    let root = fake_sysfs("errors");
    let r = root.to_str().unwrap();
    for args in [
        vec!["info", "gpunvme4242"],
        vec!["info", "0000:03:00.0", "--sysfs-root", r],
        vec!["info", "03:00.0", "--sysfs-root", r],
        vec!["unbind", "/dev/gpunvme3", "--sysfs-root", r],
        vec!["bind", "0000:00:02.0", "--sysfs-root", r],
        vec!["bind", "0000:03:00.0", "--sysfs-root", r],
        vec!["unbind", "0000:03:00.0", "--sysfs-root", r],
    ] {
        let o = gpunvme(&args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("gpunvme: "), "{args:?}: {err}");
    }
    let err = stderr(&gpunvme(&["info", "0000:03:00.0", "--sysfs-root", r]));
    assert!(err.contains("bound to nvme, not gpunvme"), "{err}");
    let err = stderr(&gpunvme(&["bind", "0000:03:00.0", "--sysfs-root", r]));
    assert!(err.contains("gpunvme driver is not loaded"), "{err}");
    let err = stderr(&gpunvme(&["info", "/dev/gpunvme4242"]));
    assert!(err.contains("/dev/gpunvme4242"), "{err}");
}

#[test]
fn probe_always_reports() {
    let root = fake_sysfs("probe");
    let o = gpunvme(&["probe", "--sysfs-root", root.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("Doorbell mapping: "), "{out}");
    assert!(out.contains("tried libamdhip64.so"), "{out}");
    assert!(out.contains("gpunvme module: not loaded"), "{out}");
    assert!(
        out.contains("shared queue pairs (the default) always go through the module's relay"),
        "{out}"
    );

    let o = gpunvme(&[
        "probe",
        "-o",
        "json",
        "--sysfs-root",
        root.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mode = v["gpu"]["doorbell"].as_str().unwrap();
    assert!(["direct", "bridge only", "none"].contains(&mode), "{mode}");
    assert_eq!(v["gpunvme_module_loaded"], false);
    assert!(!v["gpu"]["attempts"].as_array().unwrap().is_empty());
    assert_eq!(v["controllers"], serde_json::json!([]));
}

#[test]
fn probe_says_what_became_of_the_self_test() {
    let root = fake_sysfs("probe-selftest");
    let r = root.to_str().unwrap();
    let o = gpunvme(&["probe", "--skip-self-test", "--sysfs-root", r]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("\nself-test SKIPPED (--skip-self-test): nothing checked"),
        "{}",
        stdout(&o)
    );
    let o = gpunvme(&["probe", "--skip-self-test", "-o", "json", "--sysfs-root", r]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["self_test"]["skipped"], true, "{v}");
    // Without the flag it ran (a GPU and the code objects here) or says why not.
    let o = gpunvme(&["probe", "-o", "json", "--sysfs-root", r]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let st = &v["self_test"];
    assert_eq!(st["skipped"], false, "{v}");
    assert!(st["not_run"].is_string() || st["cells"].is_array(), "{v}");
    // A named device must be tested: it cannot be here, so probe fails,
    // after its report.
    let o = gpunvme(&["probe", "0000:99:00.0", "--sysfs-root", r]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("Doorbell mapping: "), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("self-test could not run"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn probe_reports_each_bound_controller() {
    // Bound to gpunvme, but its node cannot be opened here: probe still
    // answers, naming the controller and why it has no IOMMU mode for it.
    let root = fake_sysfs("probe-bound");
    let pci = root.join("bus/pci");
    write(&pci.join("drivers/gpunvme/bind"), "");
    let d = pci.join("devices/0000:04:00.0");
    write(&d.join("class"), "0x010802\n");
    write(&d.join("vendor"), "0x1b36\n");
    write(&d.join("device"), "0x0010\n");
    write(&d.join("driver_override"), "gpunvme\n");
    symlink("../../drivers/gpunvme", d.join("driver")).unwrap();
    let r = root.to_str().unwrap();
    let o = gpunvme(&["probe", "--sysfs-root", r]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("gpunvme module: loaded"), "{out}");
    assert!(out.contains("controller 0000:04:00.0 ("), "{out}");
    let o = gpunvme(&["probe", "-o", "json", "--sysfs-root", r]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["controllers"][0]["bdf"], "0000:04:00.0");
    assert!(v["controllers"][0]["error"].is_string(), "{v}");
}

#[test]
fn sriov_refuses_with_errno() {
    let root = fake_sysfs("sriov");
    let r = root.to_str().unwrap();
    let pci = root.join("bus/pci/devices");
    // An SR-IOV PF with no driver, and its VF.
    write(&pci.join("0000:04:00.0/sriov_totalvfs"), "2\n");
    write(&pci.join("0000:04:00.1/class"), "0x010802\n");
    symlink("../0000:04:00.0", pci.join("0000:04:00.1/physfn")).unwrap();
    for (args, want) in [
        (vec!["sriov", "0000:03:00.0"], "does not support SR-IOV"),
        (
            vec!["sriov", "0000:04:00.0"],
            "must be bound to the kernel nvme driver",
        ),
        (vec!["sriov", "0000:04:00.1"], "is a virtual function"),
        (vec!["sriov", "nvme7"], "not a kernel nvme controller node"),
        (
            vec!["sriov", "0000:03:00.0", "--vfs", "1", "--reclaim"],
            "--reclaim goes with --vfs 0",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--sysfs-root", r]);
        let o = gpunvme(&a);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(want) && err.contains("(errno "),
            "{args:?}: {err}"
        );
    }
    let h = stdout(&gpunvme(&["sriov", "--help"]));
    for opt in [
        "--vfs",
        "--flex-queues",
        "--flex-interrupts",
        "--namespace-id",
        "--print",
        "--reclaim",
    ] {
        assert!(h.contains(opt), "sriov --help lacks {opt}");
    }
}

/// Ctrl-C during a long command: it stops submitting, reaps what is in
/// flight and exits 130, promptly; piped, no progress bar is drawn. Run
/// on bench's pread path against a file (no device needed); skipped where
/// the file system refuses O_DIRECT.
#[test]
fn ctrl_c_stops_in_order_and_exits_130() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let f = dir.join("ctrl-c.img");
    fs::write(&f, vec![0u8; 1 << 20]).unwrap();
    let probe = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&f);
    if probe.is_err() {
        eprintln!("SKIP: {} refuses O_DIRECT", dir.display());
        return;
    }
    let t0 = std::time::Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_gpunvme"))
        .args(["bench", "--block-device", f.to_str().unwrap(), "--pread"])
        .args(["--qd", "1", "--qpairs", "1", "--runtime", "60s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    // SAFETY: signals our own child, which is still running (not reaped).
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let o = child.wait_with_output().unwrap();
    assert!(t0.elapsed().as_secs() < 20, "took {:?}", t0.elapsed());
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{e}");
    assert!(e.contains("interrupted"), "{e}");
    assert!(!e.contains('\r'), "a progress bar on a pipe: {e:?}");
}

/// A kernel namespace nvme97n3 (512-byte blocks, 64 MiB, two partitions,
/// no poll queues) in the fake sysfs: no /dev/ng97n3 exists here.
fn fake_namespace(tag: &str) -> PathBuf {
    let root = fake_sysfs(tag);
    let b = root.join("class/block/nvme97n3");
    write(&b.join("dev"), "259:97\n");
    write(&b.join("nsid"), "3\n");
    write(&b.join("size"), "131072\n");
    write(&b.join("queue/logical_block_size"), "512\n");
    write(&b.join("queue/max_hw_sectors_kb"), "128\n");
    write(&b.join("queue/io_poll"), "0\n");
    for (n, start, size) in [(1, 2048, 16384), (2, 18432, 32768)] {
        let p = b.join(format!("nvme97n3p{n}"));
        write(&p.join("partition"), &format!("{n}\n"));
        write(&p.join("start"), &format!("{start}\n"));
        write(&p.join("size"), &format!("{size}\n"));
        write(&p.join("dev"), &format!("259:{}\n", 97 + n));
    }
    root
}

#[test]
fn list_names_the_kernels_namespaces_and_why_passthrough_cannot_use_them() {
    let root = fake_namespace("list-ns");
    let r = root.to_str().unwrap();
    let o = gpunvme(&["list", "--namespaces", "-o", "json", "--sysfs-root", r]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &v[0];
    assert_eq!(c["namespace"]["disk"], "nvme97n3");
    assert_eq!(c["namespace"]["nsid"], 3);
    assert_eq!(c["namespace"]["capacity_lbas"], 131072);
    assert_eq!(c["namespace"]["partitions"][1]["start_lba"], 18432);
    let whole = c["whole"]["Err"].as_str().expect("not usable here");
    assert!(whole.contains("/dev/ng97n3"), "{whole}");
    assert!(c["poll"]["Err"].as_str().unwrap().contains("poll_queues"));
    assert_eq!(c["partitions"].as_array().unwrap().len(), 2);
    // The plain listing has the same, in words, after the controllers.
    let o = gpunvme(&["list", "--sysfs-root", r]);
    let out = stdout(&o);
    assert!(out.contains("0000:03:00.0"), "{out}");
    assert!(out.contains("nvme97n3 (/dev/ng97n3, nsid 3)"), "{out}");
    assert!(
        out.contains("nvme97n3p2 (LBA 18432, 32768 blocks): no:"),
        "{out}"
    );
}

#[test]
fn passthrough_options_and_devices_are_checked_before_anything_opens() {
    let root = fake_namespace("pt-args");
    let r = root.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "read",
                "0000:03:00.0",
                "-s",
                "0",
                "--partition",
                "/dev/nvme97n3p1",
                "--sysfs-root",
                r,
            ],
            "are for a namespace the kernel drives",
        ),
        (
            &[
                "read",
                "/dev/nvme97n3p1",
                "-s",
                "0",
                "--lba-window",
                "0:8",
                "--sysfs-root",
                r,
            ],
            "is the partition nvme97n3p1 already",
        ),
        (
            &[
                "verify",
                "/dev/ng97n3",
                "-s",
                "0",
                "-p",
                "1",
                "--partition",
                "/dev/nvme1n1p1",
                "--sysfs-root",
                r,
            ],
            "not a partition of nvme97n3",
        ),
        (
            &[
                "write",
                "/dev/ng97n9",
                "-s",
                "0",
                "-p",
                "1",
                "--sysfs-root",
                r,
            ],
            "no kernel NVMe namespace nvme97n9",
        ),
    ];
    for (args, want) in cases {
        let o = gpunvme(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    }
}

/// What the passthrough back end cannot do, `bench` refuses before
/// anything opens (no /dev/ng97n3 exists here: an open would fail with
/// another message): GPU memory and raw pairs on a kernel namespace, and
/// --fio without one.
#[test]
fn bench_refuses_what_passthrough_cannot_measure_before_anything_opens() {
    let root = fake_namespace("pt-bench");
    let r = root.to_str().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "bench",
                "/dev/ng97n3",
                "--gpu",
                "udmabuf",
                "--sysfs-root",
                r,
            ],
            "bench --gpu: GPU memory as the payload of io_uring NVMe passthrough",
        ),
        (
            &["bench", "/dev/nvme97n3p1", "--owner", "--sysfs-root", r],
            "bench --owner: raw queue pairs need a controller bound to the gpunvme module",
        ),
        (
            &["bench", "0000:03:00.0", "--fio", "--sysfs-root", r],
            "bench --fio: name a kernel namespace",
        ),
    ];
    for (args, want) in cases {
        let o = gpunvme(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    }
}

/// A real bench run (pread/pwrite threads on a file: no device needed)
/// with fio's knobs: its JSON has fio's jobs[], with the mix, the runtime
/// and CPU use it ran with, and fio's own fio_jsonplus_clat2csv reads and
/// validates it (Debian's fio package; tests/deps.sh installs it).
#[test]
fn a_bench_run_writes_fio_json_that_fios_tool_reads() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fio-json");
    fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bench.img");
    fs::write(&f, vec![0u8; 4 << 20]).unwrap();
    if fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&f)
        .is_err()
    {
        eprintln!("SKIP: {} refuses O_DIRECT", dir.display());
        return;
    }
    let o = gpunvme(&[
        "bench",
        "--block-device",
        f.to_str().unwrap(),
        "--pread",
        "--rw",
        "randrw",
        "--rwmixread",
        "70",
        "--bs",
        "4k",
        "--qd",
        "1,2",
        "--numjobs",
        "1",
        "--runtime",
        "300ms",
        "--ramp-time",
        "50ms",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "one job per cell");
    let cells = v["runs"][0]["results"].as_array().unwrap();
    for (j, c) in jobs.iter().zip(cells) {
        let (r, w) = (&j["read"], &j["write"]);
        let (nr, nw) = (
            r["total_ios"].as_u64().unwrap(),
            w["total_ios"].as_u64().unwrap(),
        );
        assert_eq!(nr + nw, c["ops"].as_u64().unwrap(), "{j}");
        let share = nr as f64 / (nr + nw) as f64;
        assert!(
            (0.55..0.85).contains(&share),
            "{share} reads at --rwmixread 70"
        );
        assert_eq!(r["io_bytes"].as_u64().unwrap(), nr * 4096);
        let runtime = j["job_runtime"].as_u64().unwrap();
        assert!(
            (300..2000).contains(&runtime),
            "measured {runtime} ms of a 300 ms runtime"
        );
        assert!(
            r["clat_ns"]["percentile"]["99.990000"].as_u64().unwrap()
                >= r["clat_ns"]["min"].as_u64().unwrap()
        );
        let bins: u64 = r["clat_ns"]["bins"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(bins, nr, "every read in a bin");
        assert!(j["usr_cpu"].as_f64().unwrap() + j["sys_cpu"].as_f64().unwrap() > 0.0);
        assert_eq!(j["job options"]["rw"], "randrw");
        assert_eq!(j["job options"]["rwmixread"], "70");
    }
    assert_eq!(jobs[1]["job options"]["iodepth"], "2");
    let src = dir.join("run.json");
    fs::write(&src, &o.stdout).unwrap();
    // --validate checks the CSVs a first run wrote: write them, then validate.
    let gen = Command::new("fio_jsonplus_clat2csv")
        .arg(&src)
        .arg(dir.join("run.csv"))
        .output()
        .expect("fio_jsonplus_clat2csv: install Debian's fio package (tests/deps.sh does)");
    assert!(
        gen.status.success(),
        "{}",
        String::from_utf8_lossy(&gen.stderr)
    );
    let val = Command::new("fio_jsonplus_clat2csv")
        .arg(&src)
        .arg(dir.join("run.csv"))
        .arg("--validate")
        .output()
        .unwrap();
    let vt = String::from_utf8_lossy(&val.stdout);
    assert!(
        val.status.success() && vt.matches("validated").count() == 2,
        "{vt}"
    );
}
