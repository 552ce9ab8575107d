//! The guide: the manual of the crate and of the `blob-mutex` command, one
//! chapter per topic. The [crate root](crate) is the front page (what it is,
//! the quick start, the features); the rest is here.
//!
//! | chapter | what it covers |
//! |---|---|
//! | [Choosing a shape](shapes) | the task form, run once and the guard: what each can do, and which job wants which; many locks by name from one provider |
//! | [How an election works](election) | one round step by step, what is observable, cancel, drop and sub-tasks, the safety argument |
//! | [Guarantees and limits](guarantees) | what is promised, the assumptions, how each property is tested, the fault matrix |
//! | [Partitions](partitions) | many leases shared among instances: [`BlobLeaseSet`](crate::BlobLeaseSet) |
//! | [Planned handover](handover) | handing the lease to a preferred successor, for rolling upgrades |
//! | [A quorum of storage accounts](quorum) | leading on a majority of 3 or 5 accounts, and its safety argument |
//! | [The model checker](model) | every interleaving of the quorum's, the lease set's and the handover's decisions in small configurations, what it found, how to run it |
//! | [Leader state](state) | state kept in the lease blob, whose writes storage fences |
//! | [Testing](testing) | testing your leader code and other lease stores, Azurite, this crate's tests |
//! | [Metrics and operations](operations) | metrics, the health endpoint, least privilege, stale blobs, benchmarks |
//! | [Use it from the shell](cli) | the manual of the `blob-mutex` command, with its exit codes |
//! | [Options, connecting and features](options) | every option and its default, the credentials, what each feature costs |
//! | [Storage backends](backends) | the 0.21 SDK's backend and the official SDK's: how to choose, and how to migrate |
//!
//! Each chapter is a Markdown file under `docs/guide/` that reads the same in
//! the repository; its Rust code blocks run as doc tests.

/// The targets of the guide's links as rustdoc resolves them: checked
/// intra-doc links. Each chapter ends with the same labels pointing at the
/// Markdown files, for reading on GitHub; the first definition of a label
/// wins, so rustdoc uses these (see the crate root for why).
macro_rules! links {
    () => {
        concat!(
            "[readme-quick-start]: crate#quick-start\n",
            "[readme-features]: crate#storage-backends-and-features\n",
            "[guide-argument]: crate::guide::election#the-argument\n",
            "[guide-election]: crate::guide::election\n",
            "[guide-guarantees]: crate::guide::guarantees\n",
            "[guide-chaos]: crate::guide::guarantees#chaos-every-mode-at-once-judged-from-a-history\n",
            "[guide-partitions]: crate::guide::partitions\n",
            "[guide-set-names]: crate::guide::partitions#names-a-set-owns\n",
            "[guide-handover]: crate::guide::handover\n",
            "[guide-quorum]: crate::guide::quorum\n",
            "[guide-model]: crate::guide::model\n",
            "[guide-state]: crate::guide::state\n",
            "[guide-shapes]: crate::guide::shapes\n",
            "[guide-shapes-schedule]: crate::guide::shapes#a-schedule-for-the-fleet\n",
            "[guide-cli]: crate::guide::cli\n",
            "[guide-entra]: crate::guide::cli#sign-in-with-microsoft-entra-id\n",
            "[guide-operations]: crate::guide::operations\n",
            "[guide-metrics]: crate::guide::operations#metrics\n",
            "[guide-logs]: crate::guide::operations#logs\n",
            "[guide-backends]: crate::guide::backends\n",
            "[guide-leader]: crate::guide::election#who-leads-and-where\n",
            "[guide-least-privilege]: crate::guide::operations#least-privilege-the-permissions-each-mode-needs\n",
            "[benchmarks]: https://docs.rs/crate/blob-mutex/",
            env!("CARGO_PKG_VERSION"),
            "/source/BENCHMARKS.md\n",
        )
    };
}

