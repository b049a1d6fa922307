//! Recovery scenarios on real GitHub Archive events: a table closed and reopened, a
//! table whose last page was damaged, and a table whose process was killed (SIGKILL) at
//! random moments while it ingested — after each, every acknowledged record is there
//! exactly once, nothing else is, and index scans agree with full scans and an oracle.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;

use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::scan::ScanRequest;
use shoal_core::session::WriterBatch;
use shoal_core::table::{DurabilityPolicy, Table, TableConfig};
use shoal_core::FieldPath;

fn config(dir: &Path) -> TableConfig {
    let mut config = TableConfig::on_disk(dir);
    config.log.page_size_bits = 18;
    config.log.memory_budget_bytes = 8 << 18;
    config.log.pages_per_segment = 8;
    config.index_size_bits = 12;
    config
}

fn psfs() -> Vec<(&'static str, PsfSpec)> {
    vec![
        ("type", PsfSpec::Projection { field: "type".into() }),
        ("login", PsfSpec::Projection { field: "actor.login".into() }),
        ("opened_issues", PsfSpec::Predicate { expr: "type = 'IssuesEvent' AND payload.action = 'opened'".into() }),
        ("push_size", PsfSpec::range("payload.size", vec![1.0, 2.0, 5.0])),
    ]
}

fn ingest(table: &Table, lines: &[String]) {
    for chunk in lines.chunks(50) {
        let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
        table.ingest(&refs).expect("ingest");
    }
}

fn ids(table: &Table, filter: &str) -> (Vec<String>, Vec<String>) {
    common::planned_and_full_ids(table, filter)
}

/// Checks the table against the oracle over `records` for filters that use each PSF.
fn check_against_oracle(table: &Table, records: &[serde_json::Value]) {
    let mut filters = vec![
        "type = 'IssuesEvent' AND payload.action = 'opened'".to_owned(),
        "payload.size >= 2".to_owned(),
        "type = 'WatchEvent'".to_owned(),
    ];
    for record in records.iter().step_by(211).take(5) {
        if let Some(login) = record["actor"]["login"].as_str() {
            filters.push(format!("actor.login = '{}'", login.replace('\'', "''")));
        }
    }
    let mut indexed = 0;
    for filter in &filters {
        let expr = parse_expr(filter).expect("filter");
        let expected = common::oracle_ids(records, &expr);
        let (planned, full) = ids(table, filter);
        assert_eq!(full, expected, "full scan vs oracle: {filter}");
        assert_eq!(planned, expected, "planned scan vs oracle: {filter}");
        let request = ScanRequest { filter: Some(expr), ..ScanRequest::default() };
        indexed += usize::from(!table.plan(&request).index_scans.is_empty());
    }
    assert!(indexed >= 3, "only {indexed} filters used an index scan");
}

#[test]
fn reopened_table_has_every_record_psf_and_chain() {
    let Some(lines) = common::github_events(2_400) else { return };
    let records: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).expect("json")).collect();
    let dir = tempfile::tempdir().expect("dir");
    let (first_register, deregistered_at);
    {
        let table = Table::create(config(dir.path())).expect("create");
        ingest(&table, &lines[..600]);
        for (name, spec) in psfs() {
            table.register_psf(name, &spec).expect("register");
        }
        first_register = table.psfs().all()[0].safe_register_address();
        ingest(&table, &lines[600..1_200]);
        deregistered_at = table.deregister_psf("login").expect("deregister").safe_deregister_address();
        ingest(&table, &lines[1_200..1_600]);
        table.close().expect("close");
    }
    assert!(Table::create(config(dir.path())).is_err(), "create refuses a directory that holds a table");

    let (table, report) = Table::open(config(dir.path())).expect("open");
    assert_eq!(report.records, 1_600, "{report:?}");
    assert!(report.checkpoint_used, "{report:?}");
    assert_eq!(report.schema_bytes_inferred, 0, "the checkpoint covered every page: {report:?}");
    assert!(report.index_checkpoint.is_some() && report.first_page_replayed > 0, "{report:?}");
    assert_eq!(report.pages_replayed, 0, "a clean close leaves nothing to replay: {report:?}");
    assert!(report.corrupt_page.is_none());
    assert_eq!(table.stats().records, 1_600);
    let recovered = table.psfs().all();
    assert_eq!(recovered.len(), 4);
    assert_eq!(recovered[0].safe_register_address(), first_register);
    assert_eq!(recovered[1].coverage().map(|c| c.1), Some(deregistered_at), "deregistration survives");
    assert!(recovered.iter().all(|p| p.key_pointer_count() > 0));
    assert!(table.schema().arrow_field(&FieldPath::parse("actor.login").expect("path")).is_some());
    check_against_oracle(&table, &records[..1_600]);

    // Ingestion continues after the recovered log, and chains join old and new records.
    ingest(&table, &lines[1_600..]);
    table.register_psf("login", &psfs()[1].1).expect("register again");
    check_against_oracle(&table, &records);
    table.close().expect("close");
    let (table, report) = Table::open(config(dir.path())).expect("reopen");
    assert_eq!(report.records, lines.len() as u64);
    check_against_oracle(&table, &records);
}

