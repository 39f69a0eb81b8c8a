// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The help-and-habits test: every command's `--help` lists only options
//! that work as shown. For every (sub)command: each line of its
//! `Examples:` section is parsed by the real clap definition
//! (`gpunvme_cli::command()`), must be an example of that command, and may
//! name only options the command has; every long option its help lists is
//! one the parser accepts; and every `gpunvme ...` line of the READMEs'
//! code blocks parses too. Plus the vocabulary: one name per concept.

use clap::Command;

/// Splits an example line like a shell would, for the simple lines help
/// shows: words, a `# comment` after whitespace, `> file` redirections
/// dropped, '...' and "..." quotes.
fn words(line: &str) -> Vec<String> {
    let line = match line.find("  #").or_else(|| line.find(" # ")) {
        Some(i) => &line[..i],
        None => line,
    };
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    // Drop redirections and pipes with what follows them.
    if let Some(i) = out
        .iter()
        .position(|w| w.starts_with('>') || w.starts_with('<') || w == "|" || w == "2>&1")
    {
        out.truncate(i);
    }
    out
}

/// The `gpunvme ...` lines of an `Examples:` section of a help text.
fn examples(help: &str) -> Vec<String> {
    let Some((_, rest)) = help.split_once("\nExamples:\n") else {
        return Vec::new();
    };
    rest.lines()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            assert!(
                l.starts_with("  gpunvme "),
                "an Examples line must be `  gpunvme ...`: {l:?}"
            );
            l.trim().to_string()
        })
        .collect()
}

/// Every subcommand, with its path from the top ("gpunvme", "bench").
fn all_commands() -> Vec<(Vec<String>, Command)> {
    fn walk(path: Vec<String>, c: &Command, out: &mut Vec<(Vec<String>, Command)>) {
        out.push((path.clone(), c.clone()));
        for s in c.get_subcommands() {
            if s.get_name() == "help" {
                continue;
            }
            let mut p = path.clone();
            p.push(s.get_name().to_string());
            walk(p, s, out);
        }
    }
    let mut root = gpunvme_cli::command();
    root.build();
    let mut out = Vec::new();
    walk(vec!["gpunvme".into()], &root, &mut out);
    out
}

/// The long and short options `c` accepts (globals included: a built
/// command carries them), with help and version.
fn options(c: &Command) -> (Vec<String>, Vec<char>) {
    let mut long = vec!["help".to_string(), "version".to_string()];
    let mut short = vec!['h', 'V'];
    for a in c.get_arguments() {
        if let Some(l) = a.get_long() {
            long.push(l.to_string());
        }
        long.extend(
            a.get_all_aliases()
                .unwrap_or_default()
                .iter()
                .map(|s| s.to_string()),
        );
        if let Some(s) = a.get_short() {
            short.push(s);
        }
    }
    (long, short)
}

