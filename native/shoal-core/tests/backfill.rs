//! PSF backfill on real GitHub Archive events: a PSF registered over a table that holds
//! records comes to cover them (sorted runs below its safe register address), index scans
//! over the whole table agree with full scans and an oracle throughout — while the
//! backfill runs, with records ingested meanwhile, after a reopen, after the table was
//! dropped mid-backfill (it resumes), with a damaged run (made again) — and a
//! deregistered PSF's runs are deleted.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::scan::ScanRequest;
use shoal_core::table::{Table, TableConfig};

fn config(dir: &Path) -> TableConfig {
    let mut config = TableConfig::on_disk(dir);
    // 64 KiB pages: a run (16 pages) indexes 1 MiB of log, several per table here.
    config.log.page_size_bits = 16;
    config.log.memory_budget_bytes = 8 << 16;
    config.log.pages_per_segment = 16;
    config.index_size_bits = 12;
    config.columnar.enabled = false;
    config
}

fn psfs() -> Vec<(&'static str, PsfSpec)> {
    vec![
        ("type", PsfSpec::Projection { field: "type".into() }),
        ("login", PsfSpec::Projection { field: "actor.login".into() }),
        ("opened_issues", PsfSpec::Predicate { expr: "type = 'IssuesEvent' AND payload.action = 'opened'".into() }),
        ("push_size", PsfSpec::range("payload.size", vec![1.0, 2.0, 5.0])),
        ("type_public", PsfSpec::Composite { fields: vec!["type".into(), "public".into()] }),
    ]
}

/// Events that fit a 64 KiB page.
fn events() -> Option<Vec<String>> {
    Some(common::github_events(3_200)?.into_iter().filter(|l| l.len() < 60_000).take(3_000).collect())
}

fn ingest(table: &Table, lines: &[String]) {
    for chunk in lines.chunks(100) {
        let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
        table.ingest(&refs).expect("ingest");
    }
    table.flush().expect("flush");
}