/// Regression: a checkpoint taken while the first page was still open covers no record
/// (`schema_observed_until` = the first address); after a crash, recovery must infer the
/// schema and count the records of that page again.
#[test]
fn crash_after_checkpoint_of_an_open_page_keeps_schema_and_counts() {
    let dir = tempfile::tempdir().expect("dir");
    let lines: Vec<String> = (0..2_000).map(|i| format!(r#"{{"id": {i}, "name": "n{i}"}}"#)).collect();
    {
        let table = Table::create(config(dir.path())).expect("create");
        // 2,000 records of ~30 bytes stay within the first 256 KiB page.
        ingest(&table, &lines);
        let state = table.checkpoint().expect("checkpoint");
        assert!(state.log_end_address.get() < 1 << 18, "the records fill part of one page: {state:?}");
        // A crash: no close.
    }
    let (table, report) = Table::open(config(dir.path())).expect("open");
    assert_eq!(report.records, 2_000, "{report:?}");
    assert_eq!(table.stats().records, 2_000);
    let id = FieldPath::parse("id").expect("path");
    assert!(table.schema().arrow_field(&id).is_some(), "the schema lost `id`: {report:?}");
    let request = ScanRequest { columns: vec![id], ..ScanRequest::default() };
    let (batches, _) = table.scan(&request).expect("scan");
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2_000);
    // A second crash after a second checkpoint, now of a recovered table.
    table.checkpoint().expect("checkpoint again");
    drop(table);
    let (table, report) = Table::open(config(dir.path())).expect("reopen");
    assert_eq!(report.records, 2_000, "{report:?}");
    assert!(table.schema().arrow_field(&FieldPath::parse("name").expect("path")).is_some());
}

#[test]
fn damaged_last_page_is_cut_off_and_reported() {
    let Some(lines) = common::github_events(800) else { return };
    let dir = tempfile::tempdir().expect("dir");
    let table = Table::create(config(dir.path())).expect("create");
    for (name, spec) in psfs() {
        table.register_psf(name, &spec).expect("register");
    }
    ingest(&table, &lines[..200]);
    let checkpoint = table.checkpoint().expect("checkpoint");
    // Pages written after the checkpoint, then a "crash" (no close).
    ingest(&table, &lines[200..]);
    table.flush().expect("flush");
    let page_size = 1u64 << 18;
    let last_page = (table.log().tail_address().get() - 1) / page_size - 1;
    assert!(last_page > checkpoint.log_end_address.get() / page_size, "the damaged page comes after the checkpoint");
    drop(table);
    // Flip one byte in the middle of the last written page.
    let segment = dir.path().join(format!("segment-{:08}.log", last_page / 8));
    let mut bytes = std::fs::read(&segment).expect("segment");
    let at = ((last_page % 8) * page_size + page_size / 2) as usize;
    bytes[at] ^= 0x5a;
    std::fs::write(&segment, &bytes).expect("write");

    let (table, report) = Table::open(config(dir.path())).expect("open");
    let (page, reason) = report.corrupt_page.clone().expect("the damaged page is reported");
    assert_eq!(page, last_page);
    assert!(reason.contains("checksum"), "{reason}");
    assert!(report.bytes_cut >= page_size, "{report:?}");
    assert!(report.index_checkpoint.is_some(), "replay began at the checkpoint: {report:?}");
    let kept = usize::try_from(report.records).expect("count");
    assert!(kept > 0 && kept < lines.len(), "{report:?}");
    // The records before the damaged page are exactly the first `kept` lines.
    let records: Vec<serde_json::Value> = lines[..kept].iter().map(|l| serde_json::from_str(l).expect("json")).collect();
    check_against_oracle(&table, &records);
    ingest(&table, &lines[kept..]);
    let all: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).expect("json")).collect();
    check_against_oracle(&table, &all);
}

