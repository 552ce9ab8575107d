//! `blob-mutex run` against Azurite with its logs at their most verbose, as
//! `RUST_LOG` can be spelled to reach the storage SDKs and the HTTP stack:
//! no key, SAS signature or `Authorization` value is ever written, on the
//! backend `BLOB_MUTEX_BACKEND` names.

use std::process::Stdio;

use blob_mutex_testkit::azurite::{self, DEV_KEY};
use tokio::process::Command;

use crate::support::BIN;

/// Spellings of `RUST_LOG` that reach, or try to reach, the SDKs' and the
/// HTTP stack's debug logs: by a prefix of their targets, a longer target
/// than a cap, a span, or another case.
const SPELLINGS: [&str; 9] = [
    "trace",
    "azure_core:=debug,blob_mutex=debug",
    "azure_core::policies::transport=debug,blob_mutex=debug",
    "debug,azure_core::=trace,typespec_client_core:=trace",
    "azure=trace,blob_mutex=debug",
    "typespec=trace,blob_mutex=debug",
    "reqwest=trace,hyper=trace,hyper_util=trace,h2=trace,rustls=trace,blob_mutex=debug",
    "blob_mutex=debug,[{x}]=trace,[request]=trace,[]=trace",
    "AZURE_CORE=trace,Azure_Core=trace,blob_mutex=debug",
];

#[tokio::test]
async fn no_spelling_of_rust_log_writes_a_credential() {
    let container = azurite::unique_container("cli-logs");
    let shared = azurite::shared();
    let sas = blob_mutex_testkit::sas::container_sas(&container, "racwdl");
    let signature = sas
        .split('&')
        .find_map(|p| p.strip_prefix("sig="))
        .expect("a signature")
        .to_owned();
    let key_string = shared.connection_string();
    let sas_string = blob_mutex_testkit::sas::sas_connection_string(&shared.endpoint, &sas);
    for (connection, secret) in [(&key_string, DEV_KEY), (&sas_string, signature.as_str())] {
        for rust_log in SPELLINGS {
            let out = Command::new(BIN)
                .args([
                    "run",
                    "--container",
                    &container,
                    "--blob",
                    "logs",
                    "--",
                    "true",
                ])
                .env("AZURE_STORAGE_CONNECTION_STRING", connection)
                .env("RUST_LOG", rust_log)
                .stdin(Stdio::null())
                .output()
                .await
                .expect("run blob-mutex");
            let output = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(out.status.code(), Some(0), "RUST_LOG={rust_log}: {output}");
            if rust_log.contains("blob_mutex=debug") || rust_log == "trace" {
                assert!(
                    output.contains("DEBUG"),
                    "RUST_LOG={rust_log} logged nothing at debug: {output}"
                );
            }
            // The key or the signature given, a SAS token the key signed
            // here (whose signature the test cannot know), or an
            // Authorization header's value.
            for leak in [secret, "sig=", "SharedKey", "Bearer ", "uthorization"] {
                assert!(
                    !output.contains(leak),
                    "RUST_LOG={rust_log}: {leak:?} is in the output: {output}"
                );
            }
        }
    }
}
