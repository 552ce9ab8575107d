//! A private certificate authority for tests, made with the `openssl`
//! command: its certificate, and a server certificate it signed for
//! 127.0.0.1, as Azurite takes them (`--cert`, `--key`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA and one server certificate for 127.0.0.1, in files under a
/// directory of their own, removed on drop.
pub struct TestCa {
    dir: PathBuf,
    /// The CA's certificate (PEM): what a client must trust.
    pub ca: PathBuf,
    /// The server's certificate (PEM), for 127.0.0.1.
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
}

impl TestCa {
    /// Makes a new CA and a server certificate it signed.
    pub fn new() -> TestCa {
        let dir = std::env::temp_dir().join(format!(
            "blob-mutex-ca-{}-{}",
            std::process::id(),
            super::azurite::unique_container("ca")
        ));
        std::fs::create_dir_all(&dir).expect("create the CA's directory");
        let path = |name: &str| dir.join(name);
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=blob-mutex test CA",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        openssl(
            &dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
        );
        std::fs::write(
            path("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write the extensions");
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "server.ext",
                "-out",
                "server.pem",
            ],
        );
        TestCa {
            ca: path("ca.pem"),
            cert: path("server.pem"),
            key: path("server.key"),
            dir,
        }
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the tests need the openssl command");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
