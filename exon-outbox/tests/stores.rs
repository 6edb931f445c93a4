//! The two databases on their own (fast, in `cargo test`): the outbox's writing resumes
//! and its rows go once settled; the effects keep a redelivery already processed from being
//! processed again.

use exon_outbox::effects::Delivered;
use exon_outbox::outbox::{Done, How};
use exon_outbox::{Effects, Outbox};

#[test]
fn the_outbox_fills_once_and_settles_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.redb");
    Outbox::open(&path).unwrap().fill(250, 100).unwrap();
    // Opened again (a restart): the rows are there, and filling again writes none twice.
    let outbox = Outbox::open(&path).unwrap();
    outbox.fill(250, 100).unwrap();
    let rows = outbox.rows().unwrap();
    assert_eq!(rows.len(), 250);
    assert!(rows
        .iter()
        .all(|(k, p)| exon_outbox::item_of(p).unwrap() == *k));
    let done = |row: u64, failure: Option<&str>, how| Done {
        row: Some(row),
        id: None,
        failure: failure.map(str::to_string),
        how,
    };
    let settled: Vec<Done> = (1..=249).map(|k| done(k, None, How::Accepted)).collect();
    outbox.settle(&settled).unwrap();
    outbox
        .settle(&[done(250, Some("in doubt"), How::Recovered)])
        .unwrap();
    assert!(outbox.is_empty().unwrap());
    assert_eq!(outbox.failures().unwrap().len(), 1);
    let counters = outbox.counters().unwrap();
    assert!(counters.contains(&("accepted".to_string(), 249)));
    assert!(counters.contains(&("filled".to_string(), 250)));
}

#[test]
fn a_redelivery_processed_before_is_not_processed_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("effects.redb");
    let m = |slot: u64, item: u64, redelivery| Delivered {
        id: (1, 7, slot),
        item,
        redelivery,
    };
    assert_eq!(
        Effects::open(&path)
            .unwrap()
            .process(&[m(0, 1, false), m(1, 2, false)])
            .unwrap(),
        2
    );
    let effects = Effects::open(&path).unwrap();
    // Slot 1 comes again flagged (processed before the crash); slot 2 flagged, never processed.
    assert_eq!(effects.process(&[m(1, 2, true), m(2, 3, true)]).unwrap(), 1);
    let tally = effects.tally().unwrap();
    assert_eq!(
        (
            tally.twice(3),
            tally.missing(3),
            tally.same_id,
            tally.effects
        ),
        (0, 0, 0, 3)
    );
}

/// The channel's receiver applies the numbers due, skips a flagged redelivery it applied
/// before, and records every breach of the order: a number not due (twice or skipped), an
/// item that is not its number, a message outside the channel.
#[test]
fn the_channel_store_applies_in_order_and_records_breaches() {
    use exon_outbox::applied::Arrival;
    use exon_outbox::Applied;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("applied.redb");
    let seq = |seq: u64, redelivery: bool| Arrival::Seq {
        seq,
        item: seq,
        redelivery,
    };
    let db = Applied::open(&path).unwrap();
    assert_eq!(db.apply(&[seq(0, false), seq(1, false)]).unwrap(), 2);
    drop(db);
    // Opened again (a restart): 1 comes again flagged and is skipped, 2 is due.
    let db = Applied::open(&path).unwrap();
    assert_eq!(
        db.apply(&[seq(1, true), seq(2, true), seq(3, false)])
            .unwrap(),
        2
    );
    let order = db.order().unwrap();
    assert_eq!(order.seqs, [0, 1, 2, 3]);
    assert!(order.violations.is_empty());
    assert_eq!(order.skipped, 1);
    assert_eq!(
        (order.twice(4), order.missing(4), order.out_of_order()),
        (0, 0, 0)
    );
    // Breaches: 3 again unflagged, 5 before 4, an item that is not its number, a gap.
    let wrong = Arrival::Seq {
        seq: 6,
        item: 7,
        redelivery: false,
    };
    let gap = Arrival::Other("a gap".into());
    assert_eq!(
        db.apply(&[seq(3, false), seq(5, false), wrong, gap])
            .unwrap(),
        3
    );
    let order = db.order().unwrap();
    assert_eq!(order.seqs, [0, 1, 2, 3, 3, 5, 6]);
    assert_eq!(order.violations.len(), 4, "{:?}", order.violations);
    assert_eq!((order.twice(7), order.missing(7)), (1, 1));
    assert_eq!(order.out_of_order(), 2, "3 after 3, 5 after 3");
    assert_eq!(order.strays(6), 1);
}
