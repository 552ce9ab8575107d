//! The chaos checker on histories written by hand: a clean one passes, and
//! each one that holds a violation is caught, by the rule that names it.
//! (No storage: these judge records, not processes.)

use std::time::Duration;

use blob_mutex_testkit::checker::{check, figures, Violation};
use blob_mutex_testkit::history::{Fault, History, Pause, Read, Role, Term, Unit, Write};
use blob_mutex_testkit::register::accept;
use blob_mutex_testkit::workers::{Event, What};

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn term(resource: &str, worker: usize, epoch: u64, start: u64, end: Option<u64>) -> Term {
    Term {
        resource: resource.to_owned(),
        worker,
        epoch,
        start: s(start),
        end: end.map(s),
        reports: 1,
        silenced: false,
    }
}

fn unit(resource: &str, worker: usize, epoch: u64, at: u64) -> Unit {
    Unit {
        resource: resource.to_owned(),
        worker,
        epoch,
        at: s(at),
    }
}

/// A state write of tick 1, answered at once.
fn write(resource: &str, worker: usize, epoch: u64, at: u64, accepted: bool) -> Write {
    Write {
        resource: resource.to_owned(),
        worker,
        epoch,
        tick: Some(1),
        sent: s(at),
        at: s(at),
        accepted,
        register: false,
    }
}

/// A write to the runner's register, answered at once.
fn fenced(resource: &str, worker: usize, epoch: u64, at: u64) -> Write {
    Write {
        tick: None,
        register: true,
        ..write(resource, worker, epoch, at, true)
    }
}

/// What the term of `epoch` on `worker` read when it began.
fn read(worker: usize, epoch: u64, at: u64, last: Option<(u64, u64)>) -> Read {
    Read {
        resource: "mutex".to_owned(),
        worker,
        epoch,
        at: s(at),
        last,
    }
}

/// Two clean terms of `mutex`: worker 0 epoch 1 in [1, 10), worker 1
/// epoch 2 from 12 to the end (40), with units and accepted writes; the
/// nemesis stopped at 30, the bound is 20 s.
fn clean() -> History {
    let mut h = History {
        seed: 28,
        terms: vec![
            term("mutex", 0, 1, 1, Some(10)),
            term("mutex", 1, 2, 12, Some(40)),
        ],
        units: vec![unit("mutex", 0, 1, 5), unit("mutex", 1, 2, 13)],
        writes: vec![
            write("mutex", 0, 1, 5, true),
            write("mutex", 1, 2, 13, true),
        ],
        break_grace: s(6),
        wake_grace: s(6),
        calm: s(30),
        until: s(40),
        ..History::default()
    };
    h.bounds.insert("mutex".to_owned(), s(20));
    h
}

/// A worker of `group` (a `run`'s exit reports its term).
fn role(group: &str) -> Role {
    Role {
        group: group.to_owned(),
        exit_reports: group == "run",
    }
}

/// What worker `worker` printed (or had done to it) `ms` into the run.
fn at(ms: u64, worker: usize, what: What) -> Event {
    Event {
        at: Duration::from_millis(ms),
        worker,
        what,
    }
}

fn rules(h: &History) -> Vec<&'static str> {
    check(h).iter().map(|v: &Violation| v.rule).collect()
}

#[test]
fn a_clean_history_passes() {
    assert_eq!(check(&clean()), vec![]);
}

#[test]
fn two_owners_at_once_are_caught() {
    let mut h = clean();
    h.terms[1].start = s(9);
    h.units[1].at = s(11);
    assert_eq!(rules(&h), vec!["two-owners"]);
}

#[test]
fn a_unit_inside_another_term_is_caught() {
    let mut h = clean();
    h.units.push(unit("mutex", 0, 1, 20));
    // Its own term ended at 10; the unit at 20 is inside epoch 2's term.
    assert_eq!(rules(&h), vec!["unit"]);
}

