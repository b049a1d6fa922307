//! The compactor's work per columnar file (target: "compaction ≥ 300 MB/s of JSON per
//! core", bench/README.md, "Columnar tier"): GitHub Archive events, repeated to one
//! file's worth of log (64 MiB, ~33,000 records, ~690 paths), shredded into columns and
//! encoded as Parquet by the compactor's own `write_file`, on one thread with nothing
//! else running — the rate `shoal-bench --cases compaction` measures beside ingestion,
//! without its noise.
//!
//! A second case writes the same records as one file per event `type` (14 files, each
//! with only its own rows' paths): what files partitioned by record shape would cost —
//! an experiment for the compaction rate target, not what the compactor does.
//!
//! Data: `scripts/fetch-data.sh` writes `data/github/events.ndjson`; another file can be
//! given with `SHOAL_GITHUB_EVENTS`. Run:
//! `cargo bench -p shoal-core --bench compaction -- --warm-up-time 2 --measurement-time 20`.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shoal_core::LogAddress;

/// JSON bytes per file: the compactor's default run of log (`columnar.file_bytes`).
const FILE_JSON_BYTES: usize = 64 << 20;

fn events_path() -> PathBuf {
    std::env::var_os("SHOAL_GITHUB_EVENTS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/github/events.ndjson"),
        PathBuf::from,
    )
}

fn compaction(c: &mut Criterion) {
    let path = events_path();
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("compaction bench: cannot read {} ({e}); fetch it with scripts/fetch-data.sh. Skipping.", path.display());
            return;
        }
    };
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    let mut records: Vec<(LogAddress, &[u8])> = Vec::new();
    let (mut bytes, mut address) = (0usize, LogAddress::FIRST);
    for line in lines.iter().cycle() {
        if bytes >= FILE_JSON_BYTES {
            break;
        }
        records.push((address, line));
        bytes += line.len();
        address += line.len() as u64 + 16;
    }
    let (file_bytes, phases) = shoal_core::columnar::bench_write_file(&records).expect("a columnar file");
    eprintln!(
        "compaction bench: {} records, {:.1} MB of JSON → Parquet {:.1} MB ({:.1} %); one run: shred {} ms, encode {} ms",
        records.len(),
        bytes as f64 / 1e6,
        file_bytes as f64 / 1e6,
        100.0 * file_bytes as f64 / bytes as f64,
        phases[0].as_millis(),
        phases[1].as_millis()
    );
    let mut group = c.benchmark_group("compaction");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("write_file (shred + Parquet), one 64 MiB file", |b| {
        b.iter(|| black_box(shoal_core::columnar::bench_write_file(black_box(&records)).expect("a columnar file")));
    });
    let partitions = by_event_type(&records);
    let partitioned_bytes: usize = partitions
        .iter()
        .map(|part| shoal_core::columnar::bench_write_file(part).expect("a columnar file").0)
        .sum();
    eprintln!(
        "compaction bench: by event type, {} files → Parquet {:.1} MB ({:.1} %)",
        partitions.len(),
        partitioned_bytes as f64 / 1e6,
        100.0 * partitioned_bytes as f64 / bytes as f64
    );
    group.bench_function("write_file per event type (shape-partitioned files), one 64 MiB run", |b| {
        b.iter(|| {
            for part in &partitions {
                black_box(shoal_core::columnar::bench_write_file(black_box(part)).expect("a columnar file"));
            }
        });
    });
    group.finish();
}

/// `records` split by the value of their `"type"` key (GitHub events' event type, found
/// as text: every event has it at the top level), each part in address order.
fn by_event_type<'a>(records: &[(LogAddress, &'a [u8])]) -> Vec<Vec<(LogAddress, &'a [u8])>> {
    const KEY: &[u8] = b"\"type\":\"";
    let mut parts: std::collections::BTreeMap<&[u8], Vec<(LogAddress, &[u8])>> = std::collections::BTreeMap::new();
    for &(address, record) in records {
        let value = record.windows(KEY.len()).position(|w| w == KEY).map_or(&[][..], |at| {
            let rest = &record[at + KEY.len()..];
            &rest[..rest.iter().position(|&b| b == b'"').unwrap_or(rest.len())]
        });
        parts.entry(value).or_default().push((address, record));
    }
    parts.into_values().collect()
}

criterion_group!(benches, compaction);
criterion_main!(benches);
