//! The test command tells the truth (issue 51): no test ends its process to skip.
//!
//! A test that calls `std::process::exit` ends its whole test binary: the harness never prints
//! that binary's closing line, and every other test of it that had not finished is lost without
//! a word (one such skip once hid 24 of the 30 settler rows, the memory and SQLite ones among
//! them). A test that needs a server lives in a module named `needs_postgres`,
//! `needs_pgbouncer` or `needs_redis` instead, which `scripts/test.sh` leaves out and counts
//! where the server is missing; `scripts/test.sh` also fails a run in which a test binary ended
//! without its closing line.
//!
//! The one use allowed: a test binary started by another test as a child process (an `…_entry`
//! or `child…` function, which ends the child only when started as one).

use std::path::{Path, PathBuf};

/// The call looked for, spelt in two pieces so that this file, which writes it in a case of its
/// own, does not hold it whole.
const EXIT_CALL: &str = concat!("process::", "exit(");

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each `process::exit` in a test source, with the function it is in, unless that function is a
/// child process's entry.
fn exits_outside_child_entries(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for dir in ["tests", "idem-runtime/tests", "cli/tests"] {
        rust_files(&root.join(dir), &mut files);
    }
    // The compile-fail cases are not run; this file names the call in its own texts.
    files.retain(|f| {
        !f.components().any(|c| c.as_os_str() == "ui")
            && !f.ends_with("tests/honest_test_command.rs")
    });
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut function = String::new();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if let Some(at) = code.find("fn ") {
                function = code[at + 3..]
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
                    .unwrap_or("")
                    .to_owned();
            }
            let child = function.ends_with("_entry") || function.starts_with("child");
            if code.contains(EXIT_CALL) && !child {
                found.push(format!("{}:{} (in fn {function})", file.display(), n + 1));
            }
        }
    }
    found
}

#[test]
fn no_test_ends_its_process_to_skip() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = exits_outside_child_entries(root);
    assert!(
        found.is_empty(),
        "a test ends its process (and its binary's other tests with it): put a test that needs a \
         server in a module named needs_postgres / needs_pgbouncer / needs_redis instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_a_skip_by_exit() {
    let dir = tempfile::tempdir().unwrap();
    let tests = dir.path().join("idem-runtime/tests");
    std::fs::create_dir_all(&tests).unwrap();
    std::fs::write(
        tests.join("skips.rs"),
        format!(
            "async fn fresh_store() {{\n    std::{EXIT_CALL}0);\n}}\n\
             fn sms_child_entry() {{\n    std::{EXIT_CALL}1);\n}}\n"
        ),
    )
    .unwrap();
    let found = exits_outside_child_entries(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].ends_with("skips.rs:2 (in fn fresh_store)"),
        "{found:?}"
    );
}
