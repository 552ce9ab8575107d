//! Gives the binary the commit it is built from, as `BUILD_COMMIT`
//! (`blob-mutex version`): `git describe`'s commit with `-dirty` when the
//! tree has changes, or `unknown` outside a git checkout (a crates.io
//! build).

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args([
            "describe",
            "--always",
            "--dirty",
            "--abbrev=12",
            "--exclude",
            "*",
        ])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BUILD_COMMIT={commit}");
    // A new commit moves HEAD's branch; a checkout moves HEAD.
    for watched in [
        "../../.git/HEAD",
        "../../.git/refs/heads",
        "../../.git/packed-refs",
    ] {
        println!("cargo:rerun-if-changed={watched}");
    }
}
