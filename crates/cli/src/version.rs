//! `blob-mutex version`: what this binary is, for an operator's inventory
//! and a bug report.

use std::process::ExitCode;

use serde::Serialize;

/// The version, the commit and what was compiled in.
#[derive(Debug, Serialize)]
struct Build {
    version: &'static str,
    /// The commit the binary was built from (`unknown` outside a git
    /// checkout, as from crates.io), with `-dirty` when the tree had changes.
    commit: &'static str,
    /// The storage backends `--backend` takes.
    backends: Vec<&'static str>,
    /// The library's features the command was built with.
    features: Vec<&'static str>,
}

impl Build {
    fn of_this_build() -> Build {
        let mut backends = Vec::new();
        if cfg!(feature = "official") {
            backends.push("official");
        }
        if cfg!(feature = "sdk-v021") {
            backends.push("sdk-v021");
        }
        Build {
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("BUILD_COMMIT"),
            backends,
            features: vec!["azure_identity", "metrics"],
        }
    }
}

/// Prints the version as text, or as one JSON object.
pub(crate) fn print(json: bool) -> ExitCode {
    let version = Build::of_this_build();
    if json {
        match serde_json::to_string(&version) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("blob-mutex: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        println!(
            "blob-mutex {} (commit {}; backends: {}; features: {})",
            version.version,
            version.commit,
            version.backends.join(", "),
            version.features.join(", ")
        );
    }
    ExitCode::SUCCESS
}
