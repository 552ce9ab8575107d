//! Worker processes (the `fault-worker` example) contending for one blob,
//! and the lines they print: `LEADING epoch=<n> id=<id>` when a term starts and
//! `STOPPED ...` when its task has stopped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::azurite::{connection_string, unique_container};
use crate::Config;

/// One line a worker printed, and when this program read it.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) at: Instant,
    pub(crate) id: String,
    pub(crate) line: String,
}

impl Event {
    /// Whether the line starts with `word`, such as `LEADING`.
    pub(crate) fn is(&self, word: &str) -> bool {
        self.line.split(' ').next() == Some(word)
    }

    pub(crate) fn epoch(&self) -> Option<u64> {
        self.line
            .split(' ')
            .find_map(|w| w.strip_prefix("epoch="))
            .and_then(|e| e.parse().ok())
    }
}

pub(crate) struct Worker {
    pub(crate) id: String,
    pub(crate) pid: u32,
    child: Child,
}

/// Worker processes on one blob, `leader` in a container of their own, with
/// their output merged into one stream and their logs in `<out>/logs/<id>.log`.
pub(crate) struct Group {
    container: String,
    args: Vec<String>,
    log_dir: PathBuf,
    worker: PathBuf,
    workers: Vec<Worker>,
    events: UnboundedReceiver<Event>,
    sender: UnboundedSender<Event>,
    next: usize,
    prefix: String,
}

impl Group {
    /// An empty group whose workers will be named `<prefix>-<n>` and started
    /// with `args` after the container, blob and id.
    pub(crate) fn new(config: &Config, prefix: &str, args: &[&str]) -> Group {
        let (sender, events) = unbounded_channel();
        Group {
            container: unique_container(prefix),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            log_dir: config.out.join("logs"),
            worker: config.worker.clone(),
            workers: Vec::new(),
            events,
            sender,
            next: 0,
            prefix: prefix.to_owned(),
        }
    }

    /// The container of the group's blob, `leader`.
    pub(crate) fn container(&self) -> &str {
        &self.container
    }

    pub(crate) fn workers(&self) -> &[Worker] {
        &self.workers
    }

    /// Starts one more worker that reaches storage at `endpoint`; returns its id.
    pub(crate) fn spawn(&mut self, endpoint: &str) -> Result<String> {
        self.spawn_with(endpoint, &[])
    }

    /// Starts one more worker, as [`Group::spawn`], with `extra` arguments
    /// after the group's own (such as its own `--priority`).
    pub(crate) fn spawn_with(&mut self, endpoint: &str, extra: &[&str]) -> Result<String> {
        self.spawn_on(
            "AZURE_STORAGE_CONNECTION_STRING",
            connection_string(endpoint),
            extra,
        )
    }

    /// Starts one more worker that leads on a quorum of the accounts at
    /// `endpoints`; returns its id.
    pub(crate) fn spawn_quorum(&mut self, endpoints: &[String]) -> Result<String> {
        let strings: Vec<String> = endpoints.iter().map(|e| connection_string(e)).collect();
        self.spawn_on(
            "BLOB_MUTEX_QUORUM_CONNECTION_STRINGS",
            strings.join("\n"),
            &[],
        )
    }

    /// Starts one more worker with `variable` naming its account(s) and
    /// `extra` arguments.
    fn spawn_on(&mut self, variable: &str, accounts: String, extra: &[&str]) -> Result<String> {
        let id = format!("{}-{}", self.prefix, self.next);
        self.next += 1;
        let stderr = std::fs::File::create(self.log_dir.join(format!("{id}.log")))?;
        let mut child = Command::new(&self.worker)
            .args([&self.container, "leader", &id])
            .args(&self.args)
            .args(extra)
            .env(variable, accounts)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", self.worker.display()))?;
        let pid = child.id().context("worker pid")?;
        let stdout = child.stdout.take().context("worker stdout")?;
        let sender = self.sender.clone();
        let line_id = id.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let event = Event {
                    at: Instant::now(),
                    id: line_id.clone(),
                    line,
                };
                if sender.send(event).is_err() {
                    break;
                }
            }
        });
        self.workers.push(Worker {
            id: id.clone(),
            pid,
            child,
        });
        Ok(id)
    }

    /// Waits for a `LEADING` line from a worker other than `not`; returns it
    /// and every event read on the way (itself included).
    pub(crate) async fn next_leader(
        &mut self,
        not: Option<&str>,
        within: Duration,
    ) -> Result<(Event, Vec<Event>)> {
        let until = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let event = tokio::time::timeout_at(until, self.events.recv())
                .await
                .with_context(|| format!("no new leader within {within:?}"))?
                .context("worker output closed")?;
            seen.push(event.clone());
            if event.is("LEADING") && Some(event.id.as_str()) != not {
                return Ok((event, seen));
            }
        }
    }

    /// The next event, or `None` when none arrives before `until`.
    pub(crate) async fn next_event(&mut self, until: tokio::time::Instant) -> Option<Event> {
        tokio::time::timeout_at(until, self.events.recv())
            .await
            .ok()
            .flatten()
    }

    /// Events that arrived since the last look.
    pub(crate) fn drain(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            out.push(event);
        }
        out
    }

    fn position(&self, id: &str) -> Result<usize> {
        self.workers
            .iter()
            .position(|w| w.id == id)
            .with_context(|| format!("no worker {id}"))
    }

    /// Sends SIGKILL to a worker.
    pub(crate) fn kill(&mut self, id: &str) -> Result<()> {
        let index = self.position(id)?;
        self.workers[index].child.start_kill()?;
        Ok(())
    }

    /// Sends SIGTERM to a worker with the system's `kill`; a time measured
    /// from before this call includes starting that command (a few
    /// milliseconds), so it errs on the slow side.
    pub(crate) fn terminate(&self, id: &str) -> Result<()> {
        let pid = self.workers[self.position(id)?].pid;
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .context("run kill")?;
        ensure!(status.success(), "kill -TERM {pid} failed");
        Ok(())
    }

    /// Removes a worker and waits (up to 15 s, then kills it) for it to exit.
    pub(crate) async fn reap(&mut self, id: &str) -> Result<()> {
        let mut worker = self.workers.remove(self.position(id)?);
        if tokio::time::timeout(Duration::from_secs(15), worker.child.wait())
            .await
            .is_err()
        {
            eprintln!("  worker {id} did not exit within 15 s; killing it");
            let _ = worker.child.kill().await;
        }
        Ok(())
    }

    /// Kills every worker and waits for them to exit.
    pub(crate) async fn stop_all(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.child.start_kill();
        }
        for worker in &mut self.workers {
            let _ = worker.child.wait().await;
        }
        self.workers.clear();
    }
}