#[test]
fn a_unit_of_no_term_is_caught() {
    let mut h = clean();
    h.units.push(unit("mutex", 2, 7, 11));
    assert_eq!(rules(&h), vec!["unit"]);
}

#[test]
fn a_paused_owner_may_be_followed_but_not_act_after_its_wake() {
    let mut h = clean();
    // Worker 0 paused at 8 until 25, its term reported at 26: the next
    // term began at 12 while it was paused, which is no second owner.
    h.terms[0].end = Some(s(26));
    h.pauses.push(Pause {
        worker: 0,
        from: s(8),
        to: Some(s(25)),
    });
    assert_eq!(check(&h), vec![]);
    // A unit after its wake, inside the next term, is.
    h.units.push(unit("mutex", 0, 1, 25));
    assert_eq!(rules(&h), vec!["unit"]);
}

#[test]
fn an_owner_paused_briefly_goes_on_owning() {
    let mut h = clean();
    // Worker 1 paused at 31 (after the nemesis stopped at 30) for 1 s, and
    // nobody took over: it still owns the lease, and works on.
    h.pauses.push(Pause {
        worker: 1,
        from: s(31),
        to: Some(s(32)),
    });
    h.units.push(unit("mutex", 1, 2, 33));
    assert_eq!(check(&h), vec![]);
    // Another term began after its wake, while it went on: two owners.
    h.terms.push(term("mutex", 0, 3, 38, None));
    h.terms[1].end = Some(s(39));
    h.until = s(45);
    assert_eq!(rules(&h), vec!["two-owners"]);
    // But woken past its deadline, it only reports the end (within the
    // grace of the wake), and the next term may have begun meanwhile.
    h.terms[2].start = s(34);
    h.terms[1].end = Some(s(35));
    assert_eq!(check(&h), vec![]);
}

#[test]
fn a_broken_owner_may_run_on_for_the_grace_only() {
    let mut h = clean();
    h.terms[0].end = Some(s(14));
    h.breaks.push(("mutex".to_owned(), s(9), s(9)));
    h.units.push(unit("mutex", 0, 1, 13));
    assert_eq!(check(&h), vec![], "within the grace (9 s + 6 s)");
    h.units.push(unit("mutex", 0, 1, 16));
    h.terms[0].end = Some(s(17));
    assert_eq!(rules(&h), vec!["unit"]);
}

/// Seed 1731546683: a break of the same lease 38 s later excused the
/// units an owner did inside another term before it.
#[test]
fn a_later_break_excuses_no_earlier_unit() {
    let mut h = clean();
    h.units.push(unit("mutex", 0, 1, 20));
    h.breaks.push(("mutex".to_owned(), s(31), s(32)));
    assert_eq!(rules(&h), vec!["unit"]);
}

/// Seed 28 once: a handover's new owner began while `blob-mutex break` was
/// in flight, the break took effect on its lease, and a third worker
/// acquired the broken lease before the owner's next renewal told it. The
/// overlap is a break's, allowed for the grace; a term that began after
/// the break returned is not covered.
#[test]
fn a_break_in_flight_when_a_term_began_may_have_broken_that_term() {
    let mut h = clean();
    h.breaks.push(("mutex".to_owned(), s(11), s(13)));
    h.terms[1].end = Some(s(16));
    h.terms.push(term("mutex", 2, 3, 14, Some(40)));
    h.units.push(unit("mutex", 1, 2, 15));
    h.units.push(unit("mutex", 2, 3, 15));
    assert_eq!(check(&h), vec![], "the break may have hit the term of 12 s");
    h.breaks[0] = ("mutex".to_owned(), s(10), s(11));
    assert!(rules(&h).contains(&"two-owners"), "{:?}", check(&h));
}

