//! The end of a command's process group. After SIGKILL, `run` waits until
//! no process of the group is left before it starts the command again or
//! exits; a group still there after [`REAP_WAIT`] survived SIGKILL, and
//! `run` exits with [`exit::UNKILLABLE`].

use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::killpg;
use nix::unistd::Pid;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::exit;

/// How long a group that was sent SIGKILL may take to be gone. A process in
/// uninterruptible sleep (a hung mount) dies only when its I/O returns.
pub(crate) const REAP_WAIT: Duration = Duration::from_secs(5);
/// How often a group that was sent SIGKILL is looked for.
const POLL: Duration = Duration::from_millis(10);

/// The process groups of this run's commands that may still have a
/// process: a command starts only once no earlier group has one.
#[derive(Clone)]
pub(crate) struct Groups(Arc<Inner>);

struct Inner {
    /// How many groups may still have a process.
    live: watch::Sender<usize>,
    /// The lease, for the message when a group cannot be killed.
    name: String,
}

impl Groups {
    /// The groups of the commands `run` starts for the lease `name`.
    pub(crate) fn new(name: String) -> Groups {
        Groups(Arc::new(Inner {
            live: watch::Sender::new(0),
            name,
        }))
    }

    /// Waits until no group of an earlier command has a process left.
    ///
    /// Cancellation safe.
    pub(crate) async fn settled(&self) {
        let mut live = self.0.live.subscribe();
        // The sender lives as long as `self`.
        let _ = live.wait_for(|n| *n == 0).await;
    }

    /// Counts a new group until the returned [`Live`] is dropped.
    pub(crate) fn enter(&self) -> Live {
        self.0.live.send_modify(|n| *n += 1);
        Live(self.clone())
    }

    /// A process of `group` survived SIGKILL: exits at once with
    /// [`exit::UNKILLABLE`], without releasing the lease (the library would,
    /// once the leader task ended) and without starting the command again.
    pub(crate) fn unkillable(&self, group: Pid) -> ! {
        crate::logs::say(&format!(
            "a process of the command's group {group} survived SIGKILL for {REAP_WAIT:?}; \
             exiting without releasing the lease on {} (it expires on its own) and without starting the command again",
            self.0.name
        ));
        std::process::exit(exit::UNKILLABLE.into());
    }
}

/// A group counted by [`Groups`]; dropped once the group is gone.
pub(crate) struct Live(Groups);

impl Drop for Live {
    fn drop(&mut self) {
        self.0 .0.live.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Waits, until `until`, for `group` to have no process left that may run;
/// `false` when one is still there then.
pub(crate) async fn gone_by(group: Pid, until: Instant) -> bool {
    loop {
        if is_gone(group) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether no process of `group` may run: the kernel knows no process of
/// the group, or every one it knows is a zombie (it has exited and runs
/// nothing; its parent has not reaped it yet, and a parent that never reaps,
/// as some containers' first process, must not keep the command from
/// starting again).
fn is_gone(group: Pid) -> bool {
    match killpg(group, None) {
        Err(Errno::ESRCH) => true,
        Err(_) => false,
        Ok(()) => only_zombies(group).unwrap_or(false),
    }
}

/// Whether every process `/proc` lists in `group` is a zombie; `None` when
/// `/proc` cannot be read.
fn only_zombies(group: Pid) -> Option<bool> {
    for entry in std::fs::read_dir("/proc").ok()? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        // The process may be gone since the listing: then it is no member.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        match parse_stat(&stat) {
            Some((state, pgrp)) if pgrp == group.as_raw() && !matches!(state, 'Z' | 'X') => {
                return Some(false)
            }
            Some(_) => {}
            None => return None,
        }
    }
    Some(true)
}

/// The state and process group of a `/proc/<pid>/stat` line.
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    // The state follows the parenthesised name, which may contain anything.
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn a_stat_line_gives_its_state_and_group_whatever_the_name() {
        let line = "4242 (a) b (c)) S 1 4240 4240 0 -1 4194560 105 0 0 0";
        assert_eq!(parse_stat(line), Some(('S', 4240)));
        assert_eq!(parse_stat("4242 (sh) Z 1 77 77"), Some(('Z', 77)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[tokio::test]
    async fn a_group_is_gone_once_its_processes_are_killed_though_a_zombie_is_left() {
        let mut leader = std::process::Command::new("sleep")
            .arg("100")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = Pid::from_raw(i32::try_from(leader.id()).unwrap());
        assert!(!is_gone(group), "a sleeping process runs");
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
        // Not reaped yet: a zombie, which runs nothing.
        assert!(gone_by(group, Instant::now() + Duration::from_secs(5)).await);
        leader.wait().unwrap();
        assert!(is_gone(group));
    }

    #[tokio::test(start_paused = true)]
    async fn settled_waits_for_every_live_group() {
        let groups = Groups::new("c/b".to_owned());
        groups.settled().await;
        let (a, b) = (groups.enter(), groups.enter());
        let waiting = tokio::spawn({
            let groups = groups.clone();
            async move { groups.settled().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(b);
        waiting.await.unwrap();
    }
}
