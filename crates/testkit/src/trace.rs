//! The quorum group of a chaos run as the model checker reads it: each
//! worker's start, terms, pauses and end, the network faults on its paths,
//! and the accounts restarted empty, on the run's clock in milliseconds.
//! `crates/model/tests/model/replay.rs` replays a trace through the quorum model's
//! transition relation: a trace the model cannot produce is a finding about
//! the model or the code.
//!
//! A trace is text, one fact a line, so that a run's can be kept as a
//! fixture (`tests/fixtures/traces`) and read by another test binary:
//!
//! ```text
//! seed 28
//! wall 1795735000123     the host's clock at the run's 0, in ms since 1970
//! until 83412
//! worker 0 qmutex.0 spawned 102
//! term 0 3 5000          worker, epoch, LEADING at (ms)
//! pause 1 10000 12000    worker, from, to
//! kill 1 15000           SIGKILL (also: stop for SIGTERM, exit on its own)
//! wipe 2 20000           account (0-based), restarted empty by then
//! net 0 1 3000 5000      worker, account, a fault on that path from, to
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use super::history::History;
use super::workers::{Cluster, What};

/// The group the model replays: the mutex on a quorum of three accounts.
pub const GROUP: &str = "qmutex";

/// How a worker's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// SIGKILL: it could run no more code.
    Kill,
    /// SIGTERM: it stops its term and releases its leases.
    Stop,
    /// It exited on its own (a fail-stop, or an error).
    Exit,
}

impl End {
    fn word(self) -> &'static str {
        match self {
            End::Kill => "kill",
            End::Stop => "stop",
            End::Exit => "exit",
        }
    }
}

/// One worker of the group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Worker {
    pub name: String,
    pub spawned: u64,
    /// Each term's epoch and when it printed `LEADING`, in order.
    pub terms: Vec<(u64, u64)>,
    /// SIGSTOP to SIGCONT.
    pub pauses: Vec<(u64, u64)>,
    pub end: Option<(End, u64)>,
}

/// The group's record, on the run's clock in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub seed: u64,
    /// The host's clock when the run's clock read 0, in milliseconds since
    /// 1970 (storage's clock is the host's: a record made anew starts its
    /// epochs from it).
    pub wall: u64,
    /// The end of the record.
    pub until: u64,
    pub workers: Vec<Worker>,
    /// An account restarted empty: its index (0 to 2) and when the restart
    /// returned (it was down for a while before).
    pub wipes: Vec<(usize, u64)>,
    /// A network fault on the path of a worker to an account, from and to.
    pub nets: Vec<(usize, usize, u64, u64)>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).expect("a run shorter than ages")
}

impl Trace {
    /// The quorum group of a finished chaos run (workers renumbered from 0
    /// in start order).
    pub fn of(history: &History, cluster: &Cluster) -> Trace {
        let mine: Vec<usize> = (0..cluster.len())
            .filter(|&w| cluster.name(w).split('.').next() == Some(GROUP))
            .collect();
        let index = |w: usize| mine.iter().position(|&m| m == w);
        let since_1970 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970");
        let mut trace = Trace {
            seed: history.seed,
            wall: ms(since_1970.saturating_sub(cluster.now())),
            until: ms(history.until),
            ..Trace::default()
        };
        for &w in &mine {
            trace.workers.push(Worker {
                name: cluster.name(w).to_owned(),
                spawned: history.spawned.get(w).copied().map_or(0, ms),
                ..Worker::default()
            });
        }
        for term in history.terms_of(GROUP) {
            if let Some(i) = index(term.worker) {
                trace.workers[i].terms.push((term.epoch, ms(term.start)));
            }
        }
        for p in &history.pauses {
            if let Some(i) = index(p.worker) {
                let to = p.to.unwrap_or(history.until);
                trace.workers[i].pauses.push((ms(p.from), ms(to)));
            }
        }
        for e in cluster.events() {
            let Some(i) = index(e.worker) else { continue };
            let end = match e.what {
                What::Killed => End::Kill,
                What::Terminated => End::Stop,
                What::Exited { .. } => End::Exit,
                _ => continue,
            };
            trace.workers[i].end.get_or_insert((end, ms(e.at)));
        }
        for fault in &history.faults {
            trace.fault(fault.kind, &fault.detail, ms(fault.at), &mine, cluster);
        }
        trace
    }