/// The child side of the crash test (runs only when `SHOAL_CRASH_CHILD` names a
/// directory): ingests events with unique ids forever, flushing every few batches and
/// printing `durable N` once the first N events are on disk.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os("SHOAL_CRASH_CHILD") else { return };
    let lines = common::github_events(usize::MAX).expect("events");
    let dir = Path::new(&dir);
    let table = if dir.join("table.json").exists() {
        Table::open(config(dir)).expect("open").0
    } else {
        let table = Table::create(config(dir)).expect("create");
        for (name, spec) in psfs() {
            table.register_psf(name, &spec).expect("register");
        }
        table
    };
    let mut next: u64 = std::env::var("SHOAL_CRASH_FIRST_ID").expect("first id").parse().expect("number");
    let mut batch = 0u64;
    loop {
        let records: Vec<String> = (0..40)
            .map(|i| {
                let line = &lines[((next + i) as usize) % lines.len()];
                let body = line.split_once(',').map_or("", |(_, rest)| rest);
                format!("{{\"id\":\"crash-{}\",{body}", next + i)
            })
            .collect();
        let refs: Vec<&[u8]> = records.iter().map(String::as_bytes).collect();
        table.ingest(&refs).expect("ingest");
        next += 40;
        batch += 1;
        if batch.is_multiple_of(7) {
            table.flush().expect("flush");
            println!("durable {next}");
        }
    }
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_record() {
    if common::github_events(1).is_none() {
        return;
    }
    let kills: usize = std::env::var("SHOAL_CRASH_KILLS").ok().and_then(|k| k.parse().ok()).unwrap_or(30);
    let dir = tempfile::tempdir().expect("dir");
    // Ids on disk after the previous round: 0..present_end, each exactly once.
    let mut present_end = 0u64;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut total_replayed = 0u64;
    for round in 0..kills {
        let first_id = present_end;
        // xorshift: kill after 0-5 acknowledged flushes, at a random moment after that.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let output = run_and_kill(
            "crash_child",
            &[("SHOAL_CRASH_CHILD", dir.path().display().to_string()), ("SHOAL_CRASH_FIRST_ID", first_id.to_string())],
            seed % 6,
            std::time::Duration::from_micros((seed >> 8) % 20_000),
        );
        let acknowledged = output
            .iter()
            .filter_map(|line| line.strip_prefix("durable ").map(|n| n.parse::<u64>().expect("count")))
            .max()
            .unwrap_or(first_id);
        let (table, report) = Table::open(config(dir.path())).expect("recovery");
        total_replayed += report.bytes_replayed;
        let (present, _) = ids(&table, "id LIKE 'crash-%'");
        let mut numbers: Vec<u64> = present.iter().map(|i| i["crash-".len()..].parse().expect("number")).collect();
        numbers.sort_unstable();
        // The durable log is a prefix and one thread wrote ids in order: the ids present
        // are 0..end, each once — no duplicate, no gap, nothing that was never sent.
        let end = numbers.len() as u64;
        assert!(
            numbers.iter().copied().eq(0..end),
            "round {round}: ids present are not 0..{end} exactly once ({report:?})"
        );
        assert!(end >= present_end, "round {round}: records of earlier rounds were lost ({report:?})");
        assert!(end >= acknowledged, "round {round}: acknowledged {acknowledged} records, {end} present ({report:?})");
        // Chains agree with full scans after recovery.
        for ty in ["PushEvent", "WatchEvent", "IssuesEvent"] {
            let (planned, full) = ids(&table, &format!("type = '{ty}'"));
            assert_eq!(planned, full, "round {round}: type = {ty}");
        }
        present_end = end;
        table.close().expect("close after check");
    }
    assert!(present_end > 0, "no record survived any round");
    eprintln!("{kills} kills; {present_end} records survived; {total_replayed} bytes replayed in total");
}

/// Events with ids `crash-{writer}-{serial}-{i}` for batch `serial` of `writer`.
fn writer_batch(lines: &[String], writer: &str, serial: u64, size: usize) -> Vec<String> {
    (0..size)
        .map(|i| {
            let line = &lines[(serial as usize * size + i) % lines.len()];
            let body = line.split_once(',').map_or("", |(_, rest)| rest);
            format!("{{\"id\":\"crash-{writer}-{serial}-{i}\",{body}")
        })
        .collect()
}

const WRITERS: [&str; 2] = ["a", "b"];
const WRITER_BATCH: usize = 20;

