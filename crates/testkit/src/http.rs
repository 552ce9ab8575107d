//! A minimal HTTP/1.1 client for `blob-mutex run --metrics-addr`'s endpoint
//! (the addresses to serve it on: [`crate::ports`]).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An answer: the status code, the head (status line and headers) and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// `method path` on `addr` (with `body`, if any), or `None` when nothing
/// answers within 5 s.
pub async fn request(addr: &str, method: &str, path: &str, body: &str) -> Option<Answer> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.ok()?;
        Some(reply)
    };
    let reply = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()??;
    let status = reply.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    Some(Answer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    })
}

/// `GET path` on `addr`: the status code and the body, or `None` when
/// nothing answers within 5 s.
pub async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    request(addr, "GET", path, "")
        .await
        .map(|answer| (answer.status, answer.body))
}