/// Parses `line` with the real parser; on success checks that it is an
/// example of `path` and names only options of that command.
fn check_line(line: &str, path: &[String], cmds: &[(Vec<String>, Command)]) -> Result<(), String> {
    let w = words(line);
    if w.first().map(String::as_str) != Some("gpunvme") {
        return Err(format!("{line:?} does not start with gpunvme"));
    }
    if w.iter().any(|x| x.contains('$')) {
        return Err(format!("{line:?} uses a shell variable"));
    }
    gpunvme_cli::command()
        .try_get_matches_from(&w)
        .map_err(|e| format!("{line:?} does not parse:\n{e}"))?;
    // The command it runs: the longest path that prefixes its words.
    let (cpath, cmd) = cmds
        .iter()
        .filter(|(p, _)| w.len() >= p.len() && w[..p.len()] == p[..])
        .max_by_key(|(p, _)| p.len())
        .unwrap();
    if path.len() > 1 && cpath[..] != path[..] {
        return Err(format!(
            "{line:?} is listed under `{}` but runs `{}`",
            path.join(" "),
            cpath.join(" ")
        ));
    }
    let (long, short) = options(cmd);
    for x in &w[cpath.len()..] {
        if x == "--" {
            break;
        }
        if let Some(l) = x.strip_prefix("--") {
            let l = l.split('=').next().unwrap();
            if !long.iter().any(|o| o == l) {
                return Err(format!(
                    "{line:?}: `--{l}` is no option of `{}`",
                    cpath.join(" ")
                ));
            }
        } else if let Some(s) = x.strip_prefix('-') {
            if let Some(c) = s.chars().next().filter(|c| c.is_ascii_alphabetic()) {
                if !short.contains(&c) {
                    return Err(format!(
                        "{line:?}: `-{c}` is no option of `{}`",
                        cpath.join(" ")
                    ));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn every_documented_example_parses_and_names_only_real_options() {
    let cmds = all_commands();
    let mut checked = 0;
    let mut errors = Vec::new();
    for (path, c) in &cmds {
        let help = c.clone().render_long_help().to_string();
        let ex = examples(&help);
        // Every command that does something shows how.
        if path.len() == 2 {
            assert!(
                !ex.is_empty(),
                "`{}` --help has no Examples",
                path.join(" ")
            );
        }
        for line in ex {
            checked += 1;
            if let Err(e) = check_line(&line, path, &cmds) {
                errors.push(e);
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n\n"));
    assert!(checked >= 30, "only {checked} examples");
}

#[test]
fn every_option_listed_in_help_is_accepted() {
    for (path, c) in all_commands() {
        let (long, _) = options(&c);
        let help = c.clone().render_long_help().to_string();
        // The options section: lines that start with an option name.
        for l in help.lines() {
            let t = l.trim_start();
            if !(t.starts_with("--") || (t.starts_with('-') && t.get(2..4) == Some(", "))) {
                continue;
            }
            let name = t
                .split([' ', '=', '<', ','])
                .find(|w| w.starts_with("--"))
                .unwrap_or("")
                .trim_start_matches("--")
                .to_string();
            if name.is_empty() {
                continue;
            }
            assert!(
                long.contains(&name),
                "`{}` --help lists --{name}, which the parser does not know",
                path.join(" ")
            );
            // And the parser takes it (a value where it wants one).
            let mut argv = path.clone();
            argv.push(format!("--{name}"));
            if let Err(e) = gpunvme_cli::command().try_get_matches_from(&argv) {
                assert!(
                    !matches!(e.kind(), clap::error::ErrorKind::UnknownArgument),
                    "`{}` --{name}: {e}",
                    path.join(" ")
                );
            }
        }
    }
}

/// The READMEs' command lines: every line of a code block that starts with
/// `gpunvme ` (the text after a `#` comment ignored).
#[test]
fn readme_command_lines_parse() {
    let cmds = all_commands();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut checked = 0;
    let mut errors = Vec::new();
    for doc in [
        "README.md",
        "rust/README.md",
        "userspace/README.md",
        "tests/README.md",
        "tests/hardware/README.md",
        "kernels/README.md",
    ] {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
        let mut in_code = false;
        for (n, l) in text.lines().enumerate() {
            if l.trim_start().starts_with("```") {
                in_code = !in_code;
                continue;
            }
            let t = l.trim_start().trim_start_matches("sudo ");
            // Output quoted in a block (a kernel log line: `gpunvme 0000:03:00.0: ...`) is no command.
            let log = t
                .split_whitespace()
                .nth(1)
                .is_some_and(|w| w.ends_with(':'));
            if !in_code || !t.starts_with("gpunvme ") || log {
                continue;
            }
            checked += 1;
            if let Err(e) = check_line(t, &["gpunvme".into()], &cmds) {
                errors.push(format!("{doc}:{}: {e}", n + 1));
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n\n"));
    assert!(checked >= 10, "only {checked} README command lines");
}

/// One vocabulary: the same concept has the same option in every command.
#[test]
fn one_vocabulary_across_commands() {
    let cmds = all_commands();
    let get = |name: &str| -> Command {
        cmds.iter()
            .find(|(p, _)| p.len() == 2 && p[1] == name)
            .unwrap()
            .1
            .clone()
    };
    let has = |c: &Command, long: &str, short: Option<char>| {
        c.get_arguments()
            .any(|a| a.get_long() == Some(long) && a.get_short() == short)
    };
    for c in ["read", "write", "verify", "gpu-run"] {
        let c = get(c);
        assert!(has(&c, "start-block", Some('s')), "{}", c.get_name());
        assert!(has(&c, "namespace-id", Some('n')), "{}", c.get_name());
        assert!(has(&c, "qd", None), "{}", c.get_name());
    }
    for c in ["read", "write", "verify", "pattern"] {
        assert!(has(&get(c), "block-count", Some('c')), "{c}");
    }
    for c in ["write", "verify", "pattern", "gpu-run"] {
        assert!(has(&get(c), "pattern", Some('p')), "{c}");
    }
    for c in ["bench", "gpu-run"] {
        assert!(has(&get(c), "qpairs", None), "{c}");
    }
    assert!(has(&get("bench"), "namespace-id", Some('n')));
    assert!(has(&get("sriov"), "namespace-id", Some('n')));
    for c in [
        "list", "info", "probe", "read", "write", "verify", "bench", "gpu-run", "sriov",
    ] {
        assert!(has(&get(c), "output-format", Some('o')), "{c}");
    }
    // The old spellings are gone everywhere.
    for (p, c) in &cmds {
        for a in c.get_arguments() {
            let l = a.get_long().unwrap_or("");
            for old in [
                "lba",
                "slba",
                "count",
                "blocks",
                "queues",
                "depth",
                "json",
                "dev",
                "node",
                "nsid",
                "seed",
                "out",
                "range-mib",
                "max-blocks",
                "lba-size",
            ] {
                assert_ne!(l, old, "`{}` still has --{old}", p.join(" "));
            }
        }
    }
    // Every command that takes a controller takes it as DEVICE, first.
    for c in [
        "info", "bind", "unbind", "read", "write", "verify", "bench", "gpu-run", "sriov",
    ] {
        let c = get(c);
        let pos: Vec<_> = c.get_positionals().collect();
        assert_eq!(pos.len(), 1, "{}", c.get_name());
        assert_eq!(
            pos[0].get_value_names().unwrap()[0].as_str(),
            "DEVICE",
            "{}",
            c.get_name()
        );
    }
}

/// `bench --qd 1 8 32 DEVICE` once failed with "not a PCI address"; lists
/// take commas or spaces, and the device goes first.
#[test]
fn lists_and_the_device_first() {
    let parse = |v: &[&str]| {
        let mut a = vec!["gpunvme"];
        a.extend_from_slice(v);
        gpunvme_cli::command().try_get_matches_from(a)
    };
    let qd = |m: &clap::ArgMatches| -> Vec<u32> {
        let (_, sub) = m.subcommand().unwrap();
        sub.get_many::<u32>("qd").unwrap().copied().collect()
    };
    for v in [
        &["bench", "0000:01:00.0", "--qd", "1", "8", "32"][..],
        &["bench", "0000:01:00.0", "--qd", "1,8,32"],
        &["bench", "--qpairs", "1", "--qd", "1,8,32"],
        &[
            "bench", "01:00.0", "--qd", "1", "8", "32", "--qpairs", "1", "4",
        ],
        &["bench", "/dev/gpunvme0", "--qd", "1,8", "32"],
    ] {
        let m = parse(v).unwrap_or_else(|e| panic!("{v:?}: {e}"));
        assert_eq!(qd(&m), [1, 8, 32], "{v:?}");
    }
    // The default the help shows is what one gets.
    let m = parse(&["bench", "0000:01:00.0"]).unwrap();
    assert_eq!(qd(&m), [1, 8, 32]);
    let h = gpunvme_cli::command()
        .find_subcommand_mut("bench")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(h.contains("[default: 1 8 32]"), "{h}");
    // A device after a list would be taken for one of its values: the
    // error says to put the device first (it once said "not a PCI address").
    for v in [
        &["bench", "--qd", "1", "8", "0000:01:00.0"][..],
        &["bench", "--qd", "1,8,32", "0000:01:00.0"],
    ] {
        let e = parse(v).unwrap_err();
        assert!(e.to_string().contains("device first"), "{v:?}: {e}");
    }
    // Every device form.
    for d in [
        "0000:00:04.0",
        "00:04.0",
        "/dev/gpunvme0",
        "gpunvme0",
        "/dev/gpunvme0n1",
    ] {
        parse(&["info", d]).unwrap_or_else(|e| panic!("{d}: {e}"));
        parse(&["read", d, "-s", "0"]).unwrap_or_else(|e| panic!("{d}: {e}"));
    }
    assert!(parse(&["info", "8"]).is_err());
    // Sizes take suffixes.
    let m = parse(&["bench", "gpunvme0", "--range", "16M"]).unwrap();
    assert_eq!(
        m.subcommand().unwrap().1.get_one::<u64>("range"),
        Some(&(16 << 20))
    );
    let m = parse(&["pattern", "-p", "1", "-s", "0", "-b", "4k"]).unwrap();
    assert_eq!(
        m.subcommand().unwrap().1.get_one::<u64>("block_size"),
        Some(&4096)
    );
    // A block count is 1-based: 0 is refused.
    assert!(parse(&["read", "gpunvme0", "-s", "0", "-c", "0"]).is_err());
}

#[test]
fn the_test_can_fail() {
    let cmds = all_commands();
    let top = ["gpunvme".to_string()];
    for bad in [
        "gpunvme read 0000:01:00.0 --lba 0",
        "gpunvme bench --qd 1 8 0000:01:00.0",
        "gpunvme info",
        "gpunvme write 0000:01:00.0 -s 0 -c 8",
    ] {
        assert!(check_line(bad, &top, &cmds).is_err(), "{bad}");
    }
    let read = ["gpunvme".to_string(), "read".to_string()];
    assert!(check_line("gpunvme verify gpunvme0 -s 0 -p 1", &read, &cmds).is_err());
    assert!(check_line("gpunvme read gpunvme0 -s 0  # ok", &read, &cmds).is_ok());
}
