//! Retention: truncating the head of the log by address, size and age drops exactly the
//! records below the new begin address from scans and chains, deletes whole segment
//! files, and survives a reopen.

mod common;

use std::path::Path;
use std::time::{Duration, SystemTime};

use shoal_core::psf::PsfSpec;
use shoal_core::retention::RetentionRule;
use shoal_core::scan::ScanRequest;
use shoal_core::table::{Table, TableConfig};
use shoal_core::{FieldPath, LogAddress};

fn config(dir: &Path) -> TableConfig {
    let mut config = TableConfig::on_disk(dir);
    config.log.page_size_bits = 18;
    config.log.memory_budget_bytes = 4 << 18;
    config.log.pages_per_segment = 2;
    config.index_size_bits = 12;
    config
}

fn segments(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("segment-"))
        .collect();
    names.sort();
    names
}

fn ids(table: &Table, filter: &str) -> (Vec<String>, Vec<String>) {
    common::planned_and_full_ids(table, filter)
}

#[test]
fn truncation_drops_exactly_the_records_below_the_begin_address() {
    let Some(lines) = common::github_events(3_000) else { return };
    let dir = tempfile::tempdir().unwrap();
    let table = Table::create(config(dir.path())).unwrap();
    table.register_psf("type", &PsfSpec::Projection { field: "type".into() }).unwrap();
    // Remember where each record starts, batch by batch (records of a batch are in order).
    let mut starts = Vec::new();
    for chunk in lines.chunks(100) {
        let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
        let report = table.ingest(&refs).unwrap();
        starts.push((report.first_address, chunk));
    }
    table.flush().unwrap();
    let before = segments(dir.path());
    assert!(before.len() >= 4, "{before:?}");

    let cut = starts[starts.len() / 2].0 + 10;
    let report = table.truncate(RetentionRule::BeforeAddress(cut)).unwrap();
    assert!(report.begin_address <= cut && report.begin_address > report.previous_begin_address, "{report:?}");
    assert_eq!(report.begin_address.get() % (1 << 18), 0, "page aligned");
    assert!(report.segments_deleted >= 1 && report.bytes_deleted > 0, "{report:?}");
    assert_eq!(segments(dir.path()).len(), before.len() - report.segments_deleted as usize);

    // The oracle: records of batches that start at or above the begin address are
    // kept; of the batch that straddles it, whatever the ids say is consistent.
    let begin = report.begin_address;
    let kept_from = starts.iter().position(|(a, _)| *a >= begin).unwrap();
    let (planned, full) = ids(&table, "type = 'IssuesEvent'");
    assert_eq!(planned, full, "chains stop at the begin address");
    let expected_after: Vec<String> = starts[kept_from..]
        .iter()
        .flat_map(|(_, chunk)| chunk.iter())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "IssuesEvent")
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(expected_after.iter().all(|id| full.binary_search(id).is_ok()));
    let expected_before: Vec<String> = starts[..kept_from.saturating_sub(1)]
        .iter()
        .flat_map(|(_, chunk)| chunk.iter())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "IssuesEvent")
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(!expected_before.is_empty());
    assert!(expected_before.iter().all(|id| full.binary_search(id).is_err()), "records below the begin address are gone");

    // Truncating again below the begin address does nothing; the begin survives reopening.
    assert_eq!(table.truncate(RetentionRule::BeforeAddress(LogAddress::FIRST)).unwrap().begin_address, begin);
    table.close().unwrap();
    drop(table);
    let (table, recovery) = Table::open(config(dir.path())).unwrap();
    assert_eq!(table.log().begin_address(), begin, "{recovery:?}");
    assert_eq!(ids(&table, "type = 'IssuesEvent'"), (planned.clone(), planned));
    let more: Vec<&[u8]> = lines[..50].iter().map(String::as_bytes).collect();
    table.ingest(&more).unwrap();
    let (planned, full) = ids(&table, "type = 'IssuesEvent'");
    assert_eq!(planned, full);
}

