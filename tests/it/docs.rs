//! The docs name test files that exist: a test moved without its docs
//! fails here.

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The paths of Rust files under a `tests/` folder that `text` names.
fn test_paths(text: &str) -> Vec<&str> {
    let mut paths = Vec::new();
    for (at, _) in text.match_indices("tests/") {
        // Back to the start of the path (`crates/cli/tests/…`).
        let start = text[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "_-/.".contains(c)))
            .map_or(0, |i| i + 1);
        let end = text[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || "_-/.".contains(c)))
            .map_or(text.len(), |i| at + i);
        let path = text[start..end].trim_end_matches('.');
        if Path::new(path).extension().is_some_and(|e| e == "rs") && !paths.contains(&path) {
            paths.push(path);
        }
    }
    paths
}

/// The guide, the README and SECURITY.md describe today's tests: every test
/// file they name exists. The benchmarks and the unreleased part of the
/// CHANGELOG also record files since retired (and say so): of those, every
/// file of today's layout (`tests/it/`, `crates/cli/tests/it/`) exists.
#[test]
fn every_test_file_the_docs_name_exists() {
    let root = Path::new(ROOT);
    let read = |file: &Path| std::fs::read_to_string(file).unwrap();
    let mut today: Vec<_> = std::fs::read_dir(root.join("docs/guide"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .map(|path| (path.clone(), read(&path)))
        .collect();
    today.extend(["README.md", "SECURITY.md"].map(|f| (root.join(f), read(&root.join(f)))));
    let changelog = read(&root.join("CHANGELOG.md"));
    let unreleased = changelog.split("\n## [0.1.0]").next().unwrap().to_owned();
    let records = [
        (
            root.join("BENCHMARKS.md"),
            read(&root.join("BENCHMARKS.md")),
        ),
        (root.join("CHANGELOG.md"), unreleased),
    ];
    let in_layout =
        |path: &str| path.starts_with("tests/it/") || path.starts_with("crates/cli/tests/it/");
    let mut missing = Vec::new();
    for (doc, text) in &today {
        for path in test_paths(text) {
            if !root.join(path).exists() {
                missing.push(format!("{}: {path}", doc.display()));
            }
        }
    }
    for (doc, text) in &records {
        for path in test_paths(text).into_iter().filter(|p| in_layout(p)) {
            if !root.join(path).exists() {
                missing.push(format!("{}: {path}", doc.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "no such test file:\n{}",
        missing.join("\n")
    );
}

#[test]
fn test_paths_are_read_whole() {
    let text = "see `tests/it/faults/kill.rs`, crates/cli/tests/it/once.rs. And tests/fixtures.";
    assert_eq!(
        test_paths(text),
        ["tests/it/faults/kill.rs", "crates/cli/tests/it/once.rs"]
    );
}
