//! The forwarding example (`examples/forward.rs`) on Azurite, on the
//! backend `BLOB_MUTEX_BACKEND` names: followers redirect every request to
//! the leader's advertised address, and after the leader is killed
//! (SIGKILL: its lease is left to expire) a follower redirects to the new
//! leader within the lease plus one poll.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::backend::BackendExt;
use blob_mutex_testkit::workers::example_bin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// One instance of the example, and the address it listens on.
struct Instance {
    child: Child,
    url: String,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(container: &str, id: &str) -> Instance {
    let backend = blob_mutex_testkit::backend::current();
    let mut child = Command::new(example_bin("forward"))
        .args([container, "forward", id])
        .env(
            "AZURE_STORAGE_CONNECTION_STRING",
            backend.connection_string(&azurite::shared().endpoint),
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the forward example");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let first = lines.next().expect("a first line").expect("readable");
    let url = first
        .strip_prefix("LISTENING ")
        .unwrap_or_else(|| panic!("{id} printed {first:?} first"))
        .to_owned();
    // The rest is read so that the pipe never fills.
    std::thread::spawn(move || lines.for_each(drop));
    Instance { child, url }
}

/// One GET: the status, the `location` header and the body; `None` when
/// the connection fails (an instance killed, say).
async fn get(url: &str) -> Option<(u16, Option<String>, String)> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream = TcpStream::connect(host).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let location = head
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .map(str::to_owned);
    Some((status, location, body.to_owned()))
}

/// What a request to `url` came to, following redirects: the body of the
/// `200`, and the redirects on the way; `None` for a 503 or a failed
/// connection anywhere on the way.
async fn fetch(url: &str) -> Option<(String, Vec<String>)> {
    let mut at = url.to_owned();
    let mut redirects = Vec::new();
    for _ in 0..4 {
        match get(&at).await? {
            (200, _, body) => return Some((body, redirects)),
            (307, Some(to), _) => {
                redirects.push(to.clone());
                at = to;
            }
            _ => return None,
        }
    }
    panic!("redirected in a loop: {redirects:?}");
}

/// Retries a request through `url` until `done` accepts what it came to.
async fn until<F>(url: &str, limit: Duration, what: &str, done: F) -> (String, Vec<String>)
where
    F: Fn(&str, &[String]) -> bool,
{
    let until = Instant::now() + limit;
    loop {
        if let Some((body, redirects)) = fetch(&format!("{url}/job")).await {
            if done(&body, &redirects) {
                return (body, redirects);
            }
        }
        assert!(Instant::now() < until, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The epoch in `served by <id> epoch <n>`.
fn epoch(body: &str) -> u64 {
    body.trim()
        .rsplit(' ')
        .next()
        .and_then(|e| e.parse().ok())
        .unwrap_or_else(|| panic!("no epoch in {body:?}"))
}

#[tokio::test]
async fn followers_forward_to_the_leader_through_a_failover() {
    let container = azurite::unique_container("forward");
    let a = start(&container, "a");
    let (body, _) = until(&a.url, Duration::from_secs(30), "a leads", |b, _| {
        b.starts_with("served by a ")
    })
    .await;
    let first = epoch(&body);
    let b = start(&container, "b");
    let c = start(&container, "c");
    // A follower's watch names the leader at its first held attempt.
    for follower in [&b, &c] {
        let (_, redirects) = until(
            &follower.url,
            Duration::from_secs(20),
            "a follower forwards to a",
            |body, redirects| body.starts_with("served by a ") && !redirects.is_empty(),
        )
        .await;
        assert_eq!(redirects, [format!("{}/job", a.url)]);
    }

    // The leader dies without releasing: its lease expires within 15 s.
    let killed = Instant::now();
    drop(a);
    let bound = Duration::from_secs(15) + Duration::from_millis(6_300) + Duration::from_secs(10);
    let (body, _) = until(&b.url, bound, "a new leader serves", |body, _| {
        !body.starts_with("served by a ")
    })
    .await;
    assert!(epoch(&body) > first, "{body}");
    let (leader, follower) = if body.starts_with("served by b ") {
        (&b, &c)
    } else {
        (&c, &b)
    };
    // The other one forwards to it.
    let (_, redirects) = until(
        &follower.url,
        bound.saturating_sub(killed.elapsed()),
        "the remaining follower forwards to the new leader",
        |_, redirects| !redirects.is_empty(),
    )
    .await;
    assert_eq!(redirects, [format!("{}/job", leader.url)]);
}