/// Seed 1973173869 once: an owner paused after its last write landed and
/// printed it on waking past its deadline, after the next term began; and
/// seed 1731546683: a handover's write answered 1.3 s late was printed
/// after the next term began. A write counts from when it was sent: sent
/// after the next term began, it is a violation.
#[test]
fn a_write_answered_late_counts_from_when_it_was_sent() {
    let mut h = clean();
    h.pauses.push(Pause {
        worker: 0,
        from: s(8),
        to: Some(s(14)),
    });
    h.terms[0].end = Some(s(14));
    h.writes.push(Write {
        sent: s(7),
        ..write("mutex", 0, 1, 14, true)
    });
    assert_eq!(check(&h), vec![], "sent before the pause");
    h.writes[2].sent = s(13);
    assert_eq!(rules(&h), vec!["write"], "sent after epoch 2 began at 12");
}

/// Seed 1731546683: a set member paused for 21 s right after its write
/// reached the register printed it on waking, after the next owner's
/// writes were printed. Sent before those were answered, the register's
/// order stands; sent after, the record is out of order.
#[test]
fn a_register_write_answered_late_keeps_the_registers_order() {
    let mut h = clean();
    h.writes = vec![fenced("mutex", 0, 1, 5), fenced("mutex", 1, 2, 13)];
    h.terms[0].end = Some(s(15));
    h.pauses.push(Pause {
        worker: 0,
        from: s(8),
        to: Some(s(15)),
    });
    h.writes.push(Write {
        sent: s(8),
        ..fenced("mutex", 0, 1, 15)
    });
    assert_eq!(check(&h), vec![], "sent before epoch 2 was answered");
    h.writes[2].sent = s(14);
    assert_eq!(rules(&h), vec!["write", "stamps"]);
}

/// A successor's first read shows which older writes had landed: one it
/// did not see landed in its term, however early it was sent.
#[test]
fn a_write_a_successor_did_not_read_landed_in_its_term() {
    let mut h = clean();
    h.reads.push(read(1, 2, 12, Some((1, 1))));
    assert_eq!(check(&h), vec![], "epoch 2 read epoch 1's write");
    h.reads[0].last = None;
    assert_eq!(rules(&h), vec!["write"], "epoch 2 read an empty state");
    // A later tick of the term it saw may be overwritten by a late retry
    // of an earlier one: ticks are not compared.
    h.reads[0].last = Some((1, 0));
    assert_eq!(check(&h), vec![]);
    // Refused writes, and writes of the reader's own term, are not judged.
    h.reads[0].last = None;
    h.writes[0].accepted = false;
    assert_eq!(check(&h), vec![]);
}

#[test]
fn epochs_that_do_not_increase_are_caught() {
    let mut h = clean();
    h.terms[1].epoch = 1;
    h.units[1].epoch = 1;
    h.writes[1].epoch = 1;
    assert_eq!(rules(&h), vec!["epoch"]);
}

#[test]
fn an_end_reported_twice_or_never_is_caught() {
    let mut h = clean();
    h.terms[0].reports = 2;
    assert_eq!(rules(&h), vec!["report"]);
    h.terms[0].reports = 0;
    assert_eq!(rules(&h), vec!["report"]);
    // A SIGKILLed process cannot report.
    h.terms[0].silenced = true;
    assert_eq!(check(&h), vec![]);
}

#[test]
fn a_report_of_no_term_is_caught() {
    let mut h = clean();
    h.orphans.push(blob_mutex_testkit::history::Orphan {
        resource: "mutex".to_owned(),
        worker: 3,
        epoch: 9,
        at: s(20),
    });
    assert_eq!(rules(&h), vec!["report"]);
}

#[test]
fn a_stale_write_accepted_is_caught_and_refused_is_not() {
    let mut h = clean();
    h.writes.push(write("mutex", 0, 1, 13, false));
    assert_eq!(check(&h), vec![]);
    h.writes.push(write("mutex", 0, 1, 14, true));
    assert_eq!(rules(&h), vec!["write"]);
}

