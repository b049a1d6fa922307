//! Ingestion and subset retrieval on GitHub Archive events with FishStore's GitHub
//! workload (SIGMOD'19, Table 1: projections on `id`, `actor.id`, `repo.id`, `type`;
//! predicates `type = 'IssuesEvent' AND payload.action = 'opened'` and
//! `type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'`).
//!
//! * `ingest/github_2000_events`: in-memory ingestion (null device) of the first 2,000
//!   events in batches of 1000, PSFs registered beforehand; throughput in payload bytes.
//!   Each iteration ingests into a fresh table (created outside the timing).
//! * `scan/issues_opened_{index,full}`: the predicate query over all events, once along
//!   the predicate's chain (index scan, as planned) and once as a forced full scan.
//!
//! Data: `scripts/fetch-data.sh` writes `data/github/events.ndjson`; another file can be
//! given with `SHOAL_GITHUB_EVENTS`. Run:
//! `cargo bench -p shoal-core --bench ingest -- --warm-up-time 1 --measurement-time 5`.
//! For whole-file figures (memcpy and parser bounds, 1–2 threads, disk) use the
//! `shoal-bench` binary.

use std::hint::black_box;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::scan::{LogRange, ScanPlan, ScanRequest};
use shoal_core::table::{Table, TableConfig};
use shoal_core::FieldPath;

const BATCH: usize = 1000;
const INGESTED_EVENTS: usize = 2000;
const ISSUES_OPENED: &str = "type = 'IssuesEvent' AND payload.action = 'opened'";

fn events_path() -> PathBuf {
    std::env::var_os("SHOAL_GITHUB_EVENTS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/github/events.ndjson"),
        PathBuf::from,
    )
}

fn load() -> Option<Vec<u8>> {
    let path = events_path();
    match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(e) => {
            eprintln!(
                "ingest bench: cannot read {} ({e}).\n  Fetch the GitHub events with `scripts/fetch-data.sh` \
                 (needs Maven), or point SHOAL_GITHUB_EVENTS at an NDJSON file. Skipping.",
                path.display()
            );
            None
        }
    }
}

fn github_psfs() -> [(&'static str, PsfSpec); 6] {
    let projection = |field: &str| PsfSpec::Projection { field: field.into() };
    let predicate = |expr: &str| PsfSpec::Predicate { expr: expr.into() };
    [
        ("id", projection("id")),
        ("actor_id", projection("actor.id")),
        ("repo_id", projection("repo.id")),
        ("type", projection("type")),
        ("issues_opened", predicate(ISSUES_OPENED)),
        ("cpp_pull_requests", predicate("type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'")),
    ]
}

/// An in-memory table with the GitHub PSFs; `budget` bytes of log memory.
fn github_table(budget: usize, index_size_bits: u32) -> Arc<Table> {
    let config = TableConfig { index_size_bits, ..TableConfig::in_memory_window(budget) };
    let table = Table::create(config).expect("table");
    for (name, spec) in github_psfs() {
        table.register_psf(name, &spec).expect("PSF");
    }
    table
}

fn ingest_all(table: &Table, records: &[&[u8]]) {
    for batch in records.chunks(BATCH) {
        let report = table.ingest(batch).expect("ingest");
        assert_eq!(report.records, batch.len());
    }
}

fn count_rows(table: &Table, request: &ScanRequest, plan: &ScanPlan) -> usize {
    let mut rows = 0;
    table
        .scan_with_plan(request, plan, &mut |batch| {
            rows += batch.num_rows();
            Ok(ControlFlow::Continue(()))
        })
        .expect("scan");
    rows
}

fn bench_ingest(c: &mut Criterion) {
    let Some(data) = load() else { return };
    let all: Vec<&[u8]> = data.split(|&b| b == b'\n').filter(|r| !r.is_empty()).collect();
    let records = &all[..INGESTED_EVENTS.min(all.len())];
    let bytes: u64 = records.iter().map(|r| r.len() as u64).sum();

    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function(format!("github_{}_events", records.len()), |b| {
        b.iter_batched(
            // 16 MiB of log (4 pages) and a 1 MiB index: enough for 2,000 events.
            || github_table(16 << 20, 14),
            |table| {
                ingest_all(&table, black_box(records));
                table
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();

    // Scans over every event of the file.
    let payload: usize = all.iter().map(|r| r.len()).sum();
    let table = github_table(payload * 2 + (64 << 20), 18);
    ingest_all(&table, &all);
    let request = ScanRequest {
        filter: Some(parse_expr(ISSUES_OPENED).expect("filter")),
        columns: vec![FieldPath::parse("id").expect("path")],
        ..ScanRequest::default()
    };
    let index_plan = table.plan(&request);
    assert_eq!(index_plan.index_scans.len(), 1, "the predicate PSF serves the query: {index_plan:?}");
    assert!(index_plan.full_scans.is_empty(), "{index_plan:?}");
    let stats = table.stats();
    let full_plan = ScanPlan {
        filter: index_plan.filter.clone(),
        index_scans: Vec::new(),
        full_scans: vec![LogRange { from: stats.begin_address, to: stats.tail_address }],
        columnar_scans: Vec::new(),
        columnar_row_groups: None,
        reason: "forced full scan".into(),
        snapshot: None,
    };
    let expected = count_rows(&table, &request, &full_plan);
    assert_eq!(count_rows(&table, &request, &index_plan), expected);
    eprintln!("ingest bench: {} events, {expected} match {ISSUES_OPENED:?}", all.len());

    let mut group = c.benchmark_group("scan");
    group.throughput(Throughput::Bytes(payload as u64));
    group.bench_function("issues_opened_index", |b| b.iter(|| count_rows(&table, &request, black_box(&index_plan))));
    group.bench_function("issues_opened_full", |b| b.iter(|| count_rows(&table, &request, black_box(&full_plan))));
    group.finish();
    table.close().expect("close");
}

criterion_group!(benches, bench_ingest);
criterion_main!(benches);
