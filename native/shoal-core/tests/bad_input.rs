//! Invalid JSON never reaches the log and never disturbs what is already there (a record
//! is accepted iff it is exactly one JSON value: docs/design.md, "Parser"), checked with
//! every file of JSONTestSuite (<https://github.com/nst/JSONTestSuite>, `test_parsing/`):
//! `n_*` files must be rejected, `y_*` files accepted, `i_*` files (implementation
//! defined) may go either way but must not panic.
//!
//! The suite is found through `$SHOAL_JSON_TEST_SUITE` or at
//! `../shared/data/JSONTestSuite/test_parsing` next to the repository. Without it the
//! tests print a SKIPPED line and pass, unless `SHOAL_REQUIRE_DATA=1`.

use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use shoal_core::log::FIRST_ADDRESS;
use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::record::RecordView;
use shoal_core::scan::{LogRange, ScanPlan, ScanRequest};
use shoal_core::table::{InvalidJsonPolicy, Table, TableConfig};
use shoal_core::{Error, FieldPath, LogAddress};

/// Records written before the suite's files, each with a unique `shoal_marker`.
const EARLIER: i64 = 100;

fn suite_dir() -> Option<PathBuf> {
    let from_env = std::env::var_os("SHOAL_JSON_TEST_SUITE").map(PathBuf::from);
    let default = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/JSONTestSuite/test_parsing");
    if let Some(dir) = from_env.as_ref().filter(|d| !d.is_dir()) {
        eprintln!("SHOAL_JSON_TEST_SUITE={} is not a directory", dir.display());
    }
    let found = from_env.into_iter().chain([default.clone()]).find(|dir| dir.is_dir());
    if found.is_none() {
        let message = format!(
            "JSONTestSuite not found (set SHOAL_JSON_TEST_SUITE to its test_parsing directory; default {})",
            default.display()
        );
        assert!(std::env::var("SHOAL_REQUIRE_DATA").as_deref() != Ok("1"), "{message}");
        eprintln!("\n!!!!!!!! SKIPPED: {message} !!!!!!!!\n");
    }
    found
}

/// `(file name, bytes)` of every `.json` file, sorted by name.
fn suite_files() -> Option<Vec<(String, Vec<u8>)>> {
    let dir = suite_dir()?;
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path())
        .filter(|path| path.extension().is_some_and(|x| x == "json"))
        .map(|path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (name, bytes)
        })
        .collect();
    files.sort();
    assert!(files.len() > 250, "only {} files in {}", files.len(), dir.display());
    Some(files)
}

fn table_with_kind_psf(policy: InvalidJsonPolicy) -> Arc<Table> {
    let config = TableConfig { on_invalid_json: policy, index_size_bits: 12, ..TableConfig::in_memory(64 << 20) };
    let table = Table::create(config).expect("table");
    table.register_psf("kind", &PsfSpec::Projection { field: "kind".into() }).expect("PSF");
    table
}

