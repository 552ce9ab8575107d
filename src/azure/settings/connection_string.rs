//! Storage connection strings (`Key=Value;…`), as Azure's SDKs write
//! them: the keys this crate reads, and the account, endpoint and
//! credential they name. No error repeats a value from the string.

use super::{
    endpoint, validate_account, Credential, AZURITE_ACCOUNT, AZURITE_ACCOUNT_KEY, AZURITE_ENDPOINT,
};
use crate::error::{Error, Result};

/// The parts of a connection string this crate reads; values borrowed.
#[derive(Default)]
pub(super) struct ConnectionString<'a> {
    account_name: Option<&'a str>,
    account_key: Option<&'a str>,
    sas: Option<&'a str>,
    blob_endpoint: Option<&'a str>,
    protocol: Option<&'a str>,
    endpoint_suffix: Option<&'a str>,
    development: bool,
    development_proxy: Option<&'a str>,
}

impl<'a> ConnectionString<'a> {
    pub(super) fn parse(text: &'a str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidConnectionString(reason);
        let mut cs = ConnectionString::default();
        let mut any = false;
        for (index, part) in text.split(';').enumerate() {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            any = true;
            let Some((key, value)) = part.split_once('=') else {
                return Err(bad(format!(
                    "part {} has no '=' (expected Key=Value)",
                    index + 1
                )));
            };
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(bad(format!("part {} has an empty key", index + 1)));
            }
            if value.is_empty() {
                return Err(bad(format!("{key} has an empty value")));
            }
            let slot = match key.to_ascii_lowercase().as_str() {
                "accountname" => &mut cs.account_name,
                "accountkey" => &mut cs.account_key,
                "sharedaccesssignature" => &mut cs.sas,
                "blobendpoint" => &mut cs.blob_endpoint,
                "defaultendpointsprotocol" => &mut cs.protocol,
                "endpointsuffix" => &mut cs.endpoint_suffix,
                "developmentstorageproxyuri" => &mut cs.development_proxy,
                "usedevelopmentstorage" => {
                    cs.development = match value.to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad("UseDevelopmentStorage must be true or false".into())),
                    };
                    continue;
                }
                "queueendpoint"
                | "tableendpoint"
                | "fileendpoint"
                | "dfsendpoint"
                | "blobsecondaryendpoint"
                | "queuesecondaryendpoint"
                | "tablesecondaryendpoint"
                | "filesecondaryendpoint" => continue,
                _ => {
                    // Key names are not secret, but an unknown "key" may be a
                    // value that lost its name; print it only if it looks like a name.
                    let shown = if key.chars().all(|c| c.is_ascii_alphabetic()) && key.len() <= 40 {
                        key
                    } else {
                        "(unreadable)"
                    };
                    return Err(bad(format!("unknown key {shown}")));
                }
            };
            if slot.replace(value).is_some() {
                return Err(bad(format!("{key} is given twice")));
            }
        }
        if !any {
            return Err(bad("it is empty".into()));
        }
        Ok(cs)
    }

    /// The account, blob endpoint and credential the string names.
    pub(super) fn resolve(&self) -> Result<(String, String, Credential)> {
        let bad = |reason: &str| Error::InvalidConnectionString(reason.to_owned());
        if self.development {
            let endpoint = match self.development_proxy {
                None => AZURITE_ENDPOINT.to_owned(),
                Some(proxy) => endpoint::development_proxy(proxy)
                    .map_err(|r| bad(&format!("DevelopmentStorageProxyUri {r}")))?,
            };
            return Ok((
                AZURITE_ACCOUNT.to_owned(),
                endpoint,
                Credential::SharedKey(AZURITE_ACCOUNT_KEY.to_owned()),
            ));
        }
        let credential = match (self.account_key, self.sas) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "both AccountKey and SharedAccessSignature are given; keep one",
                ))
            }
            (Some(key), None) => {
                if !is_base64(key) {
                    return Err(bad("AccountKey is not valid base64"));
                }
                if self.account_name.is_none() {
                    return Err(bad("AccountKey needs AccountName"));
                }
                Credential::SharedKey(key.to_owned())
            }
            (None, Some(sas)) => Credential::Sas(sas.trim_start_matches('?').to_owned()),
            (None, None) => {
                return Err(bad(
                    "no credential: give AccountKey or SharedAccessSignature, or use UseDevelopmentStorage=true",
                ))
            }
        };
        if let Some(account) = self.account_name {
            validate_account(account)
                .map_err(|_| bad("AccountName is not a valid account name"))?;
        }
        let endpoint = match self.blob_endpoint {
            Some(endpoint) => {
                endpoint::parse(endpoint).map_err(|r| bad(&format!("BlobEndpoint {r}")))?
            }
            None => self.public_endpoint()?,
        };
        let account = match self.account_name {
            Some(account) => account.to_owned(),
            None => endpoint::account(&endpoint),
        };
        Ok((account, endpoint, credential))
    }

    /// `{protocol}://{account}.blob.{suffix}`, from `DefaultEndpointsProtocol`
    /// (default https), `AccountName` and `EndpointSuffix` (default
    /// `core.windows.net`).
    fn public_endpoint(&self) -> Result<String> {
        let bad = |reason: &str| Error::InvalidConnectionString(reason.to_owned());
        let account = self
            .account_name
            .ok_or_else(|| bad("AccountName or BlobEndpoint is needed"))?;
        let protocol = match self.protocol.map(str::to_ascii_lowercase).as_deref() {
            None | Some("https") => "https",
            Some("http") => "http",
            Some(_) => return Err(bad("DefaultEndpointsProtocol must be http or https")),
        };
        let suffix = self.endpoint_suffix.unwrap_or("core.windows.net");
        if suffix.contains(['/', '?', '#', ' ']) {
            return Err(bad("EndpointSuffix must be a host name suffix"));
        }
        endpoint::parse(&format!("{protocol}://{account}.blob.{suffix}"))
            .map_err(|r| bad(&format!("EndpointSuffix makes an endpoint that {r}")))
    }
}

