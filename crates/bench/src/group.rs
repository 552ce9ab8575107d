//! The worker processes of one measurement: the test kit's [`Cluster`] of
//! `fault-worker`s contending for one blob, `leader`, in a container of
//! their own, named `<prefix>-<n>`, with their logs in `<out>/logs/<id>.log`
//! and their lines read as they come.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use blob_mutex_testkit::azurite::{connection_string, unique_container};
use blob_mutex_testkit::workers::{Cluster, Feed, Spec, What};

use crate::Config;

/// One line a worker printed (or a signal the group sent it), and when.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) at: Instant,
    pub(crate) id: String,
    pub(crate) what: What,
}

impl Event {
    /// Whether it is a `LEADING` line: a term began.
    pub(crate) fn is_leading(&self) -> bool {
        matches!(self.what, What::Leading { .. })
    }

    /// Whether it is a `STOPPED` line: every task of a term stopped (or one
    /// could not be stopped).
    pub(crate) fn is_stopped(&self) -> bool {
        matches!(self.what, What::Stopped { .. } | What::Stuck { .. })
    }

    /// The epoch of the term it is about.
    pub(crate) fn epoch(&self) -> Option<u64> {
        self.what.epoch()
    }
}

/// A running worker.
pub(crate) struct Worker {
    pub(crate) id: String,
    pub(crate) pid: u32,
}

/// Worker processes on one blob.
pub(crate) struct Group {
    cluster: Cluster,
    feed: Feed,
    container: String,
    args: Vec<String>,
    worker: PathBuf,
    prefix: String,
    /// The cluster's indices of the workers not reaped yet.
    live: Vec<usize>,
}

impl Group {
    /// An empty group whose workers will be named `<prefix>-<n>` and started
    /// with `args` after the container, blob and id.
    pub(crate) fn new(config: &Config, prefix: &str, args: &[&str]) -> Group {
        let cluster = Cluster::new().logs_in(&config.out.join("logs"));
        Group {
            feed: cluster.follow(),
            cluster,
            container: unique_container(&format!("bench-{prefix}")),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            worker: config.worker.clone(),
            prefix: prefix.to_owned(),
            live: Vec::new(),
        }
    }

    /// The container of the group's blob, `leader`.
    pub(crate) fn container(&self) -> &str {
        &self.container
    }

    /// The workers not reaped yet, in start order.
    pub(crate) fn workers(&self) -> Vec<Worker> {
        self.live
            .iter()
            .map(|&i| Worker {
                id: self.cluster.name(i).to_owned(),
                pid: self.cluster.pid(i),
            })
            .collect()
    }

    /// Starts one more worker that reaches storage at `endpoint`; returns its id.
    pub(crate) fn spawn(&mut self, endpoint: &str) -> String {
        self.spawn_with(endpoint, &[])
    }

    /// Starts one more worker, as [`Group::spawn`], with `extra` arguments
    /// after the group's own (such as its own `--priority`).
    pub(crate) fn spawn_with(&mut self, endpoint: &str, extra: &[&str]) -> String {
        let spec = self.spec(&connection_string(endpoint), extra);
        self.start(spec)
    }

    /// Starts one more worker that leads on a quorum of the accounts at
    /// `endpoints`; returns its id.
    pub(crate) fn spawn_quorum(&mut self, endpoints: &[String]) -> String {
        let strings: Vec<String> = endpoints.iter().map(|e| connection_string(e)).collect();
        let spec = self.spec("", &[]).on_quorum(&strings);
        self.start(spec)
    }

    fn spec(&mut self, connection_string: &str, extra: &[&str]) -> Spec {
        let id = format!("{}-{}", self.prefix, self.cluster.len());
        let mut options: Vec<&str> = self.args.iter().map(String::as_str).collect();
        options.extend_from_slice(extra);
        Spec::worker_at(
            &self.worker,
            &id,
            connection_string,
            &self.container,
            "leader",
            &options,
        )
    }

    fn start(&mut self, spec: Spec) -> String {
        let id = spec.name.clone();
        let index = self.cluster.spawn(spec);
        self.live.push(index);
        id
    }

    fn event(&self, e: blob_mutex_testkit::workers::Event) -> Event {
        Event {
            at: self.cluster.epoch() + e.at,
            id: self.cluster.name(e.worker).to_owned(),
            what: e.what,
        }
    }

    /// Waits for a `LEADING` line from a worker other than `not`; returns it
    /// and every event read on the way (itself included).
    pub(crate) async fn next_leader(
        &mut self,
        not: Option<&str>,
        within: Duration,
    ) -> Result<(Event, Vec<Event>)> {
        let until = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let event = self
                .next_event(until)
                .await
                .with_context(|| format!("no new leader within {within:?}"))?;
            seen.push(event.clone());
            if event.is_leading() && Some(event.id.as_str()) != not {
                return Ok((event, seen));
            }
        }
    }

    /// The next event, or `None` when none arrives before `until`.
    pub(crate) async fn next_event(&mut self, until: Instant) -> Option<Event> {
        let event = self.feed.next_before(until).await?;
        Some(self.event(event))
    }

    /// Events that arrived since the last look.
    pub(crate) fn drain(&mut self) -> Vec<Event> {
        let events = self.feed.drain();
        events.into_iter().map(|e| self.event(e)).collect()
    }

    fn index(&self, id: &str) -> Result<usize> {
        self.live
            .iter()
            .copied()
            .find(|&i| self.cluster.name(i) == id)
            .with_context(|| format!("no worker {id}"))
    }

    /// Sends SIGKILL to a worker.
    pub(crate) fn kill(&mut self, id: &str) -> Result<()> {
        self.cluster.kill(self.index(id)?);
        Ok(())
    }

    /// Sends SIGTERM to a worker with the system's `kill`; a time measured
    /// from before this call includes starting that command (a few
    /// milliseconds), so it errs on the slow side.
    pub(crate) fn terminate(&self, id: &str) -> Result<()> {
        self.cluster.terminate(self.index(id)?);
        Ok(())
    }

    /// Removes a worker and waits (up to 15 s, then kills it) for it to exit.
    pub(crate) async fn reap(&mut self, id: &str) -> Result<()> {
        let index = self.index(id)?;
        self.live.retain(|&i| i != index);
        let until = Instant::now() + Duration::from_secs(15);
        while self.cluster.exited(index).is_none() {
            if Instant::now() >= until {
                eprintln!("  worker {id} did not exit within 15 s; killing it");
                self.cluster.kill(index);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Kills every worker and waits for them to exit.
    pub(crate) fn stop_all(&mut self) {
        self.cluster.kill_all();
        self.live.clear();
    }
}