fn wait_backfilled(table: &Table) {
    let deadline = Instant::now() + Duration::from_secs(120);
    for psf in psfs().iter().filter_map(|(name, _)| table.psfs().find_active(name)) {
        loop {
            let progress = table.backfill_progress(psf.id).expect("a backfill was asked for");
            if progress.done {
                break;
            }
            assert!(Instant::now() < deadline, "backfill of {} did not finish: {progress:?}", psf.name);
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(psf.coverage().map(|c| c.0), Some(table.log().begin_address()), "{} covers the whole log", psf.name);
    }
}

/// Every filter's planned scan, full scan and the oracle agree; returns how many plans
/// had no full scan at all (index scans over the whole table).
fn check(table: &Table, records: &[serde_json::Value]) -> usize {
    let mut filters = vec![
        "type = 'IssuesEvent' AND payload.action = 'opened'".to_owned(),
        "payload.size >= 2".to_owned(),
        "type = 'WatchEvent'".to_owned(),
        "type = 'PushEvent' AND public = true".to_owned(),
        "type IN ('ForkEvent', 'CreateEvent')".to_owned(),
    ];
    for record in records.iter().step_by(401).take(4) {
        if let Some(login) = record["actor"]["login"].as_str() {
            filters.push(format!("actor.login = '{}'", login.replace('\'', "''")));
        }
    }
    let mut whole = 0;
    for filter in &filters {
        let expr = parse_expr(filter).expect("filter");
        let expected = common::oracle_ids(records, &expr);
        let (planned, full) = common::planned_and_full_ids(table, filter);
        assert_eq!(full, expected, "full scan vs oracle: {filter}");
        assert_eq!(planned, expected, "planned scan vs oracle: {filter}");
        let plan = table.plan(&ScanRequest { filter: Some(expr), ..ScanRequest::default() });
        whole += usize::from(!plan.index_scans.is_empty() && plan.full_scans.is_empty());
    }
    whole
}

fn run_files(dir: &Path, psf: u32) -> usize {
    run_ranges(dir, psf).len()
}

#[test]
fn a_psf_registered_over_records_comes_to_cover_them_and_answers_stay_exact() {
    let Some(lines) = events() else { return };
    let records: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).expect("json")).collect();
    let dir = tempfile::tempdir().expect("dir");
    {
        let table = Table::create(config(dir.path())).expect("create");
        ingest(&table, &lines[..2_000]);
        for (name, spec) in psfs() {
            table.register_psf_with(name, &spec, true).expect("register");
        }
        // Exact while the backfill runs, with records ingested meanwhile.
        ingest(&table, &lines[2_000..2_400]);
        check(&table, &records[..2_400]);
        wait_backfilled(&table);
        let whole = check(&table, &records[..2_400]);
        assert!(whole >= 6, "only {whole} filters were index scans over the whole table");
        let type_psf = table.psfs().find_active("type").expect("type");
        let progress = table.backfill_progress(type_psf.id).expect("progress");
        assert!(progress.runs >= 3 && progress.entries > 1_500 && progress.bytes_per_second > 0.0, "{progress:?}");
        // A forward-only PSF covers what is ingested after it, as in FishStore.
        let forward = table.register_psf_with("forward", &PsfSpec::Projection { field: "repo.name".into() }, false).expect("register");
        assert!(table.backfill_progress(forward.id).is_none());
        assert_eq!(forward.coverage().map(|c| c.0), Some(forward.safe_register_address()));
        table.close().expect("close");
    }
    // Reopened: the runs hold, nothing is left to do.
    {
        let (table, _) = Table::open(config(dir.path())).expect("open");
        wait_backfilled(&table);
        assert!(check(&table, &records[..2_400]) >= 6);
        // A deregistered PSF's runs are deleted; it covers what its chains hold.
        let login = table.deregister_psf("login").expect("deregister");
        assert_eq!(run_files(dir.path(), login.id), 0);
        assert_eq!(login.coverage().map(|c| c.0), Some(login.safe_register_address()));
        ingest(&table, &lines[2_400..2_600]);
        check(&table, &records[..2_600]);
        table.close().expect("close");
    }
    // A run damaged on disk is made again at the next open.
    let type_id = 0;
    let (from, to) = run_ranges(dir.path(), type_id)[0];
    let damaged = dir.path().join("backfill").join(format!("psf-{type_id}-{from}-{to}.run"));
    let mut bytes = std::fs::read(&damaged).expect("read");
    bytes[5] ^= 0x20;
    std::fs::write(&damaged, bytes).expect("write");
    let (table, _) = Table::open(config(dir.path())).expect("open");
    wait_backfilled(&table);
    // Every filter but the four on the deregistered login (and `PushEvent AND public`, half
    // the records: a full scan by cost).
    assert!(check(&table, &records[..2_600]) >= 4);
}

#[test]
fn a_backfill_stopped_by_a_drop_resumes_at_the_next_open() {
    let Some(lines) = events() else { return };
    let records: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).expect("json")).collect();
    let dir = tempfile::tempdir().expect("dir");
    {
        let table: Arc<Table> = Table::create(config(dir.path())).expect("create");
        ingest(&table, &lines);
        for (name, spec) in psfs() {
            table.register_psf_with(name, &spec, true).expect("register");
        }
        // Dropped without a close while the backfill runs: the runs made so far stay.
    }
    let (table, _) = Table::open(config(dir.path())).expect("open");
    check(&table, &records);
    wait_backfilled(&table);
    assert!(check(&table, &records) >= 6);
}

/// The `[from, to)` ranges of PSF `psf`'s run files.
fn run_ranges(dir: &Path, psf: u32) -> Vec<(u64, u64)> {
    let Ok(entries) = std::fs::read_dir(dir.join("backfill")) else { return Vec::new() };
    let mut ranges: Vec<(u64, u64)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(&format!("psf-{psf}-"))?.strip_suffix(".run")?.to_owned();
            let (from, to) = rest.split_once('-')?;
            Some((from.parse().ok()?, to.parse().ok()?))
        })
        .collect();
    ranges.sort_unstable();
    ranges
}

