//! The compactor's work per columnar file (issue 16's "compaction ≥ 300 MB/s of JSON per
//! core"): GitHub Archive events, repeated to one file's worth of log (64 MiB, ~33,000
//! records, ~690 paths), shredded into columns and encoded as Parquet by the compactor's own
//! `write_file`, on one thread with nothing else running — the rate `shoal-bench --cases
//! compaction` measures beside ingestion, without its noise.
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
    group.finish();
}

criterion_group!(benches, compaction);
criterion_main!(benches);