#[test]
fn register_writes_stamped_out_of_order_show_a_late_record() {
    let mut h = clean();
    for w in &mut h.writes {
        w.register = true;
    }
    assert_eq!(check(&h), vec![]);
    // The register accepted epoch 1 before epoch 2, yet it is stamped as
    // sent after epoch 2 was answered: the stale write rule fires, and the
    // record is out of order.
    h.writes.push(fenced("mutex", 0, 1, 14));
    assert_eq!(rules(&h), vec!["write", "stamps"]);
}

#[test]
fn a_resource_left_without_an_owner_after_the_nemesis_is_caught() {
    let mut h = clean();
    h.terms[1].end = Some(s(29));
    assert_eq!(rules(&h), vec!["liveness"]);
    // Owned again within the bound: fine.
    h.terms.push(term("mutex", 0, 3, 55, None));
    h.until = s(60);
    assert_eq!(rules(&h), vec!["liveness"], "55 s is past 30 s + 20 s");
    h.terms[2].start = s(49);
    assert_eq!(check(&h), vec![]);
}

/// A resource that may rest (a run once whose work is done) is judged by
/// every rule but liveness.
#[test]
fn a_resource_that_may_rest_unowned_is_judged_by_every_rule_but_liveness() {
    let mut h = clean();
    h.terms[1].end = Some(s(29));
    h.may_rest.insert("mutex".to_owned());
    assert_eq!(check(&h), vec![]);
    h.terms[1].start = s(9);
    h.units[1].at = s(11);
    assert_eq!(rules(&h), vec!["two-owners"]);
}

/// Seed 1122327122 on a loaded machine: the nemesis's last fault broke
/// the owner's lease an instant before it stopped; the rig's settle took
/// the owner, which had not noticed yet, for an owner, ended the run at
/// once, and the checker found nobody owning after the nemesis. The rig
/// now counts ownership as the checker does.
#[test]
fn an_owner_whose_lease_was_just_broken_owns_no_more_at_the_end_of_the_record() {
    let mut h = clean();
    h.terms[1].end = None;
    assert!(h.owned_at_end("mutex"));
    // Broken as the nemesis stopped (30 s); the record ends at 40 s.
    h.breaks.push(("mutex".to_owned(), s(30), s(30)));
    assert!(!h.owned_at_end("mutex"), "broken before the end");
    assert_eq!(rules(&h), vec!["liveness"], "the checker agrees");
    h.terms.push(term("mutex", 0, 3, 40, None));
    assert!(h.owned_at_end("mutex"), "a new term");
    h.terms[1].end = Some(s(40));
    assert!(h.owned_at_end("mutex"));
    let mut ended = clean();
    ended.terms[1].end = Some(s(40));
    assert!(!ended.owned_at_end("mutex"), "its last term ended");
}

#[test]
fn a_process_that_never_exits_is_caught() {
    let mut h = clean();
    h.hung.push(1);
    assert_eq!(rules(&h), vec!["hung"]);
}

#[test]
fn violations_come_in_time_order() {
    let mut h = clean();
    h.writes.push(write("mutex", 0, 1, 30, true));
    h.units.push(unit("mutex", 0, 1, 20));
    let found = check(&h);
    assert_eq!(found.len(), 2);
    assert!(found[0].at < found[1].at, "{found:?}");
}

/// Seed 1638074026: a `blob-mutex run` stopped at its deadline, logged the
/// end of its term, and exited 3 s later, after a release that timed out;
/// the next owner had begun in between. Its term ends at the log line.
#[test]
fn a_run_terms_end_is_its_logged_end_not_its_exit() {
    let roles = vec![role("run"); 2];
    let log = |line: &str| What::Log(line.to_owned());
    let events = vec![
        at(1_000, 0, What::Leading { epoch: 41 }),
        at(2_000, 0, log("2026-11-24T14:11:54Z  WARN renewals failed until the deadline; stopping the leader task holder=run.51 epoch=41")),
        at(2_004, 0, log("2026-11-24T14:11:54Z  WARN term ended holder=run.51 epoch=41 reason=deadline tasks=returned failure=\"\"")),
        at(2_500, 1, What::Leading { epoch: 42 }),
        at(5_000, 0, What::Exited { code: Some(4) }),
        at(9_000, 1, What::Exited { code: Some(0) }),
    ];
    let mut h = History::default();
    h.read(&events, &roles);
    assert_eq!(h.terms[0].end, Some(Duration::from_millis(2_004)));
    assert_eq!(h.terms[0].reports, 1, "the exit still reports it");
    h.until = Duration::from_secs(10);
    h.break_grace = Duration::from_secs(6);
    h.wake_grace = Duration::from_secs(6);
    assert_eq!(check(&h), vec![]);
}

