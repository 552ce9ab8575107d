//! Shared access signatures for the development account, signed here with
//! its well-known key, so that tests can run with the least privilege an
//! operator would grant: a service SAS on a container or on one blob, or an
//! account SAS. Azurite checks the signature and the permissions, as Azure
//! does.
//!
//! The string to sign is the one of service version 2020-12-06 and later
//! (the version written into the token, `sv`), as in "Create a service SAS"
//! and "Create an account SAS" of the Azure Storage REST reference.

use azure_core::credentials::Secret;

use super::azurite::DEV_KEY;

/// The account all signatures are for.
const ACCOUNT: &str = "devstoreaccount1";
/// The service version the tokens are signed for (`sv`).
const VERSION: &str = "2022-11-02";
/// Far enough in the future for any test.
const EXPIRY: &str = "2099-01-01T00:00:00Z";

/// A service SAS on `container` with `permissions` in Azure's order
/// (`racwdl` for all a container offers), as a query string without `?`.
pub fn container_sas(container: &str, permissions: &str) -> String {
    service_sas(container, None, permissions)
}

/// A service SAS on one blob with `permissions` in Azure's order (`racwd`).
pub fn blob_sas(container: &str, blob: &str, permissions: &str) -> String {
    service_sas(container, Some(blob), permissions)
}

/// An account SAS for the blob service with the resource types (`s`, `c`,
/// `o`, in that order) and permissions (`rwdlac` order) given.
pub fn account_sas(resource_types: &str, permissions: &str) -> String {
    let to_sign = [
        ACCOUNT,
        permissions,
        "b",
        resource_types,
        "",
        EXPIRY,
        "",
        "",
        VERSION,
        "",
        "",
    ]
    .join("\n");
    format!(
        "sv={VERSION}&ss=b&srt={resource_types}&sp={permissions}&se={}&sig={}",
        encode(EXPIRY),
        encode(&sign(&to_sign))
    )
}

/// A connection string for Azurite at `endpoint` that carries `sas` and no
/// key.
pub fn sas_connection_string(endpoint: &str, sas: &str) -> String {
    format!("BlobEndpoint={endpoint};SharedAccessSignature={sas}")
}

fn service_sas(container: &str, blob: Option<&str>, permissions: &str) -> String {
    let (resource, canonical) = match blob {
        Some(blob) => ("b", format!("/blob/{ACCOUNT}/{container}/{blob}")),
        None => ("c", format!("/blob/{ACCOUNT}/{container}")),
    };
    // signedPermissions, signedStart, signedExpiry, canonicalizedResource,
    // signedIdentifier, signedIP, signedProtocol, signedVersion,
    // signedResource, signedSnapshotTime, signedEncryptionScope, rscc, rscd,
    // rsce, rscl, rsct.
    let to_sign = [
        permissions,
        "",
        EXPIRY,
        &canonical,
        "",
        "",
        "",
        VERSION,
        resource,
        "",
        "",
        "",
        "",
        "",
        "",
        "",
    ]
    .join("\n");
    format!(
        "sv={VERSION}&sr={resource}&sp={permissions}&se={}&sig={}",
        encode(EXPIRY),
        encode(&sign(&to_sign))
    )
}

fn sign(to_sign: &str) -> String {
    azure_core::hmac::hmac_sha256(to_sign, &Secret::new(DEV_KEY)).expect("the key is base64")
}

/// Percent-encodes what a query value cannot carry as is.
fn encode(value: &str) -> String {
    value
        .chars()
        .map(|c| match c {
            '+' => "%2B".to_owned(),
            '/' => "%2F".to_owned(),
            '=' => "%3D".to_owned(),
            ':' => "%3A".to_owned(),
            c => c.to_string(),
        })
        .collect()
}