#[test]
fn psfs_registered_apart_meet_and_go_on_in_one_pass() {
    let Some(lines) = events() else { return };
    let records: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).expect("json")).collect();
    let dir = tempfile::tempdir().expect("dir");
    let table = Table::create(config(dir.path())).expect("create");
    ingest(&table, &lines[..2_000]);
    // Both backfills under way at once (the first would be done before the second began).
    table.hold_backfill(true);
    let first = table.register_psf_with("type", &psfs()[0].1, true).expect("register");
    ingest(&table, &lines[2_000..2_600]);
    let second = table.register_psf_with("login", &psfs()[1].1, true).expect("register");
    ingest(&table, &lines[2_600..]);
    table.hold_backfill(false);
    wait_backfilled(&table);
    check(&table, &records);
    // The later PSF's runs stop at the earlier one's start, and below it the two PSFs' runs
    // cover the same ranges (made in one pass).
    let (earlier, later) = (run_ranges(dir.path(), first.id), run_ranges(dir.path(), second.id));
    let start = first.safe_register_address().get();
    assert!(later.iter().any(|&(from, _)| from == start), "{later:?} meets {start}");
    let below: Vec<_> = later.iter().filter(|&&(_, to)| to <= start).copied().collect();
    assert_eq!(below, earlier.iter().filter(|&&(from, _)| from < start).copied().collect::<Vec<_>>());
}

#[test]
fn an_in_memory_tables_runs_are_held_in_its_memory_and_counted() {
    let Some(lines) = events() else { return };
    let records: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).expect("json")).collect();
    let mut config = TableConfig::default();
    config.log.page_size_bits = 16;
    config.log.memory_budget_bytes = 256 << 16;
    config.index_size_bits = 12;
    config.columnar.enabled = false;
    let table = Table::create(config).expect("create");
    ingest(&table, &lines);
    let before = table.reserved_bytes();
    for (name, spec) in psfs() {
        table.register_psf_with(name, &spec, true).expect("register");
    }
    wait_backfilled(&table);
    assert!(check(&table, &records) >= 6);
    // 16 bytes per entry, in memory, counted against the daemon's limit.
    let entries: u64 = table.psfs().all().iter().filter_map(|p| table.backfill_progress(p.id)).map(|p| p.entries).sum();
    let held = table.memory_stats().backfill_bytes;
    assert!(held >= 16 * entries && held < 16 * entries + 4096, "{held} bytes for {entries} entries");
    assert!(table.reserved_bytes() >= before + held, "the runs are part of the reservation");
    table.deregister_psf("type").expect("deregister");
    assert!(table.memory_stats().backfill_bytes < held, "a deregistered PSF's runs are let go");
}

#[test]
fn a_run_damaged_while_the_table_is_open_fails_one_query_and_is_made_again() {
    let Some(lines) = events() else { return };
    let records: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).expect("json")).collect();
    let dir = tempfile::tempdir().expect("dir");
    let table = Table::create(config(dir.path())).expect("create");
    ingest(&table, &lines);
    let psf = table.register_psf_with("type", &psfs()[0].1, true).expect("register");
    wait_backfilled(&table);
    // A flipped bit in the entries of the run holding the oldest records.
    let (from, to) = run_ranges(dir.path(), psf.id)[0];
    let path = dir.path().join("backfill").join(format!("psf-{}-{from}-{to}.run", psf.id));
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[64 + 8] ^= 1;
    std::fs::write(&path, bytes).expect("write");
    // Every type's chain and runs (the planner's cost check left out: an index scan reads
    // every block of the runs).
    let mut types: Vec<&str> = records.iter().filter_map(|r| r["type"].as_str()).collect();
    types.sort_unstable();
    types.dedup();
    let list = types.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
    let request = ScanRequest { filter: Some(parse_expr(&format!("type IN ({list})")).expect("filter")), ..ScanRequest::default() };
    let plan = shoal_core::scan::plan_scan(request.filter.as_ref(), &table.psfs().all(), table.log().begin_address(), table.log().tail_address());
    assert!(plan.full_scans.is_empty(), "{plan:?}");
    let error = table.scan_with_plan(&request, &plan, &mut |_| Ok(std::ops::ControlFlow::Continue(()))).expect_err("a damaged block");
    assert!(error.to_string().contains("checksum"), "{error}");
    wait_backfilled(&table);
    check(&table, &records);
    // The run was written again, whole: the scan reads every block without a complaint.
    let again = shoal_core::scan::plan_scan(request.filter.as_ref(), &table.psfs().all(), table.log().begin_address(), table.log().tail_address());
    table.scan_with_plan(&request, &again, &mut |_| Ok(std::ops::ControlFlow::Continue(()))).expect("the run made again");
}
