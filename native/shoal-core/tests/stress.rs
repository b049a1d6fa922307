//! Concurrency stress: four ingestion threads, PSFs registered and deregistered while
//! they run, scans running alongside, pages evicted to disk. Afterwards every record is
//! found exactly once by a full scan, and every chain returns exactly the records of
//! its property within its PSF's safe boundaries.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::scan::{plan_scan, ScanPlan, ScanRequest};
use shoal_core::table::{Table, TableConfig};
use shoal_core::FieldPath;

const THREADS: i64 = 4;
const PER_THREAD: i64 = 6_000;

fn ids(table: &Table, request: &ScanRequest, plan: &ScanPlan) -> Vec<i64> {
    let mut batches: Vec<RecordBatch> = Vec::new();
    table
        .scan_with_plan(request, plan, &mut |b| {
            batches.push(b);
            Ok(ControlFlow::Continue(()))
        })
        .expect("scan");
    let mut out = Vec::new();
    for b in &batches {
        let a = b.column(0).as_any().downcast_ref::<Int64Array>().expect("Int64 id");
        out.extend((0..a.len()).map(|i| a.value(i)));
    }
    out
}

fn assert_unique(ids: &[i64], what: &str) {
    let set: HashSet<_> = ids.iter().collect();
    assert_eq!(set.len(), ids.len(), "{what}: a record was returned twice");
}