#[test]
fn truncation_by_size_and_by_age() {
    let Some(lines) = common::github_events(3_000) else { return };
    let dir = tempfile::tempdir().unwrap();
    let table = Table::create(config(dir.path())).unwrap();
    let refs: Vec<&[u8]> = lines.iter().map(String::as_bytes).collect();
    for chunk in refs.chunks(100) {
        table.ingest(chunk).unwrap();
    }
    table.flush().unwrap();
    let tail = table.log().tail_address();
    let report = table.truncate(RetentionRule::KeepBytes(1 << 20)).unwrap();
    assert!(tail - report.begin_address >= 1 << 20 && tail - report.begin_address < (1 << 20) + (1 << 18), "{report:?}");

    // Age: pretend the oldest remaining segment was last written an hour ago.
    let oldest = dir.path().join(&segments(dir.path())[0]);
    let file = std::fs::File::options().write(true).open(&oldest).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
    let remaining = segments(dir.path()).len();
    let report = table.truncate(RetentionRule::OlderThan(Duration::from_secs(600))).unwrap();
    assert_eq!(report.segments_deleted, 1, "{report:?}");
    assert_eq!(segments(dir.path()).len(), remaining - 1);
    assert!(table.truncate(RetentionRule::OlderThan(Duration::from_secs(600))).unwrap().segments_deleted == 0);
    // A full scan still reads every page it should.
    let request = ScanRequest { columns: vec![FieldPath::parse("id").unwrap()], ..ScanRequest::default() };
    let (batches, _) = table.scan(&request).unwrap();
    assert!(batches.iter().map(|b| b.num_rows()).sum::<usize>() > 0);
}

#[test]
fn a_retention_policy_is_applied_on_demand_and_kept_across_a_reopen() {
    let Some(lines) = common::github_events(3_000) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.retention = shoal_core::table::RetentionPolicy { keep_bytes: Some(1 << 19), ..Default::default() };
    let table = Table::create(config.clone()).unwrap();
    assert_eq!(table.apply_retention().unwrap(), None, "an empty table keeps everything");
    for chunk in lines.chunks(100) {
        let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
        table.ingest(&refs).unwrap();
    }
    table.flush().unwrap();
    let tail = table.tail_address();
    let report = table.apply_retention().unwrap().expect("more than 512 KiB of log: its head goes");
    assert!(report.begin_address > report.previous_begin_address, "{report:?}");
    assert!(tail - report.begin_address >= 1 << 19, "at least keep_bytes stay: {report:?}, tail {tail}");
    assert!(tail - report.begin_address < (1 << 19) + (1 << 18), "about keep_bytes stay, within a page: {report:?}");
    assert_eq!(table.apply_retention().unwrap(), None, "applied again: nothing more to drop");
    table.close().unwrap();
    drop(table);

    // The policy is the table's: a reopen (with a config that says nothing of it) keeps it.
    let (table, _) = Table::open(TableConfig::on_disk(dir.path())).unwrap();
    assert_eq!(table.config().retention, config.retention);
    assert_eq!(table.retention(), config.retention);
    assert_eq!(table.stats().begin_address, report.begin_address);

    // Altered: a smaller keep_bytes drops more at the next application, and a reopen keeps it.
    let smaller = shoal_core::table::RetentionPolicy { keep_bytes: Some(1 << 18), ..Default::default() };
    table.set_retention(smaller).unwrap();
    assert_eq!(table.stats().retention, smaller);
    let again = table.apply_retention().unwrap().expect("the smaller policy drops more");
    assert!(again.begin_address > report.begin_address, "{again:?}");
    table.close().unwrap();
    drop(table);
    let (table, _) = Table::open(TableConfig::on_disk(dir.path())).unwrap();
    assert_eq!(table.retention(), smaller);
    // Removed: keeps everything from now on.
    table.set_retention(shoal_core::table::RetentionPolicy::default()).unwrap();
    assert_eq!(table.apply_retention().unwrap(), None);
}
