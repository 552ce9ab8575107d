//! The history analysis of the multi-process runner, on synthetic records:
//! overlap, gaps, epochs, and parsing the workers' lines.

use std::time::Duration;

use blob_mutex_testkit::workers::{parse_line, Ended, Event, History, What};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn ev(at: u64, worker: usize, what: What) -> Event {
    Event {
        at: ms(at),
        worker,
        what,
    }
}

fn leading(at: u64, worker: usize, epoch: u64) -> Event {
    ev(at, worker, What::Leading { epoch })
}

fn stopped(at: u64, worker: usize, epoch: u64) -> Event {
    ev(
        at,
        worker,
        What::Stopped {
            epoch,
            reason: "shutdown".into(),
        },
    )
}

#[test]
fn parses_worker_lines() {
    assert_eq!(
        parse_line("LEADING epoch=7 id=w1"),
        Some(What::Leading { epoch: 7 })
    );
    assert_eq!(
        parse_line("STOPPED epoch=7 id=w1 reason=deadline"),
        Some(What::Stopped {
            epoch: 7,
            reason: "deadline".into()
        })
    );
    assert_eq!(parse_line("EXITED id=w1"), Some(What::ExitedLine));
    assert_eq!(parse_line("LEADING epoch=x id=w1"), None);
    assert_eq!(parse_line("something else"), None);
    assert_eq!(parse_line(""), None);
}

#[test]
fn clean_handovers_have_no_overlap_and_measure_gaps() {
    let h = History::new(
        vec![
            leading(100, 0, 1),
            stopped(1000, 0, 1),
            leading(1500, 1, 2),
            stopped(3000, 1, 2),
            leading(3000, 2, 3),
        ],
        ms(5000),
    );
    assert_eq!(h.overlap, Duration::ZERO);
    assert_eq!(h.gaps, vec![(ms(1000), ms(1500))]);
    assert_eq!(h.open_gap, None);
    assert!(h.epochs_increase());
    assert_eq!(h.transitions(), 2);
    assert_eq!(h.max_gap(), ms(500));
    assert_eq!(h.intervals[2].end, None);
}

#[test]
fn overlap_is_the_total_time_two_or_more_lead() {
    let h = History::new(
        vec![
            leading(0, 0, 1),
            leading(400, 1, 2),
            leading(500, 2, 3),
            stopped(600, 0, 1),
            stopped(700, 1, 2),
            stopped(800, 2, 3),
            leading(900, 0, 4),
            leading(950, 1, 5),
            stopped(1000, 1, 5),
        ],
        ms(1100),
    );
    // 400..700 (two or three lead) and 950..1000.
    assert_eq!(h.overlap, ms(350));
    assert_eq!(h.gaps, vec![(ms(800), ms(900))]);
}

#[test]
fn a_killed_leader_leads_until_the_kill() {
    let h = History::new(
        vec![
            leading(0, 0, 1),
            ev(2000, 0, What::Killed),
            leading(1900, 1, 2),
            ev(2100, 0, What::Exited { code: None }),
        ],
        ms(3000),
    );
    assert_eq!(h.overlap, ms(100));
    assert_eq!(h.intervals[0].ended, Some(Ended::Killed));
    assert_eq!(h.intervals[0].end, Some(ms(2000)));
}

#[test]
fn an_exit_without_stopped_ends_the_term() {
    let h = History::new(
        vec![
            leading(0, 0, 1),
            ev(500, 0, What::Terminated),
            ev(900, 0, What::Exited { code: Some(70) }),
            leading(2000, 1, 2),
        ],
        ms(2500),
    );
    assert_eq!(h.intervals[0].end, Some(ms(900)));
    assert_eq!(h.intervals[0].ended, Some(Ended::Exited));
    assert_eq!(h.gaps, vec![(ms(900), ms(2000))]);
}

#[test]
fn epochs_that_do_not_increase_are_reported() {
    let h = History::new(
        vec![
            leading(0, 0, 3),
            stopped(10, 0, 3),
            leading(20, 1, 3),
            stopped(30, 1, 3),
            leading(40, 0, 2),
            stopped(50, 0, 2),
            leading(60, 1, 9),
        ],
        ms(100),
    );
    assert!(!h.epochs_increase());
    assert_eq!(h.epoch_violations.len(), 2);
    assert_eq!(h.epoch_violations[0].1.start, ms(20));
    assert_eq!(h.epoch_violations[1].1.epoch, 2);
}

#[test]
fn open_gap_and_open_term() {
    let h = History::new(vec![leading(10, 0, 1), stopped(20, 0, 1)], ms(100));
    assert_eq!(h.open_gap, Some(ms(20)));
    assert!(h.gaps.is_empty());
    let h = History::new(vec![leading(10, 0, 1)], ms(100));
    assert_eq!(h.intervals[0].end, None);
    assert_eq!(h.overlap, Duration::ZERO);
    let h = History::new(vec![leading(10, 0, 1), leading(50, 1, 2)], ms(100));
    assert_eq!(h.overlap, ms(50), "open terms overlap until `until`");
}

#[test]
fn touching_terms_do_not_overlap_and_median_gap() {
    let h = History::new(
        vec![
            leading(0, 0, 1),
            stopped(100, 0, 1),
            leading(100, 1, 2),
            stopped(200, 1, 2),
            leading(500, 0, 3),
            stopped(600, 0, 3),
            leading(700, 1, 4),
            stopped(800, 1, 4),
            leading(1800, 2, 5),
        ],
        ms(2000),
    );
    assert_eq!(h.overlap, Duration::ZERO);
    assert_eq!(h.gaps.len(), 3);
    assert_eq!(h.median_gap(), ms(300));
    assert_eq!(h.max_gap(), ms(1000));
}
