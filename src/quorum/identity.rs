//! Which storage account an endpoint names, however it is spelled: a quorum
//! that counted one account twice would lose two votes to one outage.

use crate::azure::settings::BlobSettings;
use crate::error::{Error, Result};

/// Refuses two settings that name the same storage account, whatever the
/// spelling of their endpoints, and whatever container or blob they name:
/// one outage would take both votes.
pub(super) fn check_accounts(settings: &[BlobSettings]) -> Result<()> {
    let identities: Vec<String> = settings.iter().map(|s| identity(s.endpoint())).collect();
    for (i, a) in identities.iter().enumerate() {
        if let Some(j) = identities[..i].iter().position(|b| b == a) {
            return Err(Error::invalid(
                "accounts",
                format!(
                    "{} and {} name the same storage account ({a}); each account must count once",
                    settings[j].endpoint(),
                    settings[i].endpoint(),
                ),
            ));
        }
    }
    Ok(())
}

/// Host suffixes of Azure's blob endpoints, under which the first label is
/// the account's name, whatever comes between (`privatelink`, a DNS zone).
const AZURE_SUFFIXES: [&str; 4] = [
    ".blob.core.windows.net",
    ".blob.core.chinacloudapi.cn",
    ".blob.core.usgovcloudapi.net",
    ".blob.storage.azure.net",
];

/// The account an endpoint names: on Azure's own hosts, the account's name
/// (scheme and port do not change the account); elsewhere the host
/// lower-cased without a trailing dot (every loopback spelling as
/// `loopback`), the port (the scheme's default when none is written, so the
/// scheme itself counts only through it), and the path lower-cased without
/// empty segments (an account name is lower case).
fn identity(endpoint: &str) -> String {
    let lower = endpoint.to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://").unwrap_or(("https", &lower));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (host, port) = split_port(authority);
    let host = host.strip_suffix('.').unwrap_or(host);
    if let Some(suffix) = AZURE_SUFFIXES.iter().find(|s| host.ends_with(*s)) {
        let account = host.split('.').next().unwrap_or(host);
        return format!("azure account {account}{suffix}");
    }
    let port = port.unwrap_or(if scheme == "http" { "80" } else { "443" });
    let host = if is_loopback(host) { "loopback" } else { host };
    let path: Vec<&str> = path
        .split('/')
        .filter(|segment| !segment.is_empty() && *segment != ".")
        .collect();
    format!("{host}:{port}/{}", path.join("/"))
}

/// The host and the port written after it, if any (an IPv6 literal keeps
/// its brackets).
fn split_port(authority: &str) -> (&str, Option<&str>) {
    let host_end = if authority.starts_with('[') {
        authority.find(']').map_or(authority.len(), |i| i + 1)
    } else {
        authority.find(':').unwrap_or(authority.len())
    };
    let (host, port) = authority.split_at(host_end);
    let port = port.strip_prefix(':').map(|p| p.trim_start_matches('0'));
    (host, port.filter(|p| !p.is_empty()))
}

/// Whether `host` (lower case) names this machine: `localhost` and its
/// subdomains, any IPv4 address of 127.0.0.0/8 or 0.0.0.0 in any of the
/// forms URL parsers accept (`127.1`, `0x7f000001`), and the IPv6 loopback
/// and unspecified addresses, also as IPv4-mapped ones.
fn is_loopback(host: &str) -> bool {
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<std::net::Ipv6Addr>().is_ok_and(|ip| {
            ip.is_loopback()
                || ip.is_unspecified()
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_unspecified())
        });
    }
    ipv4(host).is_some_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

