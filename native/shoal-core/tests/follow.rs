//! Following a table while it is written (streaming reads): answers that each end at
//! `complete_until` and start where the previous one ended return every record exactly
//! once — through PSF chains (which do not yet hold a record in flight) and full scans —
//! while four threads ingest.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::RecordBatch;
use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::scan::ScanRequest;
use shoal_core::table::{Table, TableConfig};
use shoal_core::{FieldPath, LogAddress};

const THREADS: i64 = 4;
const PER_THREAD: i64 = 20_000;

/// The ids (with their addresses) a query of `[from, until)` returns.
fn read(table: &Table, filter: &str, from: LogAddress, until: LogAddress) -> Vec<(i64, LogAddress)> {
    if from >= until {
        return Vec::new();
    }
    let request = ScanRequest {
        filter: Some(parse_expr(filter).expect("filter")),
        columns: vec![FieldPath::parse("id").expect("path")],
        from_address: from,
        to_address: until,
        with_address: true,
        ..ScanRequest::default()
    };
    let plan = table.plan(&request);
    let mut batches: Vec<RecordBatch> = Vec::new();
    table
        .scan_with_plan(&request, &plan, &mut |b| {
            batches.push(b);
            Ok(ControlFlow::Continue(()))
        })
        .expect("scan");
    let mut out = Vec::new();
    for batch in &batches {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        let addresses = batch.column(1).as_primitive::<UInt64Type>();
        out.extend((0..batch.num_rows()).map(|i| (ids.value(i), LogAddress::new(addresses.value(i)))));
    }
    out
}

#[test]
fn followers_see_every_record_once_while_threads_ingest() {
    let mut config = TableConfig::in_memory(256 << 20);
    config.log.page_size_bits = 16;
    let table = Table::create(config).expect("table");
    table.register_psf("kind", &PsfSpec::Projection { field: "kind".into() }).expect("psf");
    let done = Arc::new(AtomicBool::new(false));
    // The first follower position: the log's first address (nothing below it is a record).
    let start = table.complete_until();
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let table = Arc::clone(&table);
            std::thread::spawn(move || {
                let records: Vec<String> =
                    (0..PER_THREAD).map(|i| format!(r#"{{"id": {}, "kind": "{}", "pad": "{}"}}"#, t * PER_THREAD + i, ["a", "b"][(i % 2) as usize], "x".repeat((i % 50) as usize))).collect();
                for chunk in records.chunks(97) {
                    let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
                    table.ingest(&refs).expect("ingest");
                }
            })
        })
        .collect();
    let stopper = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            for w in writers {
                w.join().expect("writer");
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    // Two followers: one through the PSF's chains, one a full scan.
    let filters = ["kind = 'a'", "id >= 0"];
    let mut seen: Vec<HashMap<i64, LogAddress>> = vec![HashMap::new(); filters.len()];
    let mut from = vec![start; filters.len()];
    let mut polls = 0;
    loop {
        let finished = done.load(Ordering::SeqCst);
        for (f, filter) in filters.iter().enumerate() {
            let until = table.complete_until();
            assert!(until <= table.tail_address());
            for (id, address) in read(&table, filter, from[f], until) {
                assert!(address >= from[f] && address < until, "{filter}: address {address} outside [{}, {until})", from[f]);
                let earlier = seen[f].insert(id, address);
                assert!(earlier.is_none(), "{filter}: record {id} returned twice (at {address}, before at {earlier:?})");
            }
            from[f] = until;
        }
        polls += 1;
        if finished {
            break;
        }
    }
    stopper.join().expect("stopper");
    // Once ingestion is over the boundary is the tail, and the followers have everything.
    assert_eq!(table.complete_until(), table.tail_address());
    let everyone = THREADS * PER_THREAD;
    assert_eq!(seen[0].len() as i64, everyone / 2, "the PSF follower after {polls} polls");
    assert!(seen[0].keys().all(|id| (id % PER_THREAD) % 2 == 0));
    assert_eq!(seen[1].len() as i64, everyone, "the full-scan follower after {polls} polls");
    assert!(polls >= 2, "the followers should have polled while ingestion ran ({polls})");
}