fn is_base64(text: &str) -> bool {
    !text.is_empty()
        && text.len().is_multiple_of(4)
        && text.trim_end_matches('=').len() + 2 >= text.len()
        && text
            .trim_end_matches('=')
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

#[cfg(test)]
mod tests {
    use super::super::BlobSettings;
    use super::*;

    const KEY: &str = "c2VjcmV0LWtleS1ub3QtZm9yLXByaW50aW5n";

    fn from_cs(cs: &str) -> Result<BlobSettings> {
        BlobSettings::from_connection_string(cs, "leases", "leader")
    }

    #[test]
    fn account_key_connection_string() {
        let s = from_cs(&format!(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};EndpointSuffix=core.chinacloudapi.cn"
        ))
        .unwrap();
        assert_eq!(s.endpoint(), "https://acct.blob.core.chinacloudapi.cn");
        assert_eq!(s.account(), "acct");
        assert!(matches!(s.credential(), Credential::SharedKey(_)));
    }

    #[test]
    fn blob_endpoint_and_sas() {
        let s = from_cs("BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=2022&sig=abc%3D").unwrap();
        assert_eq!(s.endpoint(), "https://acct.blob.core.windows.net");
        assert_eq!(s.account(), "acct");
        assert!(matches!(s.credential(), Credential::Sas(sas) if sas == "sv=2022&sig=abc%3D"));
    }

    #[test]
    fn azurite_forms() {
        let dev = from_cs("UseDevelopmentStorage=true").unwrap();
        assert_eq!(dev.endpoint(), AZURITE_ENDPOINT);
        assert_eq!(dev.account(), AZURITE_ACCOUNT);

        let explicit = from_cs(&format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_ACCOUNT_KEY};BlobEndpoint=http://127.0.0.1:41234/devstoreaccount1;QueueEndpoint=http://127.0.0.1:1/x;"
        ))
        .unwrap();
        assert_eq!(
            explicit.endpoint(),
            "http://127.0.0.1:41234/devstoreaccount1"
        );

        let proxied =
            from_cs("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite")
                .unwrap();
        assert_eq!(proxied.endpoint(), "http://azurite:10000/devstoreaccount1");

        let moved = BlobSettings::azurite("leases", "leader")
            .unwrap()
            .with_endpoint("http://127.0.0.1:4000/devstoreaccount1/")
            .unwrap();
        assert_eq!(moved.endpoint(), "http://127.0.0.1:4000/devstoreaccount1");
    }

    #[test]
    fn malformed_connection_strings_never_echo_the_key() {
        let cases = [
            String::new(),
            "   ;  ".to_owned(),
            format!("AccountName=acct;{KEY}"),
            format!("AccountName=acct;AccountKey={KEY};Bogus=1"),
            format!("AccountName=acct;AccountKey={KEY};SharedAccessSignature=sig={KEY}"),
            format!("AccountName=acct;AccountKey={KEY}!!"),
            format!("AccountKey={KEY}"),
            format!("AccountName=acct;AccountKey={KEY};DefaultEndpointsProtocol=ftp"),
            format!("AccountName=acct;AccountKey={KEY};BlobEndpoint=ftp://x"),
            format!("AccountName=acct;AccountKey={KEY};AccountKey={KEY}"),
            "AccountName=acct".to_owned(),
            "UseDevelopmentStorage=maybe".to_owned(),
            "AccountName=acct;AccountKey=".to_owned(),
            format!("{KEY}={KEY}"),
        ];
        for cs in cases {
            let err = from_cs(&cs).expect_err(&cs);
            assert!(matches!(err, Error::InvalidConnectionString(_)), "{err:?}");
            let text = format!("{err} {err:?}");
            assert!(!text.contains(KEY), "{text}");
            assert!(!text.contains("c2VjcmV0"), "{text}");
        }
    }

    #[test]
    fn a_bad_endpoint_is_refused_naming_the_key_that_made_it() {
        for (cs, key) in [
            (
                format!("AccountName=acct;AccountKey={KEY};BlobEndpoint=http://h:65536/acct"),
                "BlobEndpoint",
            ),
            (
                format!("AccountName=acct;AccountKey={KEY};BlobEndpoint=http:///acct"),
                "BlobEndpoint",
            ),
            (
                format!("AccountName=acct;AccountKey={KEY};EndpointSuffix=core.windows.net:99999"),
                "EndpointSuffix",
            ),
            (
                format!("AccountName=acct;AccountKey={KEY};EndpointSuffix=x@evil.example"),
                "EndpointSuffix",
            ),
            (
                "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://h:1".to_owned(),
                "DevelopmentStorageProxyUri",
            ),
            (
                "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=h".to_owned(),
                "DevelopmentStorageProxyUri",
            ),
        ] {
            let err = from_cs(&cs).expect_err(&cs);
            let text = err.to_string();
            assert!(
                matches!(err, Error::InvalidConnectionString(_)) && text.contains(key),
                "{cs}: {text}"
            );
            assert!(!text.contains(KEY) && !text.contains("evil"), "{text}");
        }
        let s = from_cs(&format!(
            "AccountName=acct;AccountKey={KEY};BlobEndpoint=HTTPS://Acct.Example:443/"
        ))
        .unwrap();
        assert_eq!(s.endpoint(), "HTTPS://Acct.Example:443");
    }
}
