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

/// Regression: on a full disk, batches of a durable table that could not be made durable
/// stayed visible (7,000 rows; 312 after a restart), so a resend without writer serials
/// duplicated them. Now a batch is refused before anything is written while the device
/// fails, and the records of a batch that failed to become durable are withdrawn, in
/// memory and in what is later flushed.
#[test]
fn batches_that_cannot_be_made_durable_are_refused_or_withdrawn() {
    use shoal_core::table::DurabilityPolicy;
    let Some(lines) = common::github_events(300) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut config = TableConfig::on_disk(dir.path()).with_durability(DurabilityPolicy::Fsync);
    // Pages of 1 MiB: the failed batch lies on the open page, none of it flushed before
    // the failure. (Records of it on pages that filled and were flushed before the
    // failure are on the disk as written and come back after a restart, as after a
    // crash in the middle of a batch; docs/configuration.md says so.)
    config.log.page_size_bits = 20;
    let table = Table::create(config.clone()).unwrap();
    let batches: Vec<Vec<&[u8]>> = lines.chunks(100).map(|c| c.iter().map(String::as_bytes).collect()).collect();
    let first = table.ingest(&batches[0]).unwrap();
    table.wait_durable(first.end_address, Duration::from_secs(10)).unwrap();

    // The disk fills after the next batch was written to memory, before it was flushed.
    let second = table.ingest(&batches[1]).unwrap();
    assert_eq!(second.addresses.len(), 100);
    table.log().inject_write_fault(Some(28));
    assert!(table.log().flushed_until() <= second.first_address, "part of the batch was flushed already");
    assert!(matches!(table.wait_durable(second.end_address, Duration::from_secs(10)), Err(Error::Io { .. })));
    assert_eq!(count(&table), 200, "before the failed batch is withdrawn");
    assert_eq!(table.withdraw(&second.addresses).records, 100);
    assert_eq!(count(&table), 100, "a batch that was not acknowledged is not visible");
    assert_eq!(table.stats().records, 100);
    // While the device fails, batches are refused before anything is written.
    match table.ingest(&batches[2]) {
        Err(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(28)),
        other => panic!("expected the device's error, got {other:?}"),
    }
    assert_eq!(count(&table), 100);

    // Space returns: the withdrawn records reach the disk invalid, and stay invisible
    // after a restart.
    table.log().inject_write_fault(None);
    // The flush thread's next retry (every 100 ms) clears the failure.
    table.wait_durable(table.log().tail_address(), Duration::from_secs(10)).unwrap();
    let third = table.ingest(&batches[2]).unwrap();
    table.wait_durable(third.end_address, Duration::from_secs(10)).unwrap();
    assert_eq!(count(&table), 200);
    table.close().unwrap();
    drop(table);
    let (table, report) = Table::open(config).unwrap();
    assert_eq!(report.records, 200, "{report:?}");
    assert_eq!(count(&table), 200);
}

/// Regression, the lasting half of withdrawal: records of a failed batch that a flush had
/// written before the disk filled were withdrawn in memory only, so they came back once
/// their page was read from the device (its frame reused, or after a restart: 312 rows in
/// the full-disk probe). Now their addresses are listed on the device (`withdrawn.bin`,
/// preallocated so that a full disk takes the list) and device reads return them invalid.
#[test]
fn records_withdrawn_after_their_page_was_flushed_stay_withdrawn_when_read_back() {
    withdraw_a_batch_whose_first_pages_were_flushed(false);
}

/// As above, with the columnar tier compacting the failed batch's flushed pages before
/// the withdrawal: the file built from them is dropped and built again without them.
#[test]
fn columnar_files_holding_withdrawn_records_are_built_again() {
    withdraw_a_batch_whose_first_pages_were_flushed(true);
}

