//! Blob endpoints, parsed once when settings are made: every endpoint a
//! [`BlobSettings`](super::BlobSettings) holds is a URL that both backends'
//! HTTP stacks accept, so that no request can fail later on an address the
//! settings took. It is kept as written (less a trailing slash), so that
//! messages show the user's own spelling. A refusal says why, never
//! repeating what was written (it may hold a user name and password).

use azure_core::http::Url;

use super::{AZURITE_ACCOUNT, AZURITE_EMULATOR_PORT};

/// `text` as a blob endpoint: an `http://` or `https://` URL with a host,
/// and no user name, password, query, fragment or white space; as written,
/// without a trailing slash. The error is the reason, to follow the name of
/// what was written.
pub(crate) fn parse(text: &str) -> Result<String, String> {
    parse_url(text)?;
    Ok(text.trim_end_matches('/').to_owned())
}

/// Azurite's blob endpoint behind the `DevelopmentStorageProxyUri` of a
/// connection string: the proxy's scheme and host, the emulator's blob
/// port 10000 and the emulator's account as the path.
///
/// Azure's SDKs read the proxy URI the same way (they keep its scheme and
/// host, and always use port 10000), so one connection string names one
/// address here and there. They drop any other port silently; here it is
/// refused, since the user meant an address the SDKs would not reach: an
/// emulator on another port is named by `BlobEndpoint`. A port 10000 written
/// out is the same address.
pub(crate) fn development_proxy(text: &str) -> Result<String, String> {
    let mut url = parse_url(text)?;
    if !matches!(url.port(), None | Some(AZURITE_EMULATOR_PORT)) {
        return Err(format!(
            "names a port other than the emulator's {AZURITE_EMULATOR_PORT} \
             (for an emulator on another port, give BlobEndpoint instead)"
        ));
    }
    if !matches!(url.path(), "" | "/") {
        return Err("must be a scheme and host, without a path".to_owned());
    }
    url.set_port(Some(AZURITE_EMULATOR_PORT))
        .map_err(|()| "has no host".to_owned())?;
    url.set_path(AZURITE_ACCOUNT);
    parse(url.as_str())
}

/// A container URL with a SAS as its query
/// (`https://acct.blob.core.windows.net/leases?sv=…&sig=…`) as the blob
/// endpoint (as [`parse`] keeps it), the container's name and the SAS (the
/// query, without its `?`). The error is the reason, never repeating the
/// query.
pub(crate) fn container_url(text: &str) -> Result<(String, String, String), String> {
    let (base, sas) = text.split_once('?').unwrap_or((text, ""));
    if sas.contains('#') {
        return Err("must be a plain URL without a fragment".to_owned());
    }
    if sas.is_empty() {
        return Err(
            "needs a SAS as its query (…/container?sv=…&sig=…); for a token \
             credential, use with_token_credential and with_endpoint"
                .to_owned(),
        );
    }
    let base = base.trim_end_matches('/');
    if parse_url(base)?.path().trim_matches('/').is_empty() {
        return Err("has no container as the last segment of its path".to_owned());
    }
    let (endpoint, container) = base.rsplit_once('/').unwrap_or((base, ""));
    Ok((parse(endpoint)?, container.to_owned(), sas.to_owned()))
}

/// The account name in a blob endpoint: the first path segment for the
/// path-style URLs of emulators and IP addresses, else the first host label.
pub(crate) fn account(endpoint: &str) -> String {
    let without_scheme = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let (host, path) = without_scheme
        .split_once('/')
        .unwrap_or((without_scheme, ""));
    let first_segment = path.split('/').next().unwrap_or("");
    if !first_segment.is_empty() {
        return first_segment.to_owned();
    }
    host.split(['.', ':']).next().unwrap_or(host).to_owned()
}

