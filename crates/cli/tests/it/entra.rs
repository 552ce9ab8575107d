//! `blob-mutex` signed in by `--account-url` and `--auth`, as on a host with
//! Shared Key disabled: the token comes from an identity endpoint that the
//! test serves on 127.0.0.1, and goes as a bearer token to an Azurite that
//! checks bearer tokens (`--oauth basic`, over https with a certificate of
//! the test's own CA, which the command trusts through `SSL_CERT_FILE`).
//!
//! Managed identity is faked with the App Service protocol that
//! `azure_identity` speaks when `IDENTITY_ENDPOINT` and `IDENTITY_HEADER`
//! are set (the VM's IMDS address is fixed, so it cannot be pointed at the
//! test); the token is an unsigned JWT with the audience, issuer and
//! lifetime Azurite checks. Workload identity and a service principal get
//! theirs from a token endpoint the test serves over https (node, which
//! runs Azurite, serves it with the same CA), `azure-cli` from a stand-in
//! `az` on the PATH. Also: an identity endpoint that refuses, or
//! none at all, ends the command at start with code 2 and what to check;
//! a SAS read from a file leads on a plain Azurite, on every backend; and
//! a quorum's accounts file mixes the kinds, one per account.

use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use blob_mutex_testkit::azurite::{self, Azurite};
use blob_mutex_testkit::tls::TestCa;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::process::Command;

use crate::support::BIN;

/// The command: writes the leader state and prints it back (`$0` is this
/// binary), with no flags: `run` passes the account and the way it signed in.
const STATE_SCRIPT: &str = r#"echo "leader $BLOB_MUTEX_EPOCH" | "$0" state put && "$0" state get"#;

/// The secret header the App Service protocol sends (`IDENTITY_HEADER`).
const IDENTITY_HEADER: &str = "test-identity-header";

/// What the fake identity endpoint answers.
#[derive(Clone, Copy)]
enum Answer {
    /// A token Azurite accepts.
    Token,
    /// A token for another audience (Azure Resource Manager), which
    /// storage refuses.
    ForeignToken,
    /// 400, as an identity endpoint answers for an identity the host does
    /// not have.
    NotAssigned,
}