/// A chapter: a module whose documentation is `docs/guide/<name>.md`, read
/// with the guide's link targets first.
macro_rules! chapter {
    ($name:ident, $file:literal) => {
        pub mod $name {
            #![doc = links!()]
            #![doc = include_str!(concat!("../docs/guide/", $file))]
        }
    };
}

chapter!(shapes, "shapes.md");
chapter!(election, "election.md");
chapter!(guarantees, "guarantees.md");
chapter!(partitions, "partitions.md");
chapter!(handover, "handover.md");
chapter!(quorum, "quorum.md");
chapter!(model, "model.md");
chapter!(state, "state.md");
chapter!(testing, "testing.md");
chapter!(operations, "operations.md");
chapter!(cli, "cli.md");
chapter!(options, "options.md");
chapter!(backends, "backends.md");

#[cfg(test)]
mod tests {
    //! The guide's links work on GitHub and on docs.rs alike: every label a
    //! Markdown file uses is defined at its end as a file that exists (with
    //! the heading, for a fragment), and rustdoc's definition of the label,
    //! which wins there, names the same place.

    use std::collections::BTreeMap;
    use std::path::{Component, Path, PathBuf};

    fn read(path: &str) -> String {
        let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {path}: {e}"))
    }

    /// The chapters' files, `docs/guide/<name>.md`, by name.
    fn chapter_files() -> Vec<String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("list docs/guide")
            .map(|entry| entry.expect("list docs/guide").file_name())
            .filter_map(|name| name.to_str()?.strip_suffix(".md").map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    /// The text outside fenced code blocks, with inline code spans removed.
    fn prose(markdown: &str) -> String {
        let mut fenced = false;
        let mut outside = String::new();
        for line in markdown.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            } else if !fenced {
                outside.push_str(line);
                outside.push('\n');
            }
        }
        outside.split('`').step_by(2).collect::<Vec<_>>().join(" ")
    }

    /// `[label]: target` definitions, by label.
    fn definitions(markdown: &str) -> BTreeMap<String, String> {
        prose(markdown)
            .lines()
            .filter_map(|line| {
                let (label, target) = line.strip_prefix('[')?.split_once("]: ")?;
                Some((label.to_owned(), target.trim().to_owned()))
            })
            .collect()
    }

    /// The labels of `[text][label]` links.
    fn labels_used(markdown: &str) -> Vec<String> {
        prose(markdown)
            .split("][")
            .skip(1)
            .filter_map(|rest| Some(rest.split_once(']')?.0.to_owned()))
            .collect()
    }

    /// The targets of inline `[text](target)` links.
    fn inline_targets(markdown: &str) -> Vec<String> {
        prose(markdown)
            .split("](")
            .skip(1)
            .filter_map(|rest| Some(rest.split_once(')')?.0.to_owned()))
            .collect()
    }

    /// The ids GitHub and rustdoc give the headings: lower case, spaces as
    /// hyphens, punctuation dropped.
    fn heading_ids(markdown: &str) -> Vec<String> {
        let mut fenced = false;
        let mut ids = Vec::new();
        for line in markdown.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            } else if !fenced && line.starts_with('#') {
                let text = line.trim_start_matches('#').trim().to_lowercase();
                let id = text
                    .chars()
                    .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                ids.push(id);
            }
        }
        ids
    }

    /// `target` (relative to the file at `from`) as a path from the
    /// repository's root, and its fragment.
    fn resolve(from: &str, target: &str) -> (String, Option<String>) {
        let (path, fragment) = match target.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment.to_owned())),
            None => (target, None),
        };
        let mut resolved = PathBuf::new();
        for component in Path::new(from)
            .parent()
            .unwrap_or(Path::new(""))
            .join(path)
            .components()
        {
            match component {
                Component::ParentDir => assert!(resolved.pop(), "{target} leaves the repository"),
                Component::Normal(part) => resolved.push(part),
                _ => {}
            }
        }
        (resolved.to_string_lossy().into_owned(), fragment)
    }

    /// Where rustdoc must send a link whose GitHub target is `path`: the
    /// crate root for the README, a chapter's module for its file, and the
    /// file in docs.rs' view of the package for anything else.
    fn rustdoc_target(path: &str, fragment: Option<&str>) -> String {
        let item = match path {
            "README.md" => "crate".to_owned(),
            "docs/guide" => "crate::guide".to_owned(),
            _ => match path
                .strip_prefix("docs/guide/")
                .and_then(|f| f.strip_suffix(".md"))
            {
                Some(chapter) => format!("crate::guide::{chapter}"),
                None => format!(
                    "https://docs.rs/crate/blob-mutex/{}/source/{path}",
                    env!("CARGO_PKG_VERSION")
                ),
            },
        };
        match fragment {
            Some(fragment) => format!("{item}#{fragment}"),
            None => item,
        }
    }

    /// The definitions lib.rs gives the crate root before the README: its
    /// `#![doc = ..]` lines of string literals.
    fn crate_root_definitions() -> BTreeMap<String, String> {
        let version = format!("\"{}\"", env!("CARGO_PKG_VERSION"));
        let lines: Vec<String> = read("src/lib.rs")
            .lines()
            .filter(|line| line.starts_with("#![doc = ") && !line.contains("include_str!"))
            .map(|line| line.replace(r#"env!("CARGO_PKG_VERSION")"#, &version))
            .map(|line| line.split('"').skip(1).step_by(2).collect())
            .collect();
        definitions(&lines.join("\n"))
    }

    /// What is wrong with the links of the Markdown file at `path`, read by
    /// rustdoc with `rustdoc` defined first.
    fn link_problems(path: &str, rustdoc: &BTreeMap<String, String>) -> Vec<String> {
        let markdown = read(path);
        let github = definitions(&markdown);
        let mut problems = Vec::new();
        for target in inline_targets(&markdown) {
            if let Some(fragment) = target.strip_prefix('#') {
                if !heading_ids(&markdown).iter().any(|id| id == fragment) {
                    problems.push(format!("{path}: no heading for the link to {target}"));
                }
            } else if !target.starts_with("https://") {
                problems.push(format!(
                    "{path}: ({target}) works on GitHub only; link with a label that \
                     src/lib.rs or src/guide.rs also defines"
                ));
            }
        }
        for label in labels_used(&markdown) {
            let Some(target) = github.get(&label) else {
                problems.push(format!(
                    "{path}: [{label}] is not defined at the end of the file"
                ));
                continue;
            };
            let (target_path, fragment) = resolve(path, target);
            let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(&target_path);
            if !full.exists() {
                problems.push(format!(
                    "{path}: [{label}] points at {target_path}, which does not exist"
                ));
            } else if let Some(fragment) = &fragment {
                if !heading_ids(&read(&target_path)).contains(fragment) {
                    problems.push(format!(
                        "{path}: [{label}]: {target_path} has no heading #{fragment}"
                    ));
                }
            }
            let expected = rustdoc_target(&target_path, fragment.as_deref());
            if rustdoc.get(&label) != Some(&expected) {
                problems.push(format!(
                    "{path}: rustdoc should define [{label}]: {expected}, defines {:?}",
                    rustdoc.get(&label)
                ));
            }
        }
        problems
    }

    #[test]
    fn links_work_on_github_and_on_docs_rs() {
        let mut problems = link_problems("README.md", &crate_root_definitions());
        let chapters = definitions(links!());
        for chapter in chapter_files() {
            problems.extend(link_problems(
                &format!("docs/guide/{chapter}.md"),
                &chapters,
            ));
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn every_chapter_file_is_a_module_of_the_guide() {
        let guide = read("src/guide.rs");
        for chapter in chapter_files() {
            let declaration = format!("chapter!({chapter}, \"{chapter}.md\");");
            assert!(
                guide.contains(&declaration),
                "docs/guide/{chapter}.md is not in the guide: add `{declaration}` to src/guide.rs"
            );
        }
    }
}