/// Seed 1731546683, with the checker's first two fixes: an operator's
/// break (1 408.3 s) hit `run.42` just after it began epoch 33, and `run.43`
/// began epoch 34 on the broken lease. The commands printed `LEADING` after
/// the break had returned, 34's before 33's. A `run`'s term begins when its
/// supervisor logs `became leader`, which came before the break returned.
#[test]
fn a_run_terms_start_is_its_logged_start_not_its_commands_line() {
    let roles = vec![role("run"); 2];
    let log = |line: &str| What::Log(line.to_owned());
    let work = || What::Work {
        epoch: 33,
        partition: None,
    };
    let events = vec![
        at(1_300, 0, log("2026-11-24T16:49:40.6Z DEBUG became leader holder=run.42 epoch=33")),
        at(1_420, 1, log("2026-11-24T16:49:40.7Z DEBUG became leader holder=run.43 epoch=34")),
        at(1_461, 1, What::Leading { epoch: 34 }),
        at(1_490, 0, What::Leading { epoch: 33 }),
        at(1_992, 0, work()),
        at(2_518, 0, work()),
        at(2_633, 0, log("2026-11-24T16:49:41.9Z  WARN term ended holder=run.42 epoch=33 reason=lost tasks=returned failure=\"\"")),
        at(2_636, 0, What::Exited { code: Some(4) }),
        at(9_000, 1, What::Exited { code: Some(0) }),
    ];
    let mut h = History {
        until: s(10),
        break_grace: s(6),
        wake_grace: s(6),
        ..History::default()
    };
    h.bounds.insert("run".to_owned(), s(20));
    h.breaks.push((
        "run".to_owned(),
        Duration::from_millis(1_297),
        Duration::from_millis(1_400),
    ));
    h.read(&events, &roles);
    assert_eq!(
        h.terms
            .iter()
            .map(|t| (t.epoch, t.start))
            .collect::<Vec<_>>(),
        vec![
            (33, Duration::from_millis(1_300)),
            (34, Duration::from_millis(1_420)),
        ],
        "one term per epoch, from the log"
    );
    assert_eq!(check(&h), vec![]);
    // Begun at the commands' lines, epoch 34 seems to come first, and
    // epoch 33 to begin after the break returned.
    let lines: Vec<Event> = events
        .into_iter()
        .filter(|e| !matches!(&e.what, What::Log(l) if l.contains("became leader")))
        .collect();
    let mut h = History {
        breaks: h.breaks,
        bounds: h.bounds,
        until: s(10),
        break_grace: s(6),
        wake_grace: s(6),
        ..History::default()
    };
    h.read(&lines, &roles);
    assert_eq!(rules(&h), vec!["two-owners", "epoch", "unit", "unit"]);
}