fn ingest_earlier(table: &Table) {
    let records: Vec<String> = (0..EARLIER)
        .map(|i| format!(r#"{{"shoal_marker": {i}, "kind": "k{}", "text": "earlier \"record\" {i}"}}"#, i % 5))
        .collect();
    let refs: Vec<&[u8]> = records.iter().map(String::as_bytes).collect();
    assert_eq!(table.ingest(&refs).expect("earlier records").records, refs.len());
}

/// Runs a scan of `[from, to)` for `filter` and `columns` (empty: every top-level
/// field): as planned (which must be one index scan covering the range) or, with
/// `full`, as a forced full scan. Returns the batches.
fn scan(table: &Table, filter: Option<&str>, columns: &[&str], range: (LogAddress, LogAddress), full: bool) -> Vec<RecordBatch> {
    let request = ScanRequest {
        filter: filter.map(|f| parse_expr(f).expect("filter")),
        columns: columns.iter().map(|c| FieldPath::parse(c).expect("path")).collect(),
        from_address: range.0,
        to_address: range.1,
        ..ScanRequest::default()
    };
    let mut plan = table.plan(&request);
    if full {
        let stats = table.stats();
        let (from, to) = (range.0.max(stats.begin_address), range.1.min(stats.tail_address));
        plan = ScanPlan {
            index_scans: Vec::new(),
            full_scans: vec![LogRange { from, to }],
            columnar_scans: Vec::new(),
            reason: "forced full scan".into(),
            ..plan
        };
    } else {
        assert_eq!(plan.index_scans.len(), 1, "the PSF serves {filter:?}: {plan:?}");
        assert!(plan.full_scans.is_empty(), "the PSF covers every record: {plan:?}");
    }
    let mut batches: Vec<RecordBatch> = Vec::new();
    table
        .scan_with_plan(&request, &plan, &mut |batch| {
            batches.push(batch);
            Ok(ControlFlow::Continue(()))
        })
        .expect("scan");
    batches
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// Every non-null `shoal_marker` the scan returns, sorted.
fn scan_markers(table: &Table, filter: Option<&str>, full: bool) -> Vec<i64> {
    let batches = scan(table, filter, &["shoal_marker"], (LogAddress::ZERO, LogAddress::MAX), full);
    let mut markers = Vec::new();
    for batch in &batches {
        let column = batch.column(0).as_any().downcast_ref::<Int64Array>().expect("shoal_marker is Int64");
        markers.extend((0..column.len()).filter(|&i| column.is_valid(i)).map(|i| column.value(i)));
    }
    markers.sort_unstable();
    markers
}

/// The payloads of every visible record in the log, read page by page.
fn stored_payloads(table: &Table) -> Vec<Vec<u8>> {
    let log = table.log();
    let mut payloads = Vec::new();
    let mut page_bytes = Vec::new();
    for page in log.page_of(log.begin_address())..=log.page_of(log.tail_address()) {
        let Some(end) = log.read_page(page, &mut page_bytes).expect("page") else { continue };
        let mut offset = if page == 0 { FIRST_ADDRESS as usize } else { 0 };
        while offset + 8 <= end {
            let Some(view) = RecordView::new(&page_bytes[offset..end]) else { break };
            let header = view.header();
            if header.is_filler() || header.is_empty() {
                break;
            }
            if header.is_visible() {
                payloads.push(view.payload().to_vec());
            }
            offset += header.size();
        }
    }
    payloads
}

fn show(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(60)]).into_owned();
    if bytes.len() > 60 {
        format!("{text:?}… ({} bytes)", bytes.len())
    } else {
        format!("{text:?}")
    }
}

#[test]
fn json_test_suite_rejects_invalid_records_and_keeps_earlier_ones_intact() {
    let Some(files) = suite_files() else { return };
    let table = table_with_kind_psf(InvalidJsonPolicy::Reject);
    ingest_earlier(&table);

    let mut failures: Vec<String> = Vec::new();
    let (mut accepted, mut rejected) = (0u64, 0u64);
    let mut implementation_defined = Vec::new();
    for (name, bytes) in &files {
        let before = table.stats().records;
        let outcome = catch_unwind(AssertUnwindSafe(|| table.ingest(&[bytes.as_slice()])));
        let after = table.stats().records;
        let kind = name.as_bytes()[0];
        let actual = match &outcome {
            Err(_) => "a panic".to_owned(),
            Ok(Ok(report)) => format!("accepted ({} record written)", report.records),
            Ok(Err(e)) => format!("{e:?}"),
        };
        match &outcome {
            Ok(Ok(report)) if report.records == 1 && after == before + 1 => accepted += 1,
            Ok(Err(Error::InvalidRecord { index: 0, reason })) if !reason.is_empty() && after == before => rejected += 1,
            _ => {}
        }
        let ok = match (kind, &outcome) {
            (_, Err(_)) => false,
            (b'n', Ok(Err(Error::InvalidRecord { index: 0, reason }))) => !reason.is_empty() && after == before,
            (b'y', Ok(Ok(report))) => report.records == 1 && after == before + 1,
            (b'i', Ok(Ok(report))) => report.records == 1 && after == before + 1,
            (b'i', Ok(Err(Error::InvalidRecord { index: 0, reason }))) => !reason.is_empty() && after == before,
            _ => false,
        };
        if kind == b'i' {
            implementation_defined.push(format!("{name}: {actual}"));
        }
        if !ok {
            let expected = match kind {
                b'n' => "rejected with Error::InvalidRecord { index: 0, reason: <non-empty> }, nothing written",
                b'y' => "accepted, one record written",
                _ => "accepted or rejected with Error::InvalidRecord { index: 0, .. }, no panic",
            };
            failures.push(format!(
                "{name} {}: expected {expected}; actual {actual} (records {before} -> {after})",
                show(bytes)
            ));
        }
    }
    eprintln!("implementation-defined files:\n  {}", implementation_defined.join("\n  "));
    eprintln!("JSONTestSuite through Table::ingest: {} files, {accepted} accepted, {rejected} rejected", files.len());

    // The earlier records are untouched: through the PSF's chains and by full scans.
    let expected_k3: Vec<i64> = (0..EARLIER).filter(|i| i % 5 == 3).collect();
    let by_index = scan_markers(&table, Some("kind = 'k3'"), false);
    if by_index != expected_k3 {
        failures.push(format!("index scan of kind = 'k3': expected markers {expected_k3:?}; actual {by_index:?}"));
    }
    let by_full = scan_markers(&table, Some("kind = 'k3'"), true);
    if by_full != expected_k3 {
        failures.push(format!("full scan of kind = 'k3': expected markers {expected_k3:?}; actual {by_full:?}"));
    }
    let all_earlier: Vec<i64> = (0..EARLIER).collect();
    let markers = scan_markers(&table, Some("shoal_marker >= 0"), true);
    if markers != all_earlier {
        failures.push(format!("full scan of shoal_marker >= 0: expected 0..{EARLIER}; actual {markers:?}"));
    }
    let expected_records = EARLIER as u64 + accepted;
    let records = table.stats().records;
    if records != expected_records {
        failures.push(format!("record count: expected {EARLIER} earlier + {accepted} accepted = {expected_records}; actual {records}"));
    }
    let payloads = stored_payloads(&table);
    if payloads.len() as u64 != expected_records {
        failures.push(format!("visible records in the log: expected {expected_records}; actual {}", payloads.len()));
    }
    assert!(failures.is_empty(), "{} failures:\n  {}", failures.len(), failures.join("\n  "));
}

#[test]
fn skip_policy_writes_exactly_the_valid_records_of_a_mixed_batch() {
    let Some(files) = suite_files() else { return };
    let valid: Vec<&(String, Vec<u8>)> = files.iter().filter(|(name, _)| name.starts_with("y_")).collect();
    let invalid: Vec<&(String, Vec<u8>)> = files.iter().filter(|(name, _)| name.starts_with("n_")).collect();
    // Interleave: y, n, y, n, … then the rest of the longer list.
    let mut batch: Vec<&(String, Vec<u8>)> = Vec::new();
    for i in 0..valid.len().max(invalid.len()) {
        batch.extend(valid.get(i).copied());
        batch.extend(invalid.get(i).copied());
    }
    let records: Vec<&[u8]> = batch.iter().map(|(_, bytes)| bytes.as_slice()).collect();

    let table = table_with_kind_psf(InvalidJsonPolicy::Skip);
    ingest_earlier(&table);
    let report = table.ingest(&records).expect("a Skip batch does not fail on invalid JSON");

    let mut failures = Vec::new();
    if report.records != valid.len() || report.skipped != invalid.len() {
        failures.push(format!(
            "report: expected {} written and {} skipped; actual {} written and {} skipped",
            valid.len(),
            invalid.len(),
            report.records,
            report.skipped
        ));
    }
    let valid_bytes: usize = valid.iter().map(|(_, b)| b.len()).sum();
    if report.payload_bytes != valid_bytes {
        failures.push(format!("payload bytes: expected {valid_bytes}; actual {}", report.payload_bytes));
    }
    for (index, reason) in &report.skipped_examples {
        let (name, _) = batch[*index];
        if !name.starts_with("n_") || reason.is_empty() {
            failures.push(format!("skipped example {index} is {name} with reason {reason:?}"));
        }
    }
    let stats = table.stats();
    if stats.records != EARLIER as u64 + valid.len() as u64 || stats.skipped_records != invalid.len() as u64 {
        failures.push(format!(
            "stats: expected {} records and {} skipped; actual {} and {}",
            EARLIER as usize + valid.len(),
            invalid.len(),
            stats.records,
            stats.skipped_records
        ));
    }
    // The log holds the earlier records and exactly the y_ files, byte for byte.
    let stored = stored_payloads(&table);
    let mut written: Vec<Vec<u8>> = stored[EARLIER as usize..].to_vec();
    let mut expected: Vec<Vec<u8>> = valid.iter().map(|(_, b)| b.clone()).collect();
    written.sort();
    expected.sort();
    if written != expected {
        let missing: Vec<&str> =
            valid.iter().filter(|(_, b)| !written.contains(b)).map(|(n, _)| n.as_str()).collect();
        let extra: Vec<String> = written.iter().filter(|b| !expected.contains(b)).map(|b| show(b)).collect();
        failures.push(format!("stored payloads differ from the y_ files: missing {missing:?}, unexpected {extra:?}"));
    }
    let markers = scan_markers(&table, Some("shoal_marker >= 0"), true);
    if markers != (0..EARLIER).collect::<Vec<_>>() {
        failures.push(format!("earlier records after the mixed batch: {markers:?}"));
    }
    assert!(failures.is_empty(), "{} failures:\n  {}", failures.len(), failures.join("\n  "));
}

// ---------------------------------------------------------------------------------------
// Checks that can abort the process (a stack overflow is not a panic) run in a child
// process: the public test re-runs this binary on an `#[ignore]`d twin and reports the
// child's exit status and its last `step:` line, so a crash fails one test with a
// precise message instead of killing the whole test binary.
// ---------------------------------------------------------------------------------------

/// Runs the ignored test `name` of this binary in a child process.
fn run_in_child_process(name: &str) {
    let exe = std::env::current_exe().expect("the test binary");
    let output = std::process::Command::new(exe)
        .args([name, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("spawn the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if std::env::var_os("SHOAL_BAD_INPUT_VERBOSE").is_some() {
        eprint!("{stderr}");
    }
    let last_step = stderr.lines().filter_map(|l| l.strip_prefix("step: ")).next_back().unwrap_or("(none)");
    // The child's panic message (its list of failures), else the last lines (an abort).
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("step: ")).collect();
    let from = lines.iter().rposition(|l| l.contains("panicked at")).unwrap_or(lines.len().saturating_sub(10));
    let tail = lines[from..].iter().take(200).copied().collect::<Vec<_>>().join("\n    ");
    assert!(
        output.status.success(),
        "{name} failed in its child process ({}) during step: {last_step}\n  child stderr (last lines):\n    {tail}",
        output.status
    );
    assert!(stdout.contains("1 passed"), "the child process ran no test:\n{stdout}");
}

/// The schema and a flush (schema inference of the closed page on the flush thread);
/// then, for every record, a scan of its own log range (one step each, so that a crash
/// names the record); then unfiltered scans of the whole table.
fn schema_flush_then_scan_each_record(table: &Table, records: &[(String, LogAddress)], failures: &mut Vec<String>) {
    eprintln!("step: Table::schema()");
    let _ = table.schema();
    eprintln!("step: Table::flush() (schema inference of the closed page on the flush thread)");
    table.flush().expect("flush");
    for (name, address) in records {
        eprintln!("step: unfiltered full scan (column shoal_marker) of the record of {name} at address {address}");
        // Records are 8-byte aligned and at least 24 bytes long: [address, address + 8)
        // holds exactly this record.
        let found = rows(&scan(table, None, &["shoal_marker"], (*address, *address + 8), true));
        if found != 1 {
            failures.push(format!("{name}: an unfiltered scan of its address returned {found} rows, expected 1"));
        }
    }
    let total = table.stats().records as usize;
    eprintln!("step: unfiltered full scan (column shoal_marker) of the whole table");
    let found = rows(&scan(table, None, &["shoal_marker"], (LogAddress::ZERO, LogAddress::MAX), true));
    if found != total {
        failures.push(format!("unfiltered full scan: expected {total} rows, one per record; actual {found}"));
    }
    eprintln!("step: unfiltered full scan of every top-level column");
    let found = rows(&scan(table, None, &[], (LogAddress::ZERO, LogAddress::MAX), true));
    if found != total {
        failures.push(format!("unfiltered full scan of every column: expected {total} rows; actual {found}"));
    }
    eprintln!("step: done");
}

#[test]
fn every_accepted_file_survives_schema_flush_and_unfiltered_scans() {
    run_in_child_process("child_every_accepted_file_survives_schema_flush_and_unfiltered_scans");
}

#[test]
#[ignore = "run in a child process by every_accepted_file_survives_schema_flush_and_unfiltered_scans"]
fn child_every_accepted_file_survives_schema_flush_and_unfiltered_scans() {
    let Some(files) = suite_files() else { return };
    let table = table_with_kind_psf(InvalidJsonPolicy::Reject);
    ingest_earlier(&table);
    let accepted: Vec<(String, LogAddress)> = files
        .iter()
        .filter_map(|(name, bytes)| table.ingest(&[bytes.as_slice()]).ok().map(|r| (name.clone(), r.first_address)))
        .collect();
    let mut failures = Vec::new();
    schema_flush_then_scan_each_record(&table, &accepted, &mut failures);
    assert!(failures.is_empty(), "{} failures:\n  {}", failures.len(), failures.join("\n  "));
}

#[test]
fn deeply_nested_records_never_crash_ingestion_flush_or_scans() {
    run_in_child_process("child_deeply_nested_records_never_crash_ingestion_flush_or_scans");
}

#[test]
#[ignore = "run in a child process by deeply_nested_records_never_crash_ingestion_flush_or_scans"]
fn child_deeply_nested_records_never_crash_ingestion_flush_or_scans() {
    const DEPTH: usize = 100_000;
    let arrays = format!("{}{}", "[".repeat(DEPTH), "]".repeat(DEPTH));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(DEPTH), "}".repeat(DEPTH));
    let inside = format!(r#"{{"shoal_marker": 7, "kind": "deep", "deep": {arrays}}}"#);
    let cases = [
        (format!("{DEPTH} nested arrays"), arrays.clone()),
        (format!("{DEPTH} nested objects"), objects),
        (format!("an object holding {DEPTH} nested arrays"), inside),
    ];
    let table = table_with_kind_psf(InvalidJsonPolicy::Reject);
    table.register_psf("a_a", &PsfSpec::Projection { field: "a.a".into() }).expect("PSF");
    ingest_earlier(&table);
    let mut failures = Vec::new();
    let mut accepted = Vec::new();
    for (name, record) in &cases {
        eprintln!("step: ingest {name}");
        match table.ingest(&[record.as_bytes()]) {
            Ok(report) => accepted.push((name.clone(), report.first_address)),
            Err(Error::InvalidRecord { index: 0, reason }) if !reason.is_empty() => {
                eprintln!("{name}: rejected ({reason})");
            }
            Err(e) => failures.push(format!("{name}: expected acceptance or InvalidRecord; actual {e:?}")),
        }
    }
    eprintln!("accepted: {:?}", accepted.iter().map(|(n, _)| n).collect::<Vec<_>>());
    schema_flush_then_scan_each_record(&table, &accepted, &mut failures);
    assert!(failures.is_empty(), "{} failures:\n  {}", failures.len(), failures.join("\n  "));
}

/// The flush thread infers the schema of log records with `observe_validated` (one pass,
/// trusting that the ingest parser validated them): on every file of the suite that is
/// valid JSON it must infer exactly what the general `observe` infers.
#[test]
fn the_log_records_fast_inference_agrees_with_observe_on_every_valid_file() {
    let Some(files) = suite_files() else { return };
    let mut compared = 0;
    for (name, bytes) in &files {
        let mut general = shoal_core::schema::InferredSchema::new();
        if !general.observe(bytes) {
            continue;
        }
        let mut fast = shoal_core::schema::InferredSchema::new();
        assert!(fast.observe_validated(bytes), "{name}");
        assert_eq!(serde_json::to_string(&fast).unwrap(), serde_json::to_string(&general).unwrap(), "{name}: {}", show(bytes));
        compared += 1;
    }
    assert!(compared > 90, "only {compared} valid files");
}

/// Regression: one record with a top-level key that needs quoting in a path (`a.b`,
/// `foo bar`, the empty key) made every query without columns fail ("Record batch schema
/// does not match input schema"): the announced schema named the column by its key, the
/// batches by the quoted path. Both now name it by the key.
#[test]
fn keys_that_need_quoting_do_not_break_whole_record_scans() {
    let table = Table::create(TableConfig::in_memory(16 << 20)).expect("table");
    table
        .ingest(&[br#"{"id": 1}"#, br#"{"a.b": 2}"#, br#"{"foo bar": 3, "id": 4}"#, br#"{"": 5}"#, br#"{"\"q\"": 6}"#])
        .expect("ingest");
    let announced = table.output_columns(&[]).expect("columns");
    let names: Vec<&str> = announced.iter().map(|(_, f)| f.name().as_str()).collect();
    assert_eq!(names, ["id", "a.b", "foo bar", "", "\"q\""]);
    let (batches, _) = table.scan(&ScanRequest::default()).expect("whole-record scan");
    assert_eq!(rows(&batches), 5);
    for batch in &batches {
        let schema = batch.schema();
        let got: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(got, names);
    }
    // The announced schema is the batches' schema, so a stream of them can be sent as is.
    let schema = Arc::new(arrow_schema::Schema::new(announced.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>()));
    for batch in &batches {
        RecordBatch::try_new(Arc::clone(&schema), batch.columns().to_vec()).expect("batches match the announced schema");
    }
    // A requested path is named by its dotted text, and its values come out.
    let (batches, _) =
        table.scan(&ScanRequest { columns: vec![FieldPath::parse(r#""a.b""#).expect("path")], ..ScanRequest::default() }).expect("scan");
    assert_eq!(batches[0].schema().field(0).name(), r#""a.b""#);
    let values = batches[0].column(0).as_any().downcast_ref::<Int64Array>().expect("int64");
    assert_eq!(values.iter().flatten().collect::<Vec<_>>(), [2]);
}
