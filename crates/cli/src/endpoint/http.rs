//! One exchange on a connection of the endpoint: the request head read
//! within [`HEAD_READ_LIMIT`] (lines may end in CRLF or a bare LF), one
//! answer written within [`WRITE_LIMIT`], then the connection closed.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

use super::accept::{Progress, Stage};

/// How long a client may take to send its request head, from the accept:
/// well under a probe's usual 1 s timeout, so that a connection that sends
/// nothing is gone long before a probe waiting behind it would fail.
pub(super) const HEAD_READ_LIMIT: Duration = Duration::from_millis(500);
/// How long writing an answer may take, and waiting for the client to
/// close its end after it.
pub(super) const WRITE_LIMIT: Duration = Duration::from_secs(2);
/// The longest request head read; the request line is all that is used.
const HEAD_MAX: usize = 4096;

/// An answer before it is written.
pub(super) struct Reply {
    pub(super) status: &'static str,
    pub(super) content_type: &'static str,
    /// Whether to name the allowed methods.
    pub(super) allow: bool,
    pub(super) body: String,
}

impl Reply {
    pub(super) fn text(status: &'static str, line: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain",
            allow: false,
            body: format!("{line}\n"),
        }
    }

    /// 200 with the line, or 503 with the reason.
    pub(super) fn verdict(verdict: Result<String, String>) -> Reply {
        match verdict {
            Ok(line) => Reply::text("200 OK", &line),
            Err(reason) => Reply::text("503 Service Unavailable", &reason),
        }
    }

    /// The bytes to send; without the body for HEAD.
    pub(super) fn render(self, head_only: bool) -> Vec<u8> {
        let allow = if self.allow {
            "allow: GET, HEAD\r\n"
        } else {
            ""
        };
        let mut reply = format!(
            "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n{allow}connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if !head_only {
            reply.push_str(&self.body);
        }
        reply.into_bytes()
    }
}

/// Answers one connection: [`HEAD_READ_LIMIT`] for the request head, then
/// `answer`'s bytes for it within [`WRITE_LIMIT`]; tells `progress` how far
/// it has come.
pub(super) async fn respond(
    mut stream: TcpStream,
    progress: Progress,
    answer: impl FnOnce(&str) -> Vec<u8>,
) {
    let Ok(Some(head)) = tokio::time::timeout(HEAD_READ_LIMIT, read_head(&mut stream)).await else {
        return;
    };
    progress.set(Stage::Answering);
    let reply = answer(&head);
    let written = tokio::time::timeout(WRITE_LIMIT, async {
        stream.write_all(&reply).await?;
        stream.shutdown().await?;
        progress.set(Stage::Draining);
        // Closing with unread bytes (a request body) would reset the
        // connection, and the client could lose the answer: read on until
        // it closes.
        let mut rest = [0u8; 1024];
        while stream.read(&mut rest).await? > 0 {}
        Ok::<_, io::Error>(())
    })
    .await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(error = %e, "could not answer a request to the metrics endpoint"),
        Err(_) => {
            debug!(limit = ?WRITE_LIMIT, "an answer of the metrics endpoint took too long; closed");
        }
    }
}

/// Reads up to the end of the request head (or [`HEAD_MAX`] bytes, or the
/// client's end of the stream); `None` when nothing came.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while head.len() < HEAD_MAX && !head_ends(&head) {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..read]);
    }
    (!head.is_empty()).then(|| String::from_utf8_lossy(&head).into_owned())
}

/// Whether `bytes` hold a whole request head: an empty line, after lines
/// that end in CRLF or, as RFC 9112 lets a server accept, in a bare LF.
fn head_ends(bytes: &[u8]) -> bool {
    bytes.windows(2).any(|w| w == b"\n\n") || bytes.windows(3).any(|w| w == b"\n\r\n")
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;
    use tokio::time::Instant;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const MINUTE: Duration = Duration::from_secs(60);

    /// A connection answered by [`respond`] with `ok`: the client's end,
    /// the answer's task and when it started.
    async fn responding() -> (TcpStream, JoinHandle<()>, Instant) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        let ok = |_: &str| Reply::text("200 OK", "ok").render(false);
        let answer = tokio::spawn(respond(accepted.unwrap().0, Progress::new(), ok));
        (client.unwrap(), answer, Instant::now())
    }

    #[test]
    fn a_head_ends_at_an_empty_line_after_crlf_or_bare_lf() {
        for whole in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"GET / HTTP/1.1\n\n",
            b"GET / HTTP/1.1\nhost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nhost: a\n\n",
        ] {
            assert!(head_ends(whole), "{whole:?}");
        }
        for part in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"GET / HTTP/1.1\n",
            b"GET / HTTP/1.1\r\nhost: a\r\n",
        ] {
            assert!(!head_ends(part), "{part:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_sends_nothing_is_cut_at_the_head_read_limit() {
        let (mut client, answer, start) = responding().await;
        tokio::time::timeout(MINUTE, answer)
            .await
            .expect("the connection was never closed")
            .unwrap();
        let took = start.elapsed();
        assert!(
            took >= HEAD_READ_LIMIT && took < HEAD_READ_LIMIT + SECOND,
            "{took:?}"
        );
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_bare_lf_lines_is_answered_at_once() {
        let (mut client, answer, start) = responding().await;
        client
            .write_all(b"GET /livez HTTP/1.1\nhost: a\n\n")
            .await
            .unwrap();
        let mut answered = Vec::new();
        client.read_to_end(&mut answered).await.unwrap();
        assert!(answered.ends_with(b"\r\n\r\nok\n"), "{answered:?}");
        assert!(start.elapsed() < HEAD_READ_LIMIT, "{:?}", start.elapsed());
        drop(client);
        answer.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_keeps_the_connection_open_is_cut_at_the_write_limit() {
        let (mut client, answer, start) = responding().await;
        client
            .write_all(b"GET /livez HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        // Reads the answer and never closes its end.
        let mut answered = Vec::new();
        client.read_to_end(&mut answered).await.unwrap();
        assert!(answered.ends_with(b"\r\n\r\nok\n"), "{answered:?}");
        tokio::time::timeout(MINUTE, answer)
            .await
            .expect("the connection was never closed")
            .unwrap();
        let took = start.elapsed();
        assert!(
            took >= WRITE_LIMIT && took < WRITE_LIMIT + SECOND,
            "{took:?}"
        );
        drop(client);
    }
}