    /// Reads a fault the nemesis recorded, if it touched the group.
    fn fault(&mut self, kind: &str, detail: &str, at: u64, mine: &[usize], cluster: &Cluster) {
        if kind == "wipe" {
            // `account <q>`, the quorum's accounts numbered from 1.
            if let Some(q) = detail.strip_prefix("account ").and_then(|q| q.parse().ok()) {
                let q: usize = q;
                self.wipes.push((q - 1, at));
            }
            return;
        }
        // `<net> on account <a> for <x>s` or `<net> on <name>'s path for <x>s`.
        let Some((_, rest)) = detail.rsplit_once(" on ") else {
            return;
        };
        let Some((whom, secs)) = rest.rsplit_once(" for ") else {
            return;
        };
        let Some(secs) = secs.strip_suffix('s').and_then(|s| s.parse::<f64>().ok()) else {
            return;
        };
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // under a minute
        let to = at + (secs * 1000.0) as u64;
        if let Some(a) = whom.strip_prefix("account ") {
            // Account 0 is the single account, which the group does not use.
            let Ok(a) = a.parse::<usize>() else { return };
            if a == 0 {
                return;
            }
            for w in 0..mine.len() {
                self.nets.push((w, a - 1, at, to));
            }
        } else if let Some(name) = whom.strip_suffix("'s path") {
            if let Some(w) = mine.iter().position(|&m| cluster.name(m) == name) {
                for a in 0..3 {
                    self.nets.push((w, a, at, to));
                }
            }
        }
    }

    /// The trace as text.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "seed {}\nwall {}\nuntil {}\n",
            self.seed, self.wall, self.until
        );
        for (i, w) in self.workers.iter().enumerate() {
            let _ = writeln!(out, "worker {i} {} spawned {}", w.name, w.spawned);
            for (epoch, at) in &w.terms {
                let _ = writeln!(out, "term {i} {epoch} {at}");
            }
            for (from, to) in &w.pauses {
                let _ = writeln!(out, "pause {i} {from} {to}");
            }
            if let Some((end, at)) = w.end {
                let _ = writeln!(out, "{} {i} {at}", end.word());
            }
        }
        for (a, at) in &self.wipes {
            let _ = writeln!(out, "wipe {a} {at}");
        }
        for (w, a, from, to) in &self.nets {
            let _ = writeln!(out, "net {w} {a} {from} {to}");
        }
        out
    }

    /// Reads a trace's text.
    ///
    /// # Errors
    ///
    /// The first line it cannot read, by number.
    pub fn parse(text: &str) -> Result<Trace, String> {
        let mut trace = Trace::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            trace
                .line(line)
                .ok_or_else(|| format!("line {}: cannot read {line:?}", n + 1))?;
        }
        Ok(trace)
    }

    fn line(&mut self, line: &str) -> Option<()> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |k: usize| words.get(k)?.parse::<u64>().ok();
        let at = |k: usize| usize::try_from(num(k)?).ok();
        match *words.first()? {
            "seed" => self.seed = num(1)?,
            "wall" => self.wall = num(1)?,
            "until" => self.until = num(1)?,
            "worker" => {
                (at(1)? == self.workers.len() && *words.get(3)? == "spawned").then_some(())?;
                self.workers.push(Worker {
                    name: (*words.get(2)?).to_owned(),
                    spawned: num(4)?,
                    ..Worker::default()
                });
            }
            "term" => self.workers.get_mut(at(1)?)?.terms.push((num(2)?, num(3)?)),
            "pause" => self
                .workers
                .get_mut(at(1)?)?
                .pauses
                .push((num(2)?, num(3)?)),
            word @ ("kill" | "stop" | "exit") => {
                let end = [End::Kill, End::Stop, End::Exit]
                    .into_iter()
                    .find(|e| e.word() == word)?;
                self.workers.get_mut(at(1)?)?.end = Some((end, num(2)?));
            }
            "wipe" => self.wipes.push((at(1)?, num(2)?)),
            "net" => self.nets.push((at(1)?, at(2)?, num(3)?, num(4)?)),
            _ => return None,
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reads_back_as_it_was_written() {
        let trace = Trace {
            seed: 28,
            wall: 1_795_735_000_123,
            until: 90_000,
            workers: vec![Worker {
                name: "qmutex.0".into(),
                spawned: 100,
                terms: vec![(1, 2_000), (4, 30_000)],
                pauses: vec![(10_000, 12_500)],
                end: Some((End::Stop, 80_000)),
            }],
            wipes: vec![(2, 20_000)],
            nets: vec![(0, 1, 3_000, 5_000)],
        };
        assert_eq!(Trace::parse(&trace.to_text()), Ok(trace));
    }

    #[test]
    fn a_line_it_cannot_read_is_named() {
        let err = Trace::parse("seed 1\nterm 0 1\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }
}