#[test]
fn concurrent_ingest_register_scan_finds_every_record_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = TableConfig::on_disk(dir.path());
    config.log.page_size_bits = 16;
    config.log.memory_budget_bytes = 6 << 16;
    config.index_size_bits = 8;
    let table = Table::create(config).expect("table");
    // Give the schema an `id` column before scans start.
    table.ingest(&[br#"{"id": -1, "g": 0, "t": "seed", "v": 0}"#]).expect("seed");
    let stop = Arc::new(AtomicBool::new(false));
    // Writers slow down in the second half of their share until three registration
    // rounds are done, so that those rounds overlap ingestion whatever the scheduling.
    let rounds_done = Arc::new(std::sync::atomic::AtomicUsize::new(0));

    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (table, rounds_done) = (Arc::clone(&table), Arc::clone(&rounds_done));
            std::thread::spawn(move || {
                let mut n = t * PER_THREAD;
                while n < (t + 1) * PER_THREAD {
                    if n >= t * PER_THREAD + PER_THREAD / 2 && rounds_done.load(Ordering::Acquire) < 3 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    let batch: Vec<String> = (n..(n + 50).min((t + 1) * PER_THREAD))
                        .map(|i| format!(r#"{{"id": {i}, "g": {}, "t": "t{}", "v": {}, "pad": "{}"}}"#, i % 13, i % 5, i % 100, "p".repeat((i % 40) as usize)))
                        .collect();
                    n += batch.len() as i64;
                    let refs: Vec<&[u8]> = batch.iter().map(String::as_bytes).collect();
                    table.ingest(&refs).expect("ingest");
                }
            })
        })
        .collect();

    let registrar = {
        let (table, stop, rounds_done) = (Arc::clone(&table), Arc::clone(&stop), Arc::clone(&rounds_done));
        std::thread::spawn(move || {
            let mut round = 0;
            // Three rounds whatever the writers do, then more while they run.
            while round < 3 || (!stop.load(Ordering::Acquire) && round < 12) {
                let specs = [
                    (format!("g{round}"), PsfSpec::Projection { field: "g".into() }),
                    (format!("t{round}"), PsfSpec::Predicate { expr: "t = 't3' AND v < 50".into() }),
                    (format!("v{round}"), PsfSpec::range("v", vec![10.0, 50.0, 90.0])),
                    (format!("gt{round}"), PsfSpec::Composite { fields: vec!["g".into(), "t".into()] }),
                ];
                for (name, spec) in &specs {
                    table.register_psf(name, spec).expect("register");
                }
                // A record of its own while the round's PSFs are registered: their coverage is
                // never empty, even when the writers are done or descheduled.
                let id = THREADS * PER_THREAD + round as i64;
                let own = format!(r#"{{"id": {id}, "g": 7, "t": "t3", "v": {}, "pad": ""}}"#, round * 9);
                table.ingest(&[own.as_bytes()]).expect("registrar ingest");
                std::thread::sleep(std::time::Duration::from_millis(5));
                if round % 3 != 2 {
                    for (name, _) in &specs {
                        table.deregister_psf(name).expect("deregister");
                    }
                }
                round += 1;
                rounds_done.store(round, Ordering::Release);
            }
            round
        })
    };

    let scanner = {
        let (table, stop) = (Arc::clone(&table), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut scans = 0;
            while !stop.load(Ordering::Acquire) {
                let request = ScanRequest {
                    filter: Some(parse_expr("g = 7 OR (t = 't3' AND v < 50)").expect("parse")),
                    columns: vec![FieldPath::parse("id").expect("path")],
                    ..ScanRequest::default()
                };
                let plan = table.plan(&request);
                let found = ids(&table, &request, &plan);
                assert_unique(&found, "concurrent scan");
                scans += 1;
            }
            scans
        })
    };

    for w in writers {
        w.join().expect("writer");
    }
    stop.store(true, Ordering::Release);
    let rounds = registrar.join().expect("registrar") as i64;
    let scans = scanner.join().expect("scanner");
    assert!(scans > 0);

    let id_request = ScanRequest { columns: vec![FieldPath::parse("id").expect("path")], ..ScanRequest::default() };
    let mut all = ids(&table, &id_request, &table.plan(&id_request));
    assert_unique(&all, "full scan");
    all.sort_unstable();
    let expected: Vec<i64> = (-1..THREADS * PER_THREAD + rounds).collect();
    assert_eq!(all, expected, "every record exactly once");

    // Every chain within its PSF's coverage equals a full scan of that range.
    let filters = ["g = 7", "t = 't3' AND v < 50", "v >= 90", "g = 3 AND t = 't1'", "v < 10"];
    let mut index_scans = 0;
    for psf in table.psfs().all() {
        let (from, to) = psf.coverage().expect("registered");
        for filter in filters {
            let request = ScanRequest {
                filter: Some(parse_expr(filter).expect("parse")),
                columns: vec![FieldPath::parse("id").expect("path")],
                from_address: from,
                to_address: to,
                ..ScanRequest::default()
            };
            let plan = plan_scan(request.filter.as_ref(), std::slice::from_ref(&psf), from, to.min(table.log().tail_address()));
            if plan.index_scans.is_empty() {
                continue;
            }
            assert!(plan.full_scans.is_empty(), "{} covers its own range: {plan:?}", psf.name);
            index_scans += 1;
            let full = plan_scan(request.filter.as_ref(), &[], plan.index_scans[0].from, plan.index_scans[0].to);
            let mut by_index = ids(&table, &request, &plan);
            let mut by_full = ids(&table, &request, &full);
            assert_unique(&by_index, &psf.name);
            by_index.sort_unstable();
            by_full.sort_unstable();
            assert_eq!(by_index, by_full, "PSF {} filter {filter}", psf.name);
        }
    }
    // At least three rounds of four PSFs, each covering records (see the registrar).
    assert!(index_scans >= 9, "only {index_scans} chain checks ran");
}

/// `schema()` called while four threads ingest (pages closing and flushing under it):
/// afterwards it has counted every record exactly once and seen every field.
#[test]
fn schema_under_concurrent_ingestion_counts_every_record_once() {
    schema_under_concurrent_ingestion(256);
}

/// The same with a ring of 8 pages that the records wrap many times: frames are reused
/// only once the background observer has merged their pages, so nothing is lost from the
/// schema although the in-memory (null device) log forgets every evicted page.
#[test]
fn schema_counts_every_record_once_when_the_ring_wraps_under_the_observer() {
    schema_under_concurrent_ingestion(8);
}

fn schema_under_concurrent_ingestion(ring_pages: usize) {
    let mut config = TableConfig::in_memory_window(ring_pages << 12);
    config.log.page_size_bits = 12;
    let table = Arc::new(Table::create(config).expect("table"));
    let done = Arc::new(AtomicBool::new(false));
    let observer = {
        let (table, done) = (Arc::clone(&table), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut calls = 0u64;
            let mut last = 0;
            while !done.load(Ordering::Acquire) {
                let count = table.schema().record_count();
                assert!(count >= last, "the record count went back from {last} to {count}");
                last = count;
                calls += 1;
            }
            calls
        })
    };
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let table = Arc::clone(&table);
            std::thread::spawn(move || {
                for chunk in 0..50 {
                    let records: Vec<String> =
                        (0..20).map(|i| format!(r#"{{"w{t}": {i}, "c{}": "v"}}"#, (chunk * 20 + i) % 300)).collect();
                    let refs: Vec<&[u8]> = records.iter().map(String::as_bytes).collect();
                    table.ingest(&refs).expect("ingest");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("writer");
    }
    done.store(true, Ordering::Release);
    let calls = observer.join().expect("observer");
    assert!(calls > 0);
    let schema = table.schema();
    assert_eq!(schema.record_count(), u64::try_from(THREADS * 50 * 20).expect("count"));
    for t in 0..THREADS {
        assert!(schema.arrow_field(&FieldPath::parse(&format!("w{t}")).expect("path")).is_some());
    }
    for c in 0..300 {
        assert!(schema.arrow_field(&FieldPath::parse(&format!("c{c}")).expect("path")).is_some(), "c{c} missing");
    }
}