fn parse_url(text: &str) -> Result<Url, String> {
    let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
    if !(lower.starts_with("https://") || lower.starts_with("http://")) {
        return Err("must start with http:// or https://".to_owned());
    }
    let rest = &text[lower.find("//").map_or(0, |i| i + 2)..];
    if rest.is_empty() || rest.starts_with('/') {
        return Err("has no host".to_owned());
    }
    // `Url` would drop tabs and line breaks and encode spaces silently.
    if text.chars().any(char::is_whitespace) {
        return Err("must not hold spaces".to_owned());
    }
    // The parser's reasons ("invalid port number", "empty host", …) never
    // repeat the input.
    let url = Url::parse(text).map_err(|e| format!("is not a valid URL: {e}"))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not hold a user name or password".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(
            "must be a plain URL without a query or fragment (give a SAS as SharedAccessSignature)"
                .to_owned(),
        );
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_endpoints_kept_as_written() {
        for (written, kept) in [
            (
                "https://acct.blob.core.windows.net",
                "https://acct.blob.core.windows.net",
            ),
            (
                "https://acct.blob.core.windows.net/",
                "https://acct.blob.core.windows.net",
            ),
            (
                "HTTPS://Acct.Blob.Core.Windows.Net/",
                "HTTPS://Acct.Blob.Core.Windows.Net",
            ),
            (
                "https://acct.blob.core.windows.net:443/",
                "https://acct.blob.core.windows.net:443",
            ),
            (
                "http://127.0.0.1:10000/devstoreaccount1",
                "http://127.0.0.1:10000/devstoreaccount1",
            ),
            (
                "http://127.0.0.1:10000/devstoreaccount1/",
                "http://127.0.0.1:10000/devstoreaccount1",
            ),
            ("http://localhost:65535/a", "http://localhost:65535/a"),
            (
                "http://[::1]:10000/devstoreaccount1",
                "http://[::1]:10000/devstoreaccount1",
            ),
            (
                "https://pe.privatelink.blob.core.windows.net",
                "https://pe.privatelink.blob.core.windows.net",
            ),
        ] {
            assert_eq!(parse(written).as_deref(), Ok(kept), "{written}");
        }
    }

    #[test]
    fn bad_endpoints_are_refused_without_repeating_them() {
        for (written, why) in [
            ("127.0.0.1:10000", "http"),
            ("ftp://host/x", "http"),
            ("http://", "host"),
            ("http:///x", "host"),
            ("http://127.0.0.1:99999/acct", "port"),
            ("http://127.0.0.1:10000:10000/acct", "port"),
            ("http://h:-1/acct", "port"),
            ("http://my host/acct", "spaces"),
            ("http://h/a b", "spaces"),
            ("http://h/a\tb", "spaces"),
            ("http://[::1/acct", "IPv6"),
            ("http://h%zz/acct", "URL"),
            ("https://user:hunter2@h/acct", "password"),
            ("https://user@h/acct", "user name"),
            ("https://h/acct?sig=hunter2", "query"),
            ("https://h/acct?", "query"),
            ("https://h/acct#x", "fragment"),
        ] {
            let reason = parse(written).expect_err(written);
            assert!(reason.contains(why), "{written}: {reason}");
            assert!(
                !reason.contains("hunter2") && !reason.contains("acct"),
                "{reason}"
            );
        }
    }

    #[test]
    fn a_development_proxy_keeps_its_scheme_and_host_on_the_emulator_port() {
        for (written, endpoint) in [
            (
                "http://127.0.0.1",
                "http://127.0.0.1:10000/devstoreaccount1",
            ),
            (
                "http://127.0.0.1/",
                "http://127.0.0.1:10000/devstoreaccount1",
            ),
            (
                "http://127.0.0.1:10000",
                "http://127.0.0.1:10000/devstoreaccount1",
            ),
            ("http://azurite", "http://azurite:10000/devstoreaccount1"),
            (
                "https://Azurite.Example:10000/",
                "https://azurite.example:10000/devstoreaccount1",
            ),
        ] {
            assert_eq!(
                development_proxy(written).as_deref(),
                Ok(endpoint),
                "{written}"
            );
        }
        for (written, why) in [
            ("http://127.0.0.1:10001", "BlobEndpoint"),
            ("http://127.0.0.1:99999", "port"),
            ("http://azurite/devstoreaccount1", "path"),
            ("http://bad host", "spaces"),
            ("azurite", "http"),
        ] {
            let reason = development_proxy(written).expect_err(written);
            assert!(reason.contains(why), "{written}: {reason}");
        }
    }
}
