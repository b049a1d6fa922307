//! A failing device (disk full): ingestion stops with the device's error instead of
//! hanging, everything ingested before stays readable, and once writes succeed again
//! ingestion resumes and nothing acknowledged is lost.

mod common;

use std::time::{Duration, Instant};

use shoal_core::scan::ScanRequest;
use shoal_core::table::{Table, TableConfig};
use shoal_core::{Error, FieldPath};

fn count(table: &Table) -> usize {
    let request = ScanRequest { columns: vec![FieldPath::parse("id").unwrap()], ..ScanRequest::default() };
    table.scan(&request).unwrap().0.iter().map(|b| b.num_rows()).sum()
}

#[test]
fn disk_full_stops_ingestion_with_a_clear_error_and_ingestion_resumes_when_space_returns() {
    let Some(lines) = common::github_events(2_000) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut config = TableConfig::on_disk(dir.path());
    config.log.page_size_bits = 18;
    config.log.memory_budget_bytes = 6 << 18;
    let table = Table::create(config.clone()).unwrap();
    let batches: Vec<Vec<&[u8]>> = lines.chunks(50).map(|c| c.iter().map(String::as_bytes).collect()).collect();
    let mut acknowledged = 0;
    for batch in &batches[..4] {
        acknowledged += table.ingest(batch).unwrap().records;
    }
    table.flush().unwrap();

    table.log().inject_write_fault(Some(28)); // ENOSPC
    let started = Instant::now();
    let mut failure = None;
    for batch in batches[4..].iter().cycle().take(400) {
        match table.ingest(batch) {
            Ok(report) => acknowledged += report.records,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("ingestion must stop while the disk is full");
    assert!(started.elapsed() < Duration::from_secs(20), "it stopped instead of hanging");
    match &failure {
        Error::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(28), "{failure}"),
        other => panic!("expected the device's I/O error, got {other}"),
    }
    assert!(failure.to_string().contains("No space left on device"), "{failure}");
    // Everything acknowledged is readable, on disk and in memory.
    assert_eq!(count(&table), acknowledged);
    // Waiting for durability fails fast with the same error.
    let waited = Instant::now();
    assert!(matches!(table.wait_durable(table.log().tail_address(), Duration::from_secs(30)), Err(Error::Io { .. })));
    assert!(waited.elapsed() < Duration::from_secs(5));

    // Space returns: the flush thread's retries succeed and ingestion resumes.
    table.log().inject_write_fault(None);
    table.wait_durable(table.log().tail_address(), Duration::from_secs(30)).unwrap();
    for batch in &batches[..4] {
        acknowledged += table.ingest(batch).unwrap().records;
    }
    table.close().unwrap();
    drop(table);
    let (table, report) = Table::open(config).unwrap();
    assert_eq!(report.records as usize, acknowledged, "{report:?}");
    assert_eq!(count(&table), acknowledged);
}
