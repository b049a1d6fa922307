//! Small end-to-end checks of ingestion, PSFs and scans on one table.

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::scan::ScanRequest;
use shoal_core::table::{InvalidJsonPolicy, Table, TableConfig};
use shoal_core::{Error, FieldPath};

fn ids(batches: &[RecordBatch]) -> Vec<i64> {
    let mut out = Vec::new();
    for batch in batches {
        let column = batch.column(0).as_any().downcast_ref::<Int64Array>().expect("id is Int64");
        out.extend((0..column.len()).map(|i| column.value(i)));
    }
    out.sort_unstable();
    out
}

fn query(table: &Table, filter: &str) -> (Vec<i64>, shoal_core::scan::ScanPlan) {
    let request = ScanRequest {
        filter: Some(parse_expr(filter).unwrap()),
        columns: vec![FieldPath::parse("id").unwrap()],
        ..ScanRequest::default()
    };
    let plan = table.plan(&request);
    let (batches, _) = table.scan(&request).unwrap();
    (ids(&batches), plan)
}

#[test]
fn three_records_subset_scan_through_a_projection_psf() {
    let table = Table::create(TableConfig::in_memory(1 << 20)).unwrap();
    let records: [&[u8]; 3] = [
        br#"{"id": 1, "type": "PushEvent", "actor": {"login": "alice"}}"#,
        br#"{"id": 2, "type": "IssuesEvent", "actor": {"login": "bob"}}"#,
        br#"{"id": 3, "type": "PushEvent", "actor": {"login": "b\u006fb"}}"#,
    ];
    table.register_psf("login", &PsfSpec::Projection { field: "actor.login".into() }).unwrap();
    let report = table.ingest(&records).unwrap();
    assert_eq!(report.records, 3);
    let (found, plan) = query(&table, "actor.login = 'bob'");
    assert_eq!(found, vec![2, 3]);
    assert_eq!(plan.index_scans.len(), 1, "{plan:?}");
    assert!(plan.full_scans.is_empty(), "{plan:?}");
    let (found, plan) = query(&table, "type = 'PushEvent'");
    assert_eq!(found, vec![1, 3]);
    assert!(plan.index_scans.is_empty());
}