#[test]
fn the_record_becomes_terms_units_and_writes() {
    let roles = vec![role("set"), role("run")];
    let p = || "p01".to_owned();
    let events = vec![
        at(
            1,
            0,
            What::Owning {
                partition: p(),
                epoch: 4,
            },
        ),
        at(
            2,
            0,
            What::Work {
                epoch: 4,
                partition: Some(p()),
            },
        ),
        at(
            3,
            0,
            What::Fenced {
                lease: "set/p01".to_owned(),
                epoch: 4,
                accepted: true,
                took: Duration::from_millis(2),
            },
        ),
        at(4, 1, What::Leading { epoch: 2 }),
        at(
            4,
            1,
            What::StateRead {
                epoch: 2,
                last: "epoch=1_tick=7".to_owned(),
            },
        ),
        at(
            5,
            1,
            What::StateRefused {
                epoch: 2,
                tick: 1,
                took: Duration::from_millis(4),
            },
        ),
        at(6, 0, What::Killed),
        at(7, 1, What::Exited { code: Some(4) }),
        at(8, 0, What::Exited { code: None }),
    ];
    let mut h = History::default();
    h.read(&events, &roles);
    assert_eq!(
        h.terms,
        vec![
            Term {
                resource: "set/p01".to_owned(),
                worker: 0,
                epoch: 4,
                start: Duration::from_millis(1),
                end: Some(Duration::from_millis(6)),
                reports: 0,
                silenced: true,
            },
            Term {
                resource: "run".to_owned(),
                worker: 1,
                epoch: 2,
                start: Duration::from_millis(4),
                end: Some(Duration::from_millis(7)),
                reports: 1,
                silenced: false,
            },
        ]
    );
    assert_eq!(h.units.len(), 1);
    assert_eq!(h.units[0].resource, "set/p01");
    assert_eq!(
        h.writes
            .iter()
            .map(|w| (w.resource.as_str(), w.tick, w.sent, w.accepted))
            .collect::<Vec<_>>(),
        vec![
            ("set/p01", None, Duration::from_millis(1), true),
            ("run", Some(1), Duration::from_millis(1), false),
        ],
        "a write was sent as long before its line as it took"
    );
    assert_eq!(
        h.reads,
        vec![Read {
            resource: "run".to_owned(),
            worker: 1,
            epoch: 2,
            at: Duration::from_millis(4),
            last: Some((1, 7)),
        }]
    );
}

#[test]
fn figures_count_faults_ownership_and_the_longest_gap() {
    let mut h = clean();
    h.faults.push(Fault {
        at: s(3),
        kind: "kill",
        detail: "w0".to_owned(),
    });
    let f = figures(&h, 0);
    assert_eq!(f.faults.get("kill"), Some(&1));
    assert_eq!(
        (f.terms, f.units, f.writes_accepted, f.writes_refused),
        (2, 2, 2, 0)
    );
    let (share, longest) = f.owned["mutex"];
    // Owned in [1, 10) and [12, 40) of [1, 40): 37 of 39 s; 2 s without.
    assert!((share - 37.0 / 39.0).abs() < 1e-9, "{share}");
    assert_eq!(longest, s(2));
    // Counted up to the final stop, when there was one.
    h.stopped = s(20);
    let (share, _) = figures(&h, 0).owned["mutex"];
    assert!((share - 17.0 / 19.0).abs() < 1e-9, "{share}");
}

#[test]
fn the_register_refuses_a_lower_epoch_only() {
    let mut highest = std::collections::HashMap::new();
    assert!(accept(&mut highest, "set/p01", 3));
    assert!(
        accept(&mut highest, "set/p01", 3),
        "the same term writes again"
    );
    assert!(accept(&mut highest, "set/p02", 1), "keys are apart");
    assert!(!accept(&mut highest, "set/p01", 2));
    assert!(accept(&mut highest, "set/p01", 4));
}

#[test]
fn the_register_serves_its_rule_over_tcp() {
    use std::io::{BufRead, BufReader, Write};
    let register = blob_mutex_testkit::register::Register::start();
    let send = |line: &str| {
        let mut stream = std::net::TcpStream::connect(register.addr()).expect("connect");
        stream.write_all(line.as_bytes()).expect("write");
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).expect("read");
        answer.trim().to_owned()
    };
    assert_eq!(send("set/p07 37\n"), "OK");
    assert_eq!(send("set/p07 36\n"), "REFUSED");
    assert_eq!(send("set/p07 37\n"), "OK");
}
