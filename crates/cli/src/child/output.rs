//! A command's stdout and stderr under `--log-format json`: each line the
//! command writes becomes one JSON line on the same stream (see
//! [`logs::command_line`]), so that a collector that parses the stream
//! as JSON reads the command's lines too, named by lease and holder.
//! Under the text format the command writes to the streams itself.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};

use crate::logs::{self, Stream};

/// The longest line passed on whole; a longer one is cut into lines of
/// this length.
const MAX_LINE: u64 = 64 * 1024;

/// The tasks that pass a command's output on, one a stream.
#[derive(Default)]
pub(super) struct Output(Vec<JoinHandle<()>>);

impl Output {
    /// Pipes `command`'s stdout and stderr, under the JSON format.
    pub(super) fn pipe(command: &mut tokio::process::Command) {
        if logs::is_json() {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }

    /// Starts passing on what the spawned `process` (pid `pid`) writes to
    /// the pipes [`pipe`](Self::pipe) made.
    pub(super) fn start(process: &mut tokio::process::Child, pid: u32) -> Output {
        let mut pumps = Vec::new();
        if let Some(out) = process.stdout.take() {
            pumps.push(tokio::spawn(pass_on(out, Stream::Stdout, pid)));
        }
        if let Some(err) = process.stderr.take() {
            pumps.push(tokio::spawn(pass_on(err, Stream::Stderr, pid)));
        }
        Output(pumps)
    }

    /// Waits until every line has been passed on (the group is gone, so
    /// the pipes are closed) or `until`, whichever comes first: a process
    /// that left the group and keeps a pipe open is not waited for.
    pub(super) async fn drained(&mut self, until: Instant) {
        for pump in &mut self.0 {
            if timeout_at(until, &mut *pump).await.is_err() {
                pump.abort();
            }
        }
        self.0.clear();
    }
}

/// Passes each line of `reader` on as a JSON line of `stream`, until its
/// end.
async fn pass_on(reader: impl AsyncRead + Unpin, stream: Stream, pid: u32) {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => logs::command_line(stream, pid, &line),
        }
    }
}