/// An IPv4 address as URL parsers read a host: one to four dot-separated
/// numbers (decimal, `0x` hexadecimal or `0`-prefixed octal), the last
/// filling the bytes left.
fn ipv4(host: &str) -> Option<std::net::Ipv4Addr> {
    let parts: Vec<&str> = host.strip_suffix('.').unwrap_or(host).split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let numbers = parts
        .iter()
        .map(|part| {
            if let Some(hex) = part.strip_prefix("0x") {
                u32::from_str_radix(hex, 16).ok()
            } else if part.len() > 1 && part.starts_with('0') {
                u32::from_str_radix(&part[1..], 8).ok()
            } else {
                part.parse::<u32>().ok()
            }
        })
        .collect::<Option<Vec<u32>>>()?;
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|n| *n > 255) {
        return None;
    }
    let spare_bits = 8 * (4 - leading.len());
    if spare_bits < 32 && *last >= 1 << spare_bits {
        return None;
    }
    let high = leading
        .iter()
        .enumerate()
        .fold(0u32, |acc, (i, n)| acc | (n << (24 - 8 * i)));
    Some(std::net::Ipv4Addr::from(high | last))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    fn on(endpoint: &str) -> BlobSettings {
        let cs = format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};BlobEndpoint={endpoint}"
        );
        BlobSettings::from_connection_string(&cs, "leases", "leader").unwrap()
    }

    fn refused(a: &str, b: &str) -> String {
        match check_accounts(&[on(a), on("http://10.0.0.9:10000/other"), on(b)]) {
            Err(Error::InvalidOption {
                field: "accounts",
                reason,
            }) => reason,
            other => panic!("{a} and {b}: {other:?}"),
        }
    }

    #[test]
    fn one_account_spelled_two_ways_is_refused_naming_both_spellings() {
        let emulator = "http://127.0.0.1:10000/devstoreaccount1";
        for other in [
            "http://127.0.0.1:10000/devstoreaccount1",
            "http://localhost:10000/devstoreaccount1",
            "http://LOCALHOST:10000/devstoreaccount1",
            "http://localhost.:10000/devstoreaccount1/",
            "http://[::1]:10000/devstoreaccount1",
            "http://[0:0:0:0:0:0:0:1]:10000/devstoreaccount1",
            "http://127.0.0.2:10000/devstoreaccount1",
            "http://127.1:10000/devstoreaccount1",
            "http://0x7f000001:10000/devstoreaccount1",
            "http://127.0.0.1:10000/DevStoreAccount1",
            "http://127.0.0.1:10000//devstoreaccount1//",
        ] {
            let reason = refused(emulator, other);
            assert!(
                reason.contains(emulator) && reason.contains(other.trim_end_matches('/')),
                "{other}: {reason}"
            );
        }
        for (a, b) in [
            (
                "https://acct.blob.core.windows.net",
                "https://ACCT.blob.core.windows.net/",
            ),
            (
                "https://acct.blob.core.windows.net",
                "https://acct.blob.core.windows.net:443",
            ),
            (
                "https://acct.blob.core.windows.net",
                "http://acct.blob.core.windows.net",
            ),
            (
                "https://acct.blob.core.windows.net",
                "https://acct.privatelink.blob.core.windows.net",
            ),
            ("http://storage.example:80/a", "http://Storage.Example/a"),
            ("https://storage.example/a", "https://storage.example:443/a"),
            ("http://storage.example:443/a", "https://storage.example/a"),
        ] {
            refused(a, b);
        }
    }

    #[test]
    fn a_scheme_in_capitals_and_credentials_in_the_authority_change_nothing() {
        let plain = identity("http://127.0.0.1:10000/devstoreaccount1");
        assert_eq!(
            identity("HTTP://user@127.0.0.1:010000/devstoreaccount1"),
            plain
        );
        assert_ne!(identity("http://127.0.0.1/devstoreaccount1"), plain);
        assert_eq!(
            identity("https://[::ffff:127.0.0.1]:10000/devstoreaccount1"),
            plain
        );
        assert_eq!(identity("http://0.0.0.0:10000/devstoreaccount1"), plain);
        assert_ne!(identity("http://127.0.0.256:10000/devstoreaccount1"), plain);
        assert_ne!(identity("http://128.0.0.1:10000/devstoreaccount1"), plain);
    }

    #[test]
    fn one_account_for_two_blobs_is_still_one_account() {
        let a = on("http://127.0.0.1:10000/devstoreaccount1");
        let b = a.for_blob("other", "blob").unwrap();
        assert!(check_accounts(&[a, b]).is_err());
    }

    #[test]
    fn distinct_accounts_are_accepted() {
        let distinct = [
            "http://127.0.0.1:10000/devstoreaccount1",
            "http://127.0.0.1:10001/devstoreaccount1",
            "http://localhost:10002/devstoreaccount1",
            "http://127.0.0.1:10000/devstoreaccount2",
            "https://acct.blob.core.windows.net",
            "https://acct2.blob.core.windows.net",
            "https://acct.blob.core.chinacloudapi.cn",
            "http://storage.example/a",
            "http://storage.example:8080/a",
            "http://10.0.0.1:10000/devstoreaccount1",
        ];
        let settings: Vec<BlobSettings> = distinct.iter().map(|e| on(e)).collect();
        check_accounts(&settings).unwrap();
    }
}
