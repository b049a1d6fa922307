//! Writer sessions and durability policies on one table: resends are skipped, and a
//! batch is made durable without closing the open page (group commit / fsync write the
//! page's prefix), then survives a reopen.

use std::time::Duration;

use shoal_core::session::WriterBatch;
use shoal_core::table::{DurabilityPolicy, Table, TableConfig};
use shoal_core::LogAddress;

fn config(dir: &std::path::Path, policy: DurabilityPolicy) -> TableConfig {
    let mut config = TableConfig::on_disk(dir);
    config.log.page_size_bits = 20;
    config.log.memory_budget_bytes = 8 << 20;
    config.with_durability(policy)
}

#[test]
fn resent_serials_are_skipped_and_reported_as_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::create(config(dir.path(), DurabilityPolicy::None)).unwrap();
    let batch = |serial| WriterBatch { writer: "flink-0", serial };
    assert!(!table.ingest_as(batch(1), &[br#"{"a":1}"#]).unwrap().duplicate);
    assert!(!table.ingest_as(batch(3), &[br#"{"a":3}"#]).unwrap().duplicate, "gaps are allowed");
    for serial in [1, 2, 3] {
        let report = table.ingest_as(batch(serial), &[br#"{"a":9}"#]).unwrap();
        assert!(report.duplicate && report.records == 0, "serial {serial}");
    }
    assert_eq!(table.stats().records, 2);
    let status = table.writer_status("flink-0");
    assert_eq!(status.last_serial, Some(3));
    assert_eq!(table.writer_status("nobody").last_serial, None);
    // A rejected batch does not take its serial: the writer may resend it fixed.
    assert!(table.ingest_as(batch(4), &[b"{broken"]).is_err());
    assert_eq!(table.writer_status("flink-0").last_serial, Some(3));
    assert!(!table.ingest_as(batch(4), &[br#"{"a":4}"#]).unwrap().duplicate);
    assert!(table.ingest_as(WriterBatch { writer: "", serial: 1 }, &[br#"{}"#]).is_err());
}

#[test]
fn durable_batches_do_not_close_the_open_page_and_survive_reopening() {
    for policy in [DurabilityPolicy::Fsync, DurabilityPolicy::GroupCommit { interval_ms: 2 }] {
        let dir = tempfile::tempdir().unwrap();
        let table = Table::create(config(dir.path(), policy)).unwrap();
        let mut last_end = LogAddress::ZERO;
        for serial in 1..=20u64 {
            let record = format!(r#"{{"serial":{serial}}}"#);
            let report = table.ingest_as(WriterBatch { writer: "w", serial }, &[record.as_bytes()]).unwrap();
            last_end = report.last_address + 1;
            let durable = table.wait_durable(last_end, Duration::from_secs(10)).unwrap();
            assert!(durable >= last_end, "{policy:?}");
            assert_eq!(table.writer_status("w").last_durable_serial, Some(serial), "{policy:?}");
        }
        // Twenty durable batches of a few bytes each still share the first page.
        assert!(table.log().tail_address().get() < 1 << 20, "{policy:?}: pages were closed to make batches durable");
        drop(table); // no close, no checkpoint: as after a crash
        let (table, report) = Table::open(config(dir.path(), DurabilityPolicy::None)).unwrap();
        assert_eq!(report.records, 20, "{policy:?}: {report:?}");
        assert!(report.end_address >= last_end);
        assert_eq!(table.writer_status("w").last_serial, Some(20));
        assert_eq!(table.config().durability, policy, "the policy is the table's, from table.json");
    }
}

#[test]
fn in_memory_tables_have_nothing_durable() {
    let table = Table::create(TableConfig::in_memory(1 << 24)).unwrap();
    table.ingest(&[br#"{"a":1}"#]).unwrap();
    assert_eq!(table.durable_address(), LogAddress::ZERO);
    assert!(table.wait_durable(LogAddress::FIRST, Duration::from_millis(10)).is_err());
}