/// An identity endpoint of the App Service protocol on 127.0.0.1, which
/// records the request line and secret header of each request.
struct IdentityEndpoint {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl IdentityEndpoint {
    async fn start(answer: Answer) -> IdentityEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/msi/token", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Some(head) = read_head(&mut stream).await else {
                        return;
                    };
                    let line = head.lines().next().unwrap_or_default().to_owned();
                    let secret = head.lines().any(|h| {
                        h.to_ascii_lowercase() == format!("x-identity-header: {IDENTITY_HEADER}")
                    });
                    seen.lock().unwrap().push(format!("{line} secret={secret}"));
                    let (status, body) = match answer {
                        Answer::Token => ("200 OK", token_response(STORAGE)),
                        Answer::ForeignToken => ("200 OK", token_response(MANAGEMENT)),
                        Answer::NotAssigned => (
                            "400 Bad Request",
                            r#"{"error":"invalid_request","error_description":"Identity not found"}"#
                                .to_owned(),
                        ),
                    };
                    let response = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        IdentityEndpoint { url, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// The request head, up to the blank line.
async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&byte[..n]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// The audience of Azure Storage's tokens.
const STORAGE: &str = "https://storage.azure.com";
/// The audience of Azure Resource Manager's tokens.
const MANAGEMENT: &str = "https://management.azure.com";

/// The App Service protocol's answer, with a [`jwt`] for `audience`.
fn token_response(audience: &str) -> String {
    format!(
        r#"{{"access_token":"{}","expires_on":"{}","token_type":"Bearer","resource":"{audience}"}}"#,
        jwt(audience),
        now() + 3600
    )
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// An unsigned JWT for `audience` with what Azurite checks (audience,
/// issuer, `iat`, `nbf`, `exp`), valid for an hour.
fn jwt(audience: &str) -> String {
    let now = now();
    let encode = |text: &str| azure_core::base64::encode_url_safe(text);
    let header = encode(r#"{"alg":"none","typ":"JWT"}"#);
    let claims = encode(&format!(
        r#"{{"aud":"{audience}","iss":"https://sts.windows.net/00000000-0000-0000-0000-000000000001/","iat":{},"nbf":{},"exp":{}}}"#,
        now - 60,
        now - 60,
        now + 3600
    ));
    format!("{header}.{claims}.{}", encode("unsigned"))
}

/// A Microsoft Entra ID token endpoint for workload identity, over https
/// with the test CA's certificate (`azure_identity` takes no other
/// authority), run by node (which runs Azurite): it answers every request
/// with a [`jwt`] and appends each request's line and form to a log.
struct Authority {
    url: String,
    log: std::path::PathBuf,
    _process: tokio::process::Child,
}

const AUTHORITY: &str = r"
const [cert, key, log, body] = process.argv.slice(-4);
const fs = require('fs');
require('https').createServer(
  { cert: fs.readFileSync(cert), key: fs.readFileSync(key) },
  (req, res) => {
    let form = '';
    req.on('data', (chunk) => { form += chunk; });
    req.on('end', () => {
      fs.appendFileSync(log, `${req.method} ${req.url} ${form}
`);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
    });
  },
).listen(0, '127.0.0.1', function () { console.log(this.address().port); });
";

impl Authority {
    async fn start(ca: &TestCa, dir: &std::path::Path) -> Authority {
        use tokio::io::AsyncBufReadExt;
        let log = dir.join("authority.log");
        let body = format!(
            r#"{{"token_type":"Bearer","expires_in":3600,"ext_expires_in":3600,"access_token":"{}"}}"#,
            jwt(STORAGE)
        );
        let mut process = Command::new("node")
            .args(["-e", AUTHORITY, "--"])
            .arg(&ca.cert)
            .arg(&ca.key)
            .arg(&log)
            .arg(body)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the tests need node (it runs Azurite)");
        let stdout = process.stdout.take().expect("piped stdout");
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(30),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("the authority listens within 30 s")
        .expect("read its port");
        Authority {
            url: format!("https://127.0.0.1:{}", line.trim()),
            log,
            _process: process,
        }
    }

    fn requests(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// `blob-mutex` with `args` and `env`, and nothing of the test's own
/// environment that would choose another account, identity, proxy or CA.
async fn blob_mutex(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("RUST_LOG");
    for name in [
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
        "AZURE_AUTHORITY_HOST",
        "IDENTITY_ENDPOINT",
        "IDENTITY_HEADER",
        "IMDS_ENDPOINT",
        "MSI_ENDPOINT",
        "BLOB_MUTEX_ACCOUNT_URL",
        "BLOB_MUTEX_AUTH",
        "BLOB_MUTEX_BACKEND",
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("blob-mutex ended within 120 s")
        .expect("run blob-mutex")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_identity_leads_and_releases_with_a_bearer_token() {
    let identity = IdentityEndpoint::start(Answer::Token).await;
    let ca = TestCa::new();
    let storage = Azurite::start_https_with_args(&ca.cert, &ca.key, &["--oauth", "basic"]);
    let container = azurite::unique_container("entra-mi");
    // A container's URL: the container comes from it.
    let url = format!("{}/{container}", storage.endpoint);
    let ca_file = ca.ca.display().to_string();
    let env = [
        ("IDENTITY_ENDPOINT", identity.url.as_str()),
        ("IDENTITY_HEADER", IDENTITY_HEADER),
        ("SSL_CERT_FILE", ca_file.as_str()),
    ];
    let signed_in = ["--account-url", &url, "--auth", "managed-identity"];

    let mut args = vec!["run"];
    args.extend(signed_in);
    args.extend(["--blob", "lock", "--first-contact-timeout", "20s"]);
    // The command's `state put` and `state get` sign in as `run` did,
    // with no flags.
    args.extend(["--", "sh", "-c", STATE_SCRIPT, BIN]);
    let run = blob_mutex(&args, &env).await;
    assert!(run.status.success(), "{run:?}");
    assert!(
        String::from_utf8_lossy(&run.stdout).starts_with("leader "),
        "{run:?}"
    );
    let requests = identity.requests();
    assert!(!requests.is_empty(), "no token was asked for");
    for request in &requests {
        assert!(
            request.starts_with("GET /msi/token?")
                && request.contains("resource=https%3A%2F%2Fstorage.azure.com")
                && request.ends_with("secret=true"),
            "{request}"
        );
    }

    // Released: status, signed in the same way, finds the lease free.
    let mut args = vec!["status"];
    args.extend(signed_in);
    args.extend(["--blob", "lock"]);
    let status = blob_mutex(&args, &env).await;
    assert_eq!(status.status.code(), Some(3), "{status:?}");

    // The token is what storage checks: one for another audience is
    // refused (a failure to fix: exit code 1 once first contact gives up).
    let foreign = IdentityEndpoint::start(Answer::ForeignToken).await;
    let env = [
        ("IDENTITY_ENDPOINT", foreign.url.as_str()),
        ("IDENTITY_HEADER", IDENTITY_HEADER),
        ("SSL_CERT_FILE", ca_file.as_str()),
    ];
    let mut args = vec!["run"];
    args.extend(signed_in);
    args.extend([
        "--blob",
        "lock",
        "--first-contact-timeout",
        "2s",
        "--",
        "true",
    ]);
    let refused = blob_mutex(&args, &env).await;
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        stderr(&refused).contains("audience"),
        "{}",
        stderr(&refused)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_identity_leads_and_releases_with_a_bearer_token() {
    const TENANT: &str = "00000000-0000-0000-0000-000000000001";
    const CLIENT: &str = "00000000-0000-0000-0000-000000000002";
    let ca = TestCa::new();
    let dir = std::env::temp_dir().join(azurite::unique_container("entra-wi"));
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "service-account-token").expect("write the token file");
    let authority = Authority::start(&ca, &dir).await;
    let storage = Azurite::start_https_with_args(&ca.cert, &ca.key, &["--oauth", "basic"]);
    let container = azurite::unique_container("entra-wi");
    let (ca_file, token_file) = (
        ca.ca.display().to_string(),
        token_file.display().to_string(),
    );
    let env = [
        ("AZURE_AUTHORITY_HOST", authority.url.as_str()),
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_FEDERATED_TOKEN_FILE", token_file.as_str()),
        ("SSL_CERT_FILE", ca_file.as_str()),
    ];
    let signed_in = [
        "--account-url",
        storage.endpoint.as_str(),
        "--auth",
        "workload-identity",
        "--container",
        container.as_str(),
        "--blob",
        "lock",
    ];
    let mut args = vec!["run"];
    args.extend(signed_in);
    args.extend(["--first-contact-timeout", "20s", "--", "true"]);
    let run = blob_mutex(&args, &env).await;
    assert!(run.status.success(), "{run:?}");
    let requests = authority.requests();
    assert!(
        requests.starts_with(&format!("POST /{TENANT}/oauth2/v2.0/token "))
            && requests.contains("client_assertion=service-account-token")
            && requests.contains(&format!("client_id={CLIENT}"))
            && requests.contains("scope=https%3A%2F%2Fstorage.azure.com%2F.default"),
        "{requests}"
    );

    let mut args = vec!["status"];
    args.extend(signed_in);
    let status = blob_mutex(&args, &env).await;
    assert_eq!(status.status.code(), Some(3), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_identity_is_a_clear_error_at_start_within_seconds() {
    let refusing = IdentityEndpoint::start(Answer::NotAssigned).await;
    // Nothing listens there: the port of a listener just closed.
    let absent = {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        format!("http://{}/msi/token", listener.local_addr().expect("addr"))
    };
    for (endpoint, what) in [(refusing.url.as_str(), "refused"), (&absent, "absent")] {
        let started = Instant::now();
        let out = blob_mutex(
            &[
                "run",
                "--account-url",
                "https://127.0.0.1:9/devstoreaccount1",
                "--auth",
                "managed-identity",
                "--container",
                "leases",
                "--blob",
                "lock",
                "--",
                "true",
            ],
            &[
                ("IDENTITY_ENDPOINT", endpoint),
                ("IDENTITY_HEADER", IDENTITY_HEADER),
            ],
        )
        .await;
        let took = started.elapsed();
        assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
        let message = stderr(&out);
        assert!(
            message.contains("--auth managed-identity cannot get a token")
                && message.contains("has a managed identity"),
            "{what}: {message}"
        );
        // Observed: under a second when refused, a few seconds of the
        // pipeline's retries when absent; bounded by the 10 s of the first
        // token, with slack for a loaded machine.
        assert!(took < Duration::from_secs(20), "{what}: took {took:?}");
    }
    assert!(!refusing.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sas_file_leads_and_releases_on_every_backend() {
    let storage = azurite::shared();
    let sas = blob_mutex_testkit::sas::account_sas("sco", "rwdlac");
    let dir = std::env::temp_dir().join(azurite::unique_container("entra-sas"));
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let sas_file = dir.join("account.sas");
    std::fs::write(&sas_file, format!("?{sas}\n")).expect("write the SAS file");
    let auth = format!("sas-file:{}", sas_file.display());
    let mut backends = vec!["official"];
    if cfg!(feature = "sdk-v021") {
        backends.push("sdk-v021");
    }
    for backend in backends {
        let container = azurite::unique_container("entra-sas");
        let signed_in = [
            "--account-url",
            storage.endpoint.as_str(),
            "--auth",
            auth.as_str(),
            "--backend",
            backend,
            "--container",
            container.as_str(),
            "--blob",
            "lock",
        ];
        let mut args = vec!["run"];
        args.extend(signed_in);
        args.extend(["--", "sh", "-c", STATE_SCRIPT, BIN]);
        let run = blob_mutex(&args, &[]).await;
        assert!(run.status.success(), "{backend}: {run:?}");
        assert!(
            String::from_utf8_lossy(&run.stdout).starts_with("leader "),
            "{backend}: {run:?}"
        );
        let mut args = vec!["status"];
        args.extend(signed_in);
        let status = blob_mutex(&args, &[]).await;
        assert_eq!(status.status.code(), Some(3), "{backend}: {status:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_signs_in_to_each_account_of_the_accounts_file() {
    let identity = IdentityEndpoint::start(Answer::Token).await;
    let ca = TestCa::new();
    let plain = [Azurite::start(), Azurite::start()];
    let bearer = Azurite::start_https_with_args(&ca.cert, &ca.key, &["--oauth", "basic"]);
    let dir = std::env::temp_dir().join(azurite::unique_container("entra-quorum"));
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let sas_file = dir.join("account.sas");
    let sas = blob_mutex_testkit::sas::account_sas("sco", "rwdlac");
    std::fs::write(&sas_file, &sas).expect("write the SAS file");
    let accounts = dir.join("accounts.txt");
    std::fs::write(
        &accounts,
        format!(
            "# a SAS file, the kind of --auth, and a managed identity\n\
             {} sas-file:{}\n{}\n{} managed-identity\n",
            plain[0].endpoint,
            sas_file.display(),
            plain[1].endpoint,
            bearer.endpoint
        ),
    )
    .expect("write the accounts file");
    let (accounts, auth) = (
        accounts.display().to_string(),
        format!("sas-file:{}", sas_file.display()),
    );
    let ca_file = ca.ca.display().to_string();
    let env = [
        ("IDENTITY_ENDPOINT", identity.url.as_str()),
        ("IDENTITY_HEADER", IDENTITY_HEADER),
        ("SSL_CERT_FILE", ca_file.as_str()),
    ];
    let container = azurite::unique_container("entra-quorum");
    let target = [
        "--accounts-file",
        accounts.as_str(),
        "--auth",
        auth.as_str(),
        "--container",
        container.as_str(),
        "--blob",
        "lock",
    ];
    let mut args = vec!["run"];
    args.extend(target);
    args.extend(["--first-contact-timeout", "20s", "--", "true"]);
    let run = blob_mutex(&args, &env).await;
    assert!(run.status.success(), "{run:?}");
    assert!(!identity.requests().is_empty(), "no token was asked for");

    let mut args = vec!["status", "--json"];
    args.extend(target);
    let status = blob_mutex(&args, &env).await;
    assert_eq!(status.status.code(), Some(3), "{status:?}");
    let json = String::from_utf8_lossy(&status.stdout);
    assert_eq!(json.matches("\"account\":").count(), 3, "{json}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_principal_leads_with_its_secret_from_the_environment() {
    const SECRET: &str = "service-principal-secret";
    let ca = TestCa::new();
    let dir = std::env::temp_dir().join(azurite::unique_container("entra-sp"));
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let authority = Authority::start(&ca, &dir).await;
    let storage = Azurite::start_https_with_args(&ca.cert, &ca.key, &["--oauth", "basic"]);
    let ca_file = ca.ca.display().to_string();
    let env = [
        ("AZURE_AUTHORITY_HOST", authority.url.as_str()),
        ("AZURE_TENANT_ID", "00000000-0000-0000-0000-000000000001"),
        ("AZURE_CLIENT_ID", "00000000-0000-0000-0000-000000000003"),
        ("AZURE_CLIENT_SECRET", SECRET),
        ("SSL_CERT_FILE", ca_file.as_str()),
    ];
    let container = azurite::unique_container("entra-sp");
    let run = blob_mutex(
        &[
            "run",
            "--account-url",
            &format!("{}/{container}", storage.endpoint),
            "--auth",
            "service-principal",
            "--blob",
            "lock",
            "--first-contact-timeout",
            "20s",
            "--",
            "true",
        ],
        &env,
    )
    .await;
    assert!(run.status.success(), "{run:?}");
    let requests = authority.requests();
    assert!(
        requests.contains(&format!("client_secret={SECRET}"))
            && requests.contains("grant_type=client_credentials"),
        "{requests}"
    );
    assert!(!stderr(&run).contains(SECRET), "{}", stderr(&run));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_azure_cli_credential_leads_with_the_token_of_az() {
    let ca = TestCa::new();
    let storage = Azurite::start_https_with_args(&ca.cert, &ca.key, &["--oauth", "basic"]);
    let dir = std::env::temp_dir().join(azurite::unique_container("entra-az"));
    std::fs::create_dir_all(&dir).expect("create the test directory");
    // A stand-in for `az account get-access-token`: records its arguments
    // and prints the JSON the Azure CLI prints.
    let az = dir.join("az");
    std::fs::write(
        &az,
        format!(
            "#!/bin/sh\necho \"$@\" >> \"{}\"\n\
             printf '%s' '{{\"accessToken\":\"{}\",\"expires_on\":{},\"tokenType\":\"Bearer\"}}'\n",
            dir.join("az.log").display(),
            jwt(STORAGE),
            now() + 3600
        ),
    )
    .expect("write az");
    let mut permissions = std::fs::metadata(&az).expect("az").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&az, permissions).expect("make az executable");
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let ca_file = ca.ca.display().to_string();
    let env = [("PATH", path.as_str()), ("SSL_CERT_FILE", ca_file.as_str())];
    let container = azurite::unique_container("entra-az");
    let run = blob_mutex(
        &[
            "run",
            "--account-url",
            &format!("{}/{container}", storage.endpoint),
            "--auth",
            "azure-cli",
            "--blob",
            "lock",
            "--first-contact-timeout",
            "20s",
            "--",
            "true",
        ],
        &env,
    )
    .await;
    assert!(run.status.success(), "{run:?}");
    let calls = std::fs::read_to_string(dir.join("az.log")).unwrap_or_default();
    assert!(
        calls.starts_with("account get-access-token")
            && calls.contains("--scope https://storage.azure.com/.default"),
        "{calls}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