#[test]
fn records_before_registration_are_found_by_full_scan() {
    let table = Table::create(TableConfig::in_memory(1 << 20)).unwrap();
    table.ingest(&[br#"{"id": 1, "type": "A"}"#, br#"{"id": 2, "type": "B"}"#]).unwrap();
    table.register_psf("type", &PsfSpec::Projection { field: "type".into() }).unwrap();
    table.ingest(&[br#"{"id": 3, "type": "A"}"#, br#"{"id": 4, "type": "B"}"#]).unwrap();
    let (found, plan) = query(&table, "type = 'A'");
    assert_eq!(found, vec![1, 3]);
    assert_eq!(plan.index_scans.len(), 1);
    assert_eq!(plan.full_scans.len(), 1);
    assert_eq!(plan.full_scans[0].to, plan.index_scans[0].from);
}

#[test]
fn rejected_batch_writes_nothing_and_names_the_record() {
    let table = Table::create(TableConfig::in_memory(1 << 20)).unwrap();
    table.ingest(&[br#"{"id": 1}"#]).unwrap();
    let error = table.ingest(&[br#"{"id": 2}"#, br#"{"id": 3"#]).unwrap_err();
    assert!(matches!(error, Error::InvalidRecord { index: 1, .. }), "{error}");
    let (found, _) = query(&table, "id > 0");
    assert_eq!(found, vec![1]);
}

#[test]
fn skip_policy_counts_invalid_records() {
    let config = TableConfig { on_invalid_json: InvalidJsonPolicy::Skip, ..TableConfig::in_memory(1 << 20) };
    let table = Table::create(config).unwrap();
    let report = table.ingest(&[br#"{"id": 1}"#, b"nope", br#"{"id": 3}"#]).unwrap();
    assert_eq!((report.records, report.skipped), (2, 1));
    assert_eq!(report.skipped_examples[0].0, 1);
    assert_eq!(table.stats().skipped_records, 1);
}

#[test]
fn data_on_disk_is_scanned_through_chains_and_pages() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = TableConfig::on_disk(dir.path());
    config.log.page_size_bits = 12;
    config.log.memory_budget_bytes = 4 << 12;
    let table = Table::create(config).unwrap();
    table.register_psf("kind", &PsfSpec::Projection { field: "kind".into() }).unwrap();
    for chunk in 0..50 {
        let records: Vec<String> =
            (0..40).map(|i| format!(r#"{{"id": {}, "kind": "k{}", "pad": "{}"}}"#, chunk * 40 + i, i % 7, "x".repeat(i))).collect();
        let refs: Vec<&[u8]> = records.iter().map(String::as_bytes).collect();
        table.ingest(&refs).unwrap();
    }
    assert!(table.log().head_address() > shoal_core::LogAddress::ZERO, "pages were evicted to disk");
    let expected: Vec<i64> = (0..2000).filter(|i| i % 40 % 7 == 3).collect();
    let (found, plan) = query(&table, "kind = 'k3'");
    assert_eq!(plan.index_scans.len(), 1);
    assert_eq!(found, expected);
    let (found, _) = query(&table, "kind LIKE 'k3%'");
    assert_eq!(found, expected);
    let column = table.scan(&ScanRequest { columns: vec![FieldPath::parse("kind").unwrap()], limit: Some(5), ..ScanRequest::default() }).unwrap().0;
    let rows: usize = column.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, 5);
    assert!(column[0].column(0).as_any().downcast_ref::<StringArray>().is_some());
}

#[test]
fn schema_reflects_every_record_ingested_so_far() {
    let mut config = TableConfig::in_memory(64 << 12);
    config.log.page_size_bits = 12;
    let table = Table::create(config).unwrap();
    let records: Vec<String> = (0..2000).map(|i| format!(r#"{{"k{i}": {i}}}"#)).collect();
    for chunk in records.chunks(100) {
        let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
        table.ingest(&refs).unwrap();
    }
    let schema = table.schema();
    for i in 0..2000 {
        assert!(schema.arrow_field(&FieldPath::parse(&format!("k{i}")).unwrap()).is_some(), "k{i} missing");
    }
}

/// The tail of the log is observed incrementally between calls to `schema()`: each
/// record counts once, whether the flush thread merged its page or a call observed it,
/// and the result is what observing every record in order gives.
#[test]
fn schema_between_batches_counts_each_record_once_and_matches_a_fresh_observation() {
    let mut config = TableConfig::in_memory(64 << 12);
    config.log.page_size_bits = 12;
    let table = Table::create(config).unwrap();
    let records: Vec<String> = (0..1500)
        .map(|i| match i % 3 {
            0 => format!(r#"{{"k{}": {i}, "n": {{"a": "x"}}}}"#, i % 97),
            1 => format!(r#"{{"k{}": "s{i}", "n": {{"b": [1, 2]}}}}"#, i % 89),
            _ => format!(r#"{{"k{}": {i}.5, "n": null}}"#, i % 83),
        })
        .collect();
    let mut oracle = shoal_core::schema::InferredSchema::new();
    for (n, chunk) in records.chunks(37).enumerate() {
        let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
        table.ingest(&refs).unwrap();
        for record in chunk {
            assert!(oracle.observe(record.as_bytes()));
        }
        let schema = table.schema();
        assert_eq!(schema.record_count(), oracle.record_count(), "after chunk {n}");
        assert_eq!(schema.arrow_schema(), oracle.arrow_schema(), "after chunk {n}");
    }
    table.flush().unwrap();
    let schema = table.schema();
    assert_eq!(schema.record_count(), 1500);
    assert_eq!(schema.arrow_schema(), oracle.arrow_schema());
}

/// Regression: an in-memory table whose ring was smaller than the data evicted
/// acknowledged records (15,648 of 60,000 left, scans still "exact"). Now a batch that
/// does not fit is refused whole, and every acknowledged record stays.
#[test]
fn in_memory_table_refuses_a_batch_that_does_not_fit_and_loses_nothing_acknowledged() {
    let mut config = TableConfig::in_memory(8 << 12);
    config.log.page_size_bits = 12;
    let table = Table::create(config).unwrap();
    let mut acknowledged = 0u64;
    let refusal = loop {
        let batch: Vec<String> = (acknowledged..acknowledged + 7).map(|i| format!(r#"{{"id": {i}, "pad": "{}"}}"#, "x".repeat(60))).collect();
        let refs: Vec<&[u8]> = batch.iter().map(String::as_bytes).collect();
        match table.ingest(&refs) {
            Ok(report) => acknowledged += report.records as u64,
            Err(e) => break e,
        }
        assert!(acknowledged < 10_000, "a 32 KiB ring took 10,000 records of 80 bytes");
    };
    assert!(matches!(refusal, Error::MemoryFull { .. }), "{refusal}");
    assert!(refusal.to_string().contains("in-memory table is full"), "{refusal}");
    assert_eq!(table.stats().records, acknowledged);
    let request = ScanRequest { columns: vec![FieldPath::parse("id").unwrap()], ..ScanRequest::default() };
    let (batches, _) = table.scan(&request).unwrap();
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().iter().flatten().collect::<Vec<_>>())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..i64::try_from(acknowledged).unwrap()).collect::<Vec<_>>(), "the refused batch left nothing");
}

/// Threads of this process (Linux), or `None` elsewhere.
fn thread_count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok())
}

/// Found by the `ingest` fuzz target: a table dropped without `close` kept its flush and
/// observer threads (and its log's ring) alive, each thread holding the log while the
/// other let go; creating and dropping tables reached ~750 threads in 30 s.
#[test]
fn dropped_tables_let_their_threads_end() {
    let Some(before) = thread_count() else { return };
    for _ in 0..200 {
        let mut config = TableConfig { index_size_bits: 10, ..TableConfig::in_memory_window(1 << 20) };
        config.log.page_size_bits = 16;
        let table = Table::create(config).unwrap();
        table.ingest(&[br#"{"a": 1}"#.as_slice()]).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut now = thread_count().unwrap();
    // Other tests of this binary run beside this one: allow their threads.
    while now > before + 40 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        now = thread_count().unwrap();
    }
    assert!(now <= before + 40, "{now} threads after 200 dropped tables, {before} before");
}

#[test]
fn a_table_reserves_memory_as_it_fills_up_to_its_bound() {
    // A ring of 4 frames of 64 KiB, no columnar tier: bound = ring + index + schema bound.
    let mut config = TableConfig::in_memory(4 << 16);
    config.log.page_size_bits = 16;
    config.columnar.enabled = false;
    let table = Table::create(config.clone()).unwrap();
    let page = 1u64 << 16;
    // Empty: one frame, nothing else; the bound is what it may reach.
    assert_eq!(table.reserved_bytes(), config.empty_reserved_bytes());
    assert_eq!(config.empty_reserved_bytes(), page);
    assert_eq!(config.memory_bound_bytes(), 4 * page + (64 << config.index_size_bits) + shoal_core::schema::SCHEMA_RESERVED_BYTES);
    // A first batch may grow the ring by a frame of slack (the next page's) and takes the schema's bound;
    // no PSF and no key: no index.
    let growth = table.memory_growth_for(1000);
    assert_eq!(growth, page + shoal_core::schema::SCHEMA_RESERVED_BYTES);
    table.ingest(&[br#"{"id": 1}"#.as_slice()]).unwrap();
    let reserved = table.reserved_bytes();
    assert!(reserved >= page + shoal_core::schema::SCHEMA_RESERVED_BYTES && reserved <= page + growth, "{:?}", table.memory_stats());
    // A PSF: the index is reserved at its first record.
    table.register_psf("by_id", &PsfSpec::Projection { field: "id".into() }).unwrap();
    assert!(table.memory_growth_for(100) >= 64 << config.index_size_bits);
    // Filled past the ring (it discards no record: records stay while the ring holds them).
    let text = format!(r#"{{"id": 2, "pad": "{}"}}"#, "x".repeat(2000));
    for _ in 0..80 {
        table.ingest(&[text.as_bytes()]).unwrap();
    }
    let memory = table.memory_stats();
    // Three pages written; the flush thread may have populated the fourth frame ahead.
    assert!((3 * page..=4 * page).contains(&memory.log_populated_bytes), "{memory:?}");
    assert_eq!(memory.index_bytes, 64 << config.index_size_bits, "{memory:?}");
    assert!(memory.reserved_bytes <= memory.bound_bytes, "{memory:?}");
    assert!(memory.log_bytes_in_memory > 160_000, "{memory:?}");
}