fn withdraw_a_batch_whose_first_pages_were_flushed(columnar: bool) {
    use shoal_core::table::DurabilityPolicy;
    let Some(lines) = common::github_events(1_200) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut config = TableConfig::on_disk(dir.path()).with_durability(DurabilityPolicy::Fsync);
    // Pages of 64 KiB in a ring of 8: the failed batch spans more pages than the ring.
    config.log.page_size_bits = 16;
    config.log.memory_budget_bytes = 8 << 16;
    config.columnar.enabled = columnar;
    config.columnar.file_log_bytes = 2 << 16;
    // Whole groups of two pages are compacted at once; a shorter tail waits (no idle compaction).
    config.columnar.idle_ms = 3_600_000;
    let table = Table::create(config.clone()).unwrap();
    let records: Vec<&[u8]> = lines.iter().map(String::as_bytes).collect();
    let first = table.ingest(&records[..100]).unwrap();
    table.wait_durable(first.end_address, Duration::from_secs(10)).unwrap();

    // The failed batch: its closed pages are flushed (and the first ones evicted) before
    // the disk fills; its last, open page is not.
    let second = table.ingest(&records[100..500]).unwrap();
    let open_page = table.log().page_start(table.log().page_of(second.end_address));
    assert!(table.log().wait_flushed(open_page, Duration::from_secs(10)) >= open_page);
    assert!(second.first_address < table.log().head_address(), "the batch's first pages left the ring");
    if columnar {
        let deadline = Instant::now() + Duration::from_secs(20);
        while table.stats().columnar.rows < 300 {
            assert!(Instant::now() < deadline, "not compacted: {:?}", table.stats().columnar);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    table.log().inject_write_fault(Some(28));
    assert!(matches!(table.wait_durable(second.end_address, Duration::from_secs(10)), Err(Error::Io { .. })));
    let withdrawal = table.withdraw(&second.addresses);
    assert_eq!(withdrawal.records, 400, "{withdrawal:?}");
    assert_eq!(withdrawal.not_lasting, None, "the preallocated list takes it on a full disk");
    assert_eq!(count(&table), 100);
    assert!(table.stats().columnar.rows <= 100, "files holding withdrawn records are dropped: {:?}", table.stats().columnar);

    // Space returns; later records push every page of the failed batch out of the ring,
    // so the scans read them from the device.
    table.log().inject_write_fault(None);
    // The flush thread retries every 100 ms; until its next attempt the last error stands, and
    // a durability wait gives up once the device has failed for half a second — which a
    // loaded machine's slow retry can reach. Wait for the retry first.
    let deadline = Instant::now() + Duration::from_secs(10);
    while table.log().flush_error().is_some() {
        assert!(Instant::now() < deadline, "the flush thread did not retry: {:?}", table.log().flush_error());
        std::thread::sleep(Duration::from_millis(10));
    }
    table.wait_durable(table.log().tail_address(), Duration::from_secs(10)).unwrap();
    let third = table.ingest(&records[500..1_200]).unwrap();
    table.wait_durable(third.end_address, Duration::from_secs(10)).unwrap();
    assert!(second.end_address < table.log().head_address(), "the failed batch is on the device only");
    assert_eq!(count(&table), 800);
    assert_eq!(table.stats().records, 800);
    if columnar {
        let deadline = Instant::now() + Duration::from_secs(20);
        while table.stats().columnar.backlog_bytes > 2 << 16 {
            assert!(Instant::now() < deadline, "not compacted: {:?}", table.stats().columnar);
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(table.stats().columnar.files > 0);
        assert_eq!(count(&table), 800, "answers from the files built again");
    }
    // (Counted once closed: `close` flushes the log, and the compactor may build the run that
    // completes before it stops.)
    table.close().unwrap();
    let files = table.stats().columnar.files;
    drop(table);
    let (table, report) = Table::open(config).unwrap();
    assert_eq!(report.records, 800, "{report:?}");
    assert_eq!(count(&table), 800);
    // Files built again without the withdrawn records are kept at open (only a file that
    // holds a withdrawn record as a row is dropped there): nothing is compacted again.
    std::thread::sleep(Duration::from_millis(300));
    let after = table.stats().columnar;
    assert_eq!((after.files, after.compacted_json_bytes), (files, 0), "{after:?}");
}