/// The child side of the writer-session crash test (runs only when
/// `SHOAL_SESSION_CHILD` names a directory): two threads, writers `a` and `b`, ingest
/// batches with serial numbers into an `fsync` table, resuming after the serial the
/// table reports; every few batches each makes its batch durable and prints
/// `durable WRITER SERIAL`. A third thread takes a fuzzy checkpoint every 15 ms.
#[test]
fn session_child() {
    let Some(dir) = std::env::var_os("SHOAL_SESSION_CHILD") else { return };
    let lines = common::github_events(usize::MAX).expect("events");
    let dir = Path::new(&dir);
    let config = config(dir).with_durability(DurabilityPolicy::Fsync);
    let table = if dir.join("table.json").exists() {
        Table::open(config).expect("open").0
    } else {
        let table = Table::create(config).expect("create");
        table.register_psf("type", &psfs()[0].1).expect("register");
        table
    };
    std::thread::scope(|scope| {
        // Fuzzy checkpoints while both writers ingest: recovery then starts from them.
        scope.spawn(|| loop {
            std::thread::sleep(std::time::Duration::from_millis(15));
            table.checkpoint().expect("checkpoint");
        });
        for writer in WRITERS {
            let (table, lines) = (&table, &lines);
            scope.spawn(move || {
                let mut serial = table.writer_status(writer).last_serial.unwrap_or(0) + 1;
                loop {
                    let batch = writer_batch(lines, writer, serial, WRITER_BATCH);
                    let refs: Vec<&[u8]> = batch.iter().map(String::as_bytes).collect();
                    let report = table.ingest_as(WriterBatch { writer, serial }, &refs).expect("ingest");
                    assert!(!report.duplicate);
                    if serial % 5 == 0 {
                        table.wait_durable(report.last_address + 1, std::time::Duration::from_secs(30)).expect("durable");
                        assert!(table.writer_status(writer).last_durable_serial >= Some(serial));
                        println!("durable {writer} {serial}");
                    }
                    serial += 1;
                }
            });
        }
    });
}

#[test]
fn writer_batches_survive_sigkill_exactly_once_and_whole() {
    let Some(lines) = common::github_events(usize::MAX) else { return };
    let kills: usize = std::env::var("SHOAL_CRASH_KILLS").ok().and_then(|k| k.parse().ok()).unwrap_or(30);
    let dir = tempfile::tempdir().expect("dir");
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut cuts = 0;
    let mut from_index_checkpoint = 0;
    for round in 0..kills {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let output = run_and_kill(
            "session_child",
            &[("SHOAL_SESSION_CHILD", dir.path().display().to_string())],
            seed % 8,
            std::time::Duration::from_micros((seed >> 8) % 5_000),
        );
        let mut acknowledged: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for line in &output {
            let mut parts = line.split(' ');
            if let (Some("durable"), Some(writer), Some(serial)) = (parts.next(), parts.next(), parts.next()) {
                let entry = acknowledged.entry(writer.to_owned()).or_default();
                *entry = (*entry).max(serial.parse().expect("serial"));
            }
        }
        let (table, report) = Table::open(config(dir.path())).expect("recovery");
        cuts += usize::from(report.cut_address.is_some());
        from_index_checkpoint += usize::from(report.index_checkpoint.is_some());
        let (present, _) = ids(&table, "id LIKE 'crash-%'");
        for writer in WRITERS {
            let last = table.writer_status(writer).last_serial.unwrap_or(0);
            let acked = acknowledged.get(writer).copied().unwrap_or(0);
            assert!(last >= acked, "round {round}: writer {writer} acknowledged serial {acked}, recovered {last} ({report:?})");
            // Exactly the whole batches 1..=last of this writer, each record once.
            let mut expected: Vec<String> =
                (1..=last).flat_map(|s| (0..WRITER_BATCH).map(move |i| format!("crash-{writer}-{s}-{i}"))).collect();
            expected.sort();
            let prefix = format!("crash-{writer}-");
            let mine: Vec<&String> = present.iter().filter(|id| id.starts_with(&prefix)).collect();
            assert_eq!(mine.len(), expected.len(), "round {round}: writer {writer}, last serial {last} ({report:?})");
            assert!(mine.iter().zip(&expected).all(|(a, b)| *a == b), "round {round}: writer {writer} records differ");
        }
        let (planned, full) = ids(&table, "type = 'PushEvent'");
        assert_eq!(planned, full, "round {round}: chains agree with a full scan");
        table.close().expect("close");
    }
    let _ = lines;
    eprintln!("{kills} kills, {cuts} recoveries cut an unfinished writer batch, {from_index_checkpoint} started from a fuzzy index checkpoint");
    assert!(from_index_checkpoint > 0, "no recovery used an index checkpoint");
}

/// Runs the test `child` of this test binary with `env`, lets it print `lines_first`
/// lines, waits `then`, kills it with SIGKILL (asserting it did not end by itself) and
/// returns every line it printed before it died.
fn run_and_kill(child: &str, env: &[(&str, String)], lines_first: u64, then: std::time::Duration) -> Vec<String> {
    let mut process = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", child, "--nocapture", "--test-threads", "1"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("child");
    let mut lines = BufReader::new(process.stdout.take().expect("stdout")).lines();
    let mut output = Vec::new();
    for _ in 0..lines_first {
        match lines.next() {
            Some(Ok(line)) => output.push(line),
            _ => break,
        }
    }
    std::thread::sleep(then);
    process.kill().expect("kill");
    output.extend(lines.map_while(std::result::Result::ok));
    let status = process.wait().expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{child} ended by itself ({status}) instead of being killed"
    );
    output
}
