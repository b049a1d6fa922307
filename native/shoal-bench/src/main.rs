//! `shoal-bench`: ingestion throughput of shoal-core on GitHub Archive events, set
//! against the two bounds FishStore measures itself by (SIGMOD'19 §8): a plain memcpy of
//! the bytes and the parser alone extracting the fields of interest.
//!
//! Cases (each run `--reps` times; the table shows the median and the min–max):
//!
//! * `memcpy` — copying the record bytes into a preallocated buffer;
//! * `parser` — `shoal_core::parser::default_parser()` extracting the six fields of
//!   FishStore's GitHub workload from batches of 1000 records (1 and 2 threads);
//! * `memory` — ingestion into an in-memory table (null device, memory budget larger
//!   than the data) with the GitHub workload of FishStore's Table 1 registered first:
//!   projections on `id`, `actor.id`, `repo.id`, `type`, and the predicates
//!   `type = 'IssuesEvent' AND payload.action = 'opened'` and
//!   `type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'`;
//! * `disk` — the same into a table on disk (a fresh temporary directory per run;
//!   `--disk-memory-mb`, default 64, so pages are flushed and evicted during the run;
//!   the time includes the final `flush()`);
//! * `nopsf` — in-memory ingestion with no PSF;
//! * `query` — after ingestion: `type = 'PushEvent'`, the predicate
//!   `type = 'IssuesEvent' AND payload.action = 'opened'` and a point lookup on
//!   `actor.id` (the busiest actor), each along the PSF chains (`plan_scan`, an index
//!   scan), as a forced full scan, and as `Table::plan` decides (with its planning
//!   time), on the in-memory and on the disk table. It also prints how many records the
//!   inferred schema had seen right after ingestion.
//!
//! * `durability` — one thread ingesting into a disk table under each durability policy
//!   (`none`, `group_commit` every 5 ms, `fsync`), every batch acknowledged as the
//!   daemon would (after `wait_durable` of its end, except under `none`); reported as
//!   MB/s and as a ratio to `none`;
//! * `recovery` — recovery time (`Table::open` after the table was dropped without
//!   closing, as after a crash) against log size (a quarter and all of the data) and
//!   checkpointing: none (the whole log replayed), and a fuzzy checkpoint taken at 90 %
//!   of the ingestion (only the last ~10 % replayed) — the shape of FishStore's Fig. 20.
//!
//! * `keyed` — keyed tables (primary key `id`, in memory, one thread), as ratios to an
//!   append-only table in the same run: ingestion of new keys and of a stream whose second
//!   half re-upserts the first half's keys; `type = 'PushEvent'` along its chain on the
//!   half-updated table against an append-only table of the same live rows (Perseid's
//!   validation overhead); a primary-key lookup against a PSF point lookup of one record.
//!
//! * `compaction` — the columnar tier's compactor (target: ≥ 300 MB/s of JSON per
//!   core): the records ingested into a disk table (no PSF), then timed until every
//!   flushed page is in a columnar file; reported as MB of JSON per second of compactor
//!   time (summed over its threads, `--compactor-threads`, one by default) and of its
//!   threads' CPU time, the Parquet bytes as a share of the JSON, how long after ingestion
//!   it caught up, and as a ratio to the `parser` case's single-thread rate measured in
//!   the same run.
//!
//! The ingestion threads each ingest a contiguous share of the batches of 1000 records.
//! MB are 10^6 bytes of record payload (the JSON text, without newlines).
//!
//! ```text
//! cargo run --release -p shoal-bench -- [--input data/github/events.ndjson]
//!     [--repeat N | --target-mb 200] [--reps 3] [--threads 1,2] [--disk-memory-mb 64]
//!     [--dir /tmp] [--cases memcpy,parser,memory,disk,nopsf,query,durability,recovery,keyed]
//! ```

use std::collections::HashSet;
use std::error::Error as StdError;
use std::hint::black_box;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_core::parser::{default_parser, FieldSet, FullScanParser, ParsedBatch};
use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::scan::{plan_scan, LogRange, ScanPlan, ScanRequest, ScanStats};
use shoal_core::table::{Table, TableConfig};
use shoal_core::FieldPath;

type BoxResult<T> = Result<T, Box<dyn StdError>>;

/// Records per ingested (and parsed) batch, as in FishStore's experiments.
const BATCH: usize = 1000;

/// FishStore's fields of interest for the GitHub workload.
const GITHUB_FIELDS: [&str; 6] = ["id", "actor.id", "repo.id", "type", "payload.action", "payload.pull_request.head.repo.language"];

/// FishStore's GitHub PSFs (SIGMOD'19, Table 1): four projections, two predicates.
fn github_psfs() -> Vec<(&'static str, PsfSpec)> {
    let projection = |field: &str| PsfSpec::Projection { field: field.into() };
    let predicate = |expr: &str| PsfSpec::Predicate { expr: expr.into() };
    vec![
        ("id", projection("id")),
        ("actor_id", projection("actor.id")),
        ("repo_id", projection("repo.id")),
        ("type", projection("type")),
        ("issues_opened", predicate("type = 'IssuesEvent' AND payload.action = 'opened'")),
        ("cpp_pull_requests", predicate("type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'")),
    ]
}

const USAGE: &str = "\
shoal-bench: ingestion throughput of shoal-core on GitHub Archive events

options:
  --input PATH          NDJSON events (default data/github/events.ndjson)
  --repeat N            replicate the file N times in memory, with unique ids
  --target-mb MB        without --repeat: replicate up to about this size (default 200)
  --reps N              repetitions per case (default 3)
  --threads LIST        ingestion thread counts (default 1,2)
  --disk-memory-mb MB   memory budget of the on-disk table (default 64)
  --memory-mb MB        memory budget of the in-memory table (default: the data and its
                        headers fit; smaller: frames are reused during the run, so the
                        background schema observer must keep up, as in sustained ingestion)
  --dir PATH            where the on-disk tables go (default: the system temp dir)
  --compactor-threads N compactor threads of the on-disk table (columnar.threads; default 1)
  --cases LIST          any of memcpy,parser,memory,disk,nopsf,query (default: all),
                        durability, recovery, keyed, compaction
  -h, --help            this text";

#[derive(Debug)]
struct Options {
    input: PathBuf,
    repeat: Option<usize>,
    target_mb: usize,
    reps: usize,
    threads: Vec<usize>,
    disk_memory_mb: usize,
    memory_mb: Option<usize>,
    dir: PathBuf,
    cases: Vec<String>,
    compactor_threads: usize,
}

impl Options {
    fn parse() -> BoxResult<Self> {
        let mut options = Options {
            input: PathBuf::from("data/github/events.ndjson"),
            repeat: None,
            target_mb: 200,
            reps: 3,
            threads: vec![1, 2],
            disk_memory_mb: 64,
            memory_mb: None,
            dir: std::env::temp_dir(),
            cases: ["memcpy", "parser", "memory", "disk", "nopsf", "query"].map(String::from).to_vec(),
            compactor_threads: 1,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
                _ => (arg.clone(), None),
            };
            if name == "-h" || name == "--help" {
                println!("{USAGE}");
                std::process::exit(0);
            }
            let mut value = || -> BoxResult<String> {
                inline.clone().or_else(|| args.next()).ok_or_else(|| format!("{name} needs a value").into())
            };
            let number = |text: String| -> BoxResult<usize> {
                text.parse::<usize>().map_err(|e| format!("{name}: {text:?} is not a number ({e})").into())
            };
            match name.as_str() {
                "--input" => options.input = PathBuf::from(value()?),
                "--repeat" => options.repeat = Some(number(value()?)?.max(1)),
                "--target-mb" => options.target_mb = number(value()?)?,
                "--reps" => options.reps = number(value()?)?.max(1),
                "--threads" => {
                    options.threads = value()?.split(',').map(|t| number(t.trim().to_owned()).map(|n| n.max(1))).collect::<BoxResult<_>>()?;
                }
                "--disk-memory-mb" => options.disk_memory_mb = number(value()?)?,
                "--memory-mb" => options.memory_mb = Some(number(value()?)?),
                "--dir" => options.dir = PathBuf::from(value()?),
                "--compactor-threads" => options.compactor_threads = number(value()?)?.max(1),
                "--cases" => options.cases = value()?.split(',').map(|c| c.trim().to_owned()).collect(),
                _ => return Err(format!("unknown option {arg:?}\n\n{USAGE}").into()),
            }
        }
        Ok(options)
    }

    fn wants(&self, case: &str) -> bool {
        self.cases.iter().any(|c| c == case)
    }
}

/// The events, replicated, as one buffer of concatenated records.
struct Dataset {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
    file_bytes: usize,
    copies: usize,
    ids_rewritten: usize,
}

impl Dataset {
    fn records(&self) -> Vec<&[u8]> {
        self.spans.iter().map(|&(start, end)| &self.bytes[start..end]).collect()
    }

    fn total_bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// Finds the input: as given, else relative to the workspace root (for runs from
/// elsewhere than the repository root).
fn locate_input(path: &Path) -> PathBuf {
    if path.exists() || path.is_absolute() {
        return path.to_owned();
    }
    let from_workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
    if from_workspace.exists() {
        from_workspace
    } else {
        path.to_owned()
    }
}

/// Loads the NDJSON file and replicates it `copies` times. With more than one copy every
/// record's top-level `"id":"…"` (the first key of every GitHub Archive event) gets a
/// fixed-width copy number appended, so ids stay unique across copies.
fn load(path: &Path, repeat: Option<usize>, target_mb: usize) -> BoxResult<Dataset> {
    let file = std::fs::read(path).map_err(|e| {
        format!("cannot read {} ({e}); fetch the GitHub events with scripts/fetch-data.sh or pass --input", path.display())
    })?;
    let lines: Vec<&[u8]> = file
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .collect();
    if lines.is_empty() {
        return Err(format!("{} holds no records", path.display()).into());
    }
    let line_bytes: usize = lines.iter().map(|l| l.len()).sum();
    let copies = repeat.unwrap_or_else(|| (target_mb * 1_000_000).div_ceil(line_bytes).max(1));
    let width = (copies.saturating_sub(1)).to_string().len();
    const ID_PREFIX: &[u8] = br#"{"id":""#;
    let mut bytes = Vec::with_capacity(copies * (line_bytes + lines.len() * (width + 1)));
    let mut spans = Vec::with_capacity(copies * lines.len());
    let mut ids_rewritten = 0;
    for copy in 0..copies {
        let suffix = format!("{copy:0width$}");
        for line in &lines {
            let start = bytes.len();
            let id_end = line
                .strip_prefix(ID_PREFIX)
                .and_then(|rest| rest.iter().position(|&b| b == b'"' || b == b'\\'))
                .filter(|&end| line[ID_PREFIX.len() + end] == b'"');
            match id_end {
                Some(end) if copies > 1 => {
                    let split = ID_PREFIX.len() + end;
                    bytes.extend_from_slice(&line[..split]);
                    bytes.extend_from_slice(suffix.as_bytes());
                    bytes.extend_from_slice(&line[split..]);
                    ids_rewritten += 1;
                }
                _ => bytes.extend_from_slice(line),
            }
            spans.push((start, bytes.len()));
        }
    }
    Ok(Dataset { bytes, spans, file_bytes: line_bytes, copies, ids_rewritten })
}

/// Checks that the ids are unique (the index would otherwise see fewer properties than
/// the replication suggests).
fn distinct_ids(records: &[&[u8]]) -> usize {
    let mut parser = default_parser();
    let mut fields = FieldSet::new();
    fields.insert(&FieldPath::parse("id").expect("a valid path"));
    let mut out = ParsedBatch::default();
    let mut ids = HashSet::new();
    for batch in records.chunks(BATCH) {
        parser.parse_batch(batch, &fields, &mut out);
        for i in 0..out.len() {
            if let Ok(values) = out.record(i) {
                ids.insert(format!("{:?}", values[0]));
            }
        }
    }
    ids.len()
}

#[derive(Debug, Clone, Copy)]
struct Summary {
    median: Duration,
    min: Duration,
    max: Duration,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let n = samples.len();
    let median = if n % 2 == 1 { samples[n / 2] } else { (samples[n / 2 - 1] + samples[n / 2]) / 2 };
    Summary { median, min: samples[0], max: samples[n - 1] }
}

fn mb_per_s(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / 1e6 / time.as_secs_f64()
}

struct Row {
    case: String,
    threads: usize,
    summary: Summary,
}

fn memcpy_case(data: &Dataset, reps: usize) -> Summary {
    let mut destination = vec![0u8; data.total_bytes()];
    // Touch the destination once so page faults are not measured.
    destination.copy_from_slice(&data.bytes);
    let samples = (0..reps)
        .map(|_| {
            let start = Instant::now();
            destination.copy_from_slice(black_box(&data.bytes));
            black_box(&destination);
            start.elapsed()
        })
        .collect();
    summarize(samples)
}

fn github_field_set() -> FieldSet {
    let mut fields = FieldSet::new();
    for path in GITHUB_FIELDS {
        fields.insert(&FieldPath::parse(path).expect("a valid path"));
    }
    fields
}

/// Parses every record (batches of 1000) on `threads` threads; returns the time and the
/// number of rejected records.
fn parse_once(records: &[&[u8]], threads: usize, fields: &FieldSet) -> (Duration, usize) {
    let batches: Vec<&[&[u8]]> = records.chunks(BATCH).collect();
    let start = Instant::now();
    let rejected: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let share = &batches[t * batches.len() / threads..(t + 1) * batches.len() / threads];
                scope.spawn(move || {
                    let mut parser = default_parser();
                    let mut out = ParsedBatch::default();
                    let mut rejected = 0;
                    for batch in share {
                        parser.parse_batch(batch, fields, &mut out);
                        rejected += (0..out.len()).filter(|&i| out.record(i).is_err()).count();
                        black_box(&out);
                    }
                    rejected
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("parser thread panicked")).sum()
    });
    (start.elapsed(), rejected)
}

fn parser_case(records: &[&[u8]], threads: usize, reps: usize) -> BoxResult<Summary> {
    let fields = github_field_set();
    let mut samples = Vec::new();
    for _ in 0..reps {
        let (time, rejected) = parse_once(records, threads, &fields);
        if rejected > 0 {
            return Err(format!("the parser rejected {rejected} of {} records", records.len()).into());
        }
        samples.push(time);
    }
    Ok(summarize(samples))
}

/// A table configuration for one ingestion run.
#[derive(Clone)]
enum Target {
    Memory { budget: usize },
    Disk { base: PathBuf, budget: usize, compactor_threads: usize },
}

struct Ingested {
    table: Arc<Table>,
    time: Duration,
    dir: Option<PathBuf>,
}

impl Ingested {
    /// Closes the table and removes its directory.
    fn discard(self) {
        let _ = self.table.close();
        drop(self.table);
        if let Some(dir) = self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn unique_dir(base: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static RUN: AtomicUsize = AtomicUsize::new(0);
    base.join(format!("shoal-bench-{}-{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed)))
}

/// Creates a table, registers the PSFs (if asked), and times the ingestion of every
/// record on `threads` threads (plus the final flush for a disk table).
fn ingest_once(records: &[&[u8]], threads: usize, target: &Target, with_psfs: bool) -> BoxResult<Ingested> {
    let (config, dir) = match target {
        Target::Memory { budget } => (TableConfig::in_memory_window(*budget), None),
        Target::Disk { base, budget, compactor_threads } => {
            let dir = unique_dir(base);
            let mut config = TableConfig::on_disk(&dir);
            config.log.memory_budget_bytes = *budget;
            config.columnar.threads = *compactor_threads;
            (config, Some(dir))
        }
    };
    let table = Table::create(config)?;
    if with_psfs {
        for (name, spec) in github_psfs() {
            table.register_psf(name, &spec)?;
        }
    }
    let batches: Vec<&[&[u8]]> = records.chunks(BATCH).collect();
    let start = Instant::now();
    let written: usize = std::thread::scope(|scope| -> BoxResult<usize> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let share = &batches[t * batches.len() / threads..(t + 1) * batches.len() / threads];
                let table = &table;
                scope.spawn(move || -> Result<usize, shoal_core::Error> {
                    let mut written = 0;
                    for batch in share {
                        written += table.ingest(batch)?.records;
                    }
                    Ok(written)
                })
            })
            .collect();
        let mut written = 0;
        for handle in handles {
            written += handle.join().map_err(|_| "an ingestion thread panicked")??;
        }
        Ok(written)
    })?;
    if dir.is_some() {
        table.flush()?;
    }
    let time = start.elapsed();
    if written != records.len() || table.stats().records != records.len() as u64 {
        return Err(format!("ingested {written} records (table says {}), expected {}", table.stats().records, records.len()).into());
    }
    Ok(Ingested { table, time, dir })
}

fn ingest_case(records: &[&[u8]], threads: usize, target: &Target, with_psfs: bool, reps: usize) -> BoxResult<Summary> {
    let mut samples = Vec::new();
    for _ in 0..reps {
        let run = ingest_once(records, threads, target, with_psfs)?;
        samples.push(run.time);
        run.discard();
    }
    Ok(summarize(samples))
}

fn print_table(rows: &[Row], total_bytes: usize, records: usize, parser: Option<Summary>, memcpy: Option<Summary>) {
    println!();
    println!(
        "{:<34} {:>3}  {:>9} {:>19}  {:>11}  {:>9}  {:>8}  {:>8}",
        "case", "thr", "MB/s", "(min–max MB/s)", "records/s", "MB/s/thr", "×parser", "×memcpy"
    );
    println!("{}", "-".repeat(114));
    let ratio = |mbs: f64, base: Option<Summary>| {
        base.map_or_else(|| "-".to_owned(), |b| format!("{:.3}", mbs / mb_per_s(total_bytes, b.median)))
    };
    for row in rows {
        let mbs = mb_per_s(total_bytes, row.summary.median);
        let (low, high) = (mb_per_s(total_bytes, row.summary.max), mb_per_s(total_bytes, row.summary.min));
        println!(
            "{:<34} {:>3}  {:>9.1} {:>19}  {:>11.0}  {:>9.1}  {:>8}  {:>8}",
            row.case,
            row.threads,
            mbs,
            format!("({low:.1}–{high:.1})"),
            records as f64 / row.summary.median.as_secs_f64(),
            mbs / row.threads as f64,
            ratio(mbs, parser),
            ratio(mbs, memcpy),
        );
    }
    println!();
    println!("MB = 10^6 bytes of record payload; MB/s and records/s from the median run; ×parser and ×memcpy");
    println!("are the median throughput divided by the 1-thread parser's and memcpy's median throughput.");
}

/// Counts the rows a scan returns (column `id` only, to keep projection cheap).
fn run_query(table: &Table, request: &ScanRequest, plan: &ScanPlan) -> BoxResult<(usize, ScanStats)> {
    let mut rows = 0;
    let stats = table.scan_with_plan(request, plan, &mut |batch| {
        rows += batch.num_rows();
        Ok(ControlFlow::Continue(()))
    })?;
    Ok((rows, stats))
}

fn full_scan_plan(table: &Table, request: &ScanRequest) -> ScanPlan {
    let stats = table.stats();
    ScanPlan {
        filter: request.filter.as_ref().map(ToString::to_string),
        index_scans: Vec::new(),
        full_scans: vec![LogRange { from: stats.begin_address, to: stats.tail_address }],
        columnar_scans: Vec::new(),
        columnar_row_groups: None,
        reason: "forced full scan".into(),
        snapshot: None,
    }
}

fn describe(stats: &ScanStats) -> String {
    let mut text = format!(
        "chain entries {}, index candidates {}, full-scan records {}",
        stats.chain_entries, stats.index_candidates, stats.full_scan_records
    );
    if stats.device_reads > 0 {
        text.push_str(&format!(", device reads {} ({:.1} MB)", stats.device_reads, stats.device_bytes as f64 / 1e6));
    }
    text
}

/// Times `plan` over `reps` runs; returns the rows and stats of the last run.
fn time_query(table: &Table, request: &ScanRequest, plan: &ScanPlan, reps: usize) -> BoxResult<(Summary, usize, ScanStats)> {
    let mut samples = Vec::new();
    let mut last = (0, ScanStats::default());
    for _ in 0..reps {
        let start = Instant::now();
        last = run_query(table, request, plan)?;
        samples.push(start.elapsed());
    }
    Ok((summarize(samples), last.0, last.1))
}

/// Each query three ways: along the PSF chains (`plan_scan`, the planner without its
/// cost check), as a forced full scan, and as `Table::plan` decides (with the time the
/// planning itself took).
fn query_section(label: &str, table: &Table, queries: &[(String, String)], reps: usize) -> BoxResult<()> {
    let stats = table.stats();
    println!();
    println!("queries on the {label} table ({} records, head {} / tail {}):", stats.records, stats.head_address, stats.tail_address);
    println!("{:<28} {:<8} {:>10} {:>10} {:>10} {:>7}  details", "query", "path", "median ms", "min ms", "max ms", "rows");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for (name, filter) in queries {
        let request = ScanRequest {
            filter: Some(parse_expr(filter)?),
            columns: vec![FieldPath::parse("id")?],
            ..ScanRequest::default()
        };
        let along_chains = plan_scan(request.filter.as_ref(), &table.psfs().all(), stats.begin_address, stats.tail_address);
        let full = full_scan_plan(table, &request);
        let mut plan_times = Vec::new();
        let mut planned = table.plan(&request);
        for _ in 0..reps {
            let start = Instant::now();
            planned = table.plan(&request);
            plan_times.push(start.elapsed());
        }
        let plan_time = summarize(plan_times);
        let mut counts = Vec::new();
        // The full scan three times: each parser forced, then chosen per page (the default).
        let runs = [
            ("index", &along_chains, FullScanParser::Adaptive),
            ("full-sj", &full, FullScanParser::Simdjson),
            ("full-od", &full, FullScanParser::OnDemand),
            ("full", &full, FullScanParser::Adaptive),
            ("planned", &planned, FullScanParser::Adaptive),
        ];
        for (path, plan, parser) in runs {
            let request = ScanRequest { full_scan_parser: parser, ..request.clone() };
            let (s, rows, scan_stats) = time_query(table, &request, plan, reps)?;
            let mut details = describe(&scan_stats);
            if path == "full" {
                let parsed = scan_stats.full_scan_parsed;
                details = format!("{details}; parsed by simdjson {} / on-demand {}", parsed.simdjson, parsed.on_demand);
            }
            if path == "index" && plan.index_scans.is_empty() {
                details = format!("NO INDEX PATH ({}); {details}", plan.reason);
            }
            if path == "planned" {
                details = format!("Table::plan took {:.2} ms (median): {}", ms(plan_time.median), plan.reason);
            }
            println!("{:<28} {:<8} {:>10.2} {:>10.2} {:>10.2} {:>7}  {}", name, path, ms(s.median), ms(s.min), ms(s.max), rows, details);
            counts.push(rows);
        }
        if counts.iter().any(|&c| c != counts[0]) {
            return Err(format!("{name}: index, full and planned scans returned {counts:?} rows").into());
        }
    }
    Ok(())
}

/// The actor with the most events in the data (for the point lookup).
fn busiest_actor(records: &[&[u8]]) -> Option<i64> {
    let mut parser = default_parser();
    let mut fields = FieldSet::new();
    fields.insert(&FieldPath::parse("actor.id").expect("a valid path"));
    let mut out = ParsedBatch::default();
    let mut counts = std::collections::HashMap::new();
    for batch in records.chunks(BATCH) {
        parser.parse_batch(batch, &fields, &mut out);
        for i in 0..out.len() {
            if let Ok([shoal_core::FieldValue::Int(actor)]) = out.record(i) {
                *counts.entry(*actor).or_insert(0usize) += 1;
            }
        }
    }
    counts.into_iter().max_by_key(|&(actor, n)| (n, std::cmp::Reverse(actor))).map(|(actor, _)| actor)
}

fn main() -> BoxResult<()> {
    let options = Options::parse()?;
    let input = locate_input(&options.input);
    let data = load(&input, options.repeat, options.target_mb)?;
    let records = data.records();
    let total = data.total_bytes();
    println!(
        "shoal-bench: {} × {} ({:.1} MB, {} records per copy) = {} records, {:.1} MB; {} ids rewritten",
        data.copies,
        input.display(),
        data.file_bytes as f64 / 1e6,
        records.len() / data.copies,
        records.len(),
        total as f64 / 1e6,
        data.ids_rewritten
    );
    let distinct = distinct_ids(&records);
    println!("distinct ids: {distinct} of {} records", records.len());
    println!(
        "reps {}, ingestion threads {:?}, batches of {BATCH} records, {} CPUs available",
        options.reps,
        options.threads,
        std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get)
    );

    // In-memory budget: the payload plus a generous allowance for headers and key
    // pointers (16 + 24 × 6 bytes per record at most) plus spare pages.
    let memory_budget = options.memory_mb.map_or(total + records.len() * 192 + (64 << 20), |mb| mb << 20);
    let memory = Target::Memory { budget: memory_budget };
    let disk = Target::Disk { base: options.dir.clone(), budget: options.disk_memory_mb << 20, compactor_threads: options.compactor_threads };

    let mut rows = Vec::new();
    let mut memcpy = None;
    let mut parser = None;
    if options.wants("memcpy") {
        let s = memcpy_case(&data, options.reps);
        memcpy = Some(s);
        rows.push(Row { case: "memcpy".into(), threads: 1, summary: s });
        eprintln!("memcpy done");
    }
    if options.wants("parser") {
        for &threads in &options.threads {
            let s = parser_case(&records, threads, options.reps)?;
            if threads == 1 {
                parser = Some(s);
            }
            rows.push(Row { case: "parser (6 fields of interest)".into(), threads, summary: s });
            eprintln!("parser ×{threads} done");
        }
    }
    let cases: [(&str, &str, &Target, bool); 3] = [
        ("memory", "ingest, in memory, GitHub PSFs", &memory, true),
        ("disk", "ingest, disk, GitHub PSFs", &disk, true),
        ("nopsf", "ingest, in memory, no PSF", &memory, false),
    ];
    for (key, label, target, with_psfs) in cases {
        if !options.wants(key) {
            continue;
        }
        for &threads in &options.threads {
            let s = ingest_case(&records, threads, target, with_psfs, options.reps)?;
            rows.push(Row { case: label.into(), threads, summary: s });
            eprintln!("{label} ×{threads} done");
        }
    }
    print_table(&rows, total, records.len(), parser, memcpy);
    if options.wants("durability") {
        durability_section(&records, &options.dir, options.disk_memory_mb << 20, options.reps)?;
    }
    if options.wants("recovery") {
        recovery_section(&records, &options.dir, options.disk_memory_mb << 20, options.reps)?;
    }
    if options.wants("keyed") {
        keyed_section(&records, memory_budget, options.reps)?;
    }
    if options.wants("compaction") {
        compaction_section(&records, &disk, options.reps, parser)?;
    }

    if options.wants("query") {
        let actor = busiest_actor(&records).ok_or("no record has an integer actor.id")?;
        let queries = vec![
            ("type = 'PushEvent'".to_owned(), "type = 'PushEvent'".to_owned()),
            ("issues opened (predicate)".to_owned(), "type = 'IssuesEvent' AND payload.action = 'opened'".to_owned()),
            (format!("actor.id = {actor}"), format!("actor.id = {actor}")),
            // Fields most events lack (the On-Demand scanner then reads each record to its end).
            ("payload.size > 5".to_owned(), "payload.size > 5".to_owned()),
            ("C++ pull requests".to_owned(), "payload.pull_request.head.repo.language = 'C++'".to_owned()),
        ];
        for (label, target) in [("in-memory", &memory), ("on-disk", &disk)] {
            let run = ingest_once(&records, 1, target, true)?;
            // Schema inference runs on the flush thread as pages close; right after
            // ingestion it may not have seen every closed page yet.
            let (observed, written) = (run.table.schema().record_count(), run.table.stats().records);
            eprintln!("  inferred schema right after ingestion ({label}): {observed} of {written} records observed");
            // Let the flush thread catch up so that it does not compete with the queries.
            run.table.flush()?;
            for psf in run.table.psfs().all() {
                eprintln!("  PSF {:<18} key pointers {:>9}", psf.name, psf.key_pointer_count());
            }
            let result = query_section(label, &run.table, &queries, options.reps);
            run.discard();
            result?;
        }
    }
    Ok(())
}

/// Ingestion into a disk table under each durability policy, acknowledging every batch
/// as the daemon does.
fn durability_section(records: &[&[u8]], base: &Path, budget: usize, reps: usize) -> BoxResult<()> {
    use shoal_core::table::DurabilityPolicy;
    let bytes: usize = records.iter().map(|r| r.len()).sum();
    let policies = [
        ("none", DurabilityPolicy::None),
        ("group_commit 5 ms", DurabilityPolicy::GroupCommit { interval_ms: 5 }),
        ("fsync", DurabilityPolicy::Fsync),
    ];
    println!();
    println!("{:<22} {:>12} {:>16} {:>10}", "durability policy", "MB/s", "min-max MB/s", "vs none");
    let mut baseline = None;
    for (label, policy) in policies {
        let mut samples = Vec::new();
        for _ in 0..reps {
            let dir = unique_dir(base);
            let mut config = TableConfig::on_disk(&dir).with_durability(policy);
            config.log.memory_budget_bytes = budget;
            let table = Table::create(config)?;
            for (name, spec) in github_psfs() {
                table.register_psf(name, &spec)?;
            }
            let start = Instant::now();
            for batch in records.chunks(BATCH) {
                let report = table.ingest(batch)?;
                if policy != DurabilityPolicy::None {
                    table.wait_durable(report.end_address, Duration::from_secs(60))?;
                }
            }
            samples.push(start.elapsed());
            let _ = table.close();
            drop(table);
            let _ = std::fs::remove_dir_all(dir);
        }
        let summary = summarize(samples);
        let rate = mb_per_s(bytes, summary.median);
        let base_rate = *baseline.get_or_insert(rate);
        println!(
            "{label:<22} {rate:>12.0} {:>7.0}-{:<8.0} {:>9.2}x",
            mb_per_s(bytes, summary.max),
            mb_per_s(bytes, summary.min),
            rate / base_rate
        );
        eprintln!("durability {label} done");
    }
    Ok(())
}

/// Recovery time against log size and checkpointing.
fn recovery_section(records: &[&[u8]], base: &Path, budget: usize, reps: usize) -> BoxResult<()> {
    println!();
    println!("{:<10} {:<28} {:>12} {:>14} {:>12}", "log MB", "checkpoint", "recovery ms", "replayed MB", "MB/s");
    for fraction in [4, 1] {
        let part = &records[..records.len() / fraction];
        let bytes: usize = part.iter().map(|r| r.len()).sum();
        for checkpoint in [false, true] {
            let mut samples = Vec::new();
            let mut replayed = 0;
            for _ in 0..reps {
                let dir = unique_dir(base);
                let mut config = TableConfig::on_disk(&dir);
                config.log.memory_budget_bytes = budget;
                let table = Table::create(config.clone())?;
                for (name, spec) in github_psfs() {
                    table.register_psf(name, &spec)?;
                }
                let batches: Vec<&[&[u8]]> = part.chunks(BATCH).collect();
                for (i, batch) in batches.iter().enumerate() {
                    table.ingest(batch)?;
                    if checkpoint && i + 1 == batches.len() * 9 / 10 {
                        table.checkpoint()?;
                    }
                }
                // Make the log durable without a checkpoint, then "crash" (no close).
                table.wait_durable(table.tail_address(), Duration::from_secs(60))?;
                drop(table);
                let start = Instant::now();
                let (table, report) = Table::open(config)?;
                samples.push(start.elapsed());
                replayed = report.bytes_replayed;
                if table.stats().records != part.len() as u64 {
                    return Err(format!("recovered {} of {} records", table.stats().records, part.len()).into());
                }
                let _ = table.close();
                drop(table);
                let _ = std::fs::remove_dir_all(dir);
            }
            let summary = summarize(samples);
            let label = if checkpoint { "fuzzy checkpoint at 90 %" } else { "none (whole log replayed)" };
            #[allow(clippy::cast_precision_loss)]
            let replayed_mb = replayed as f64 / 1e6;
            println!(
                "{:<10.0} {label:<28} {:>12.1} {replayed_mb:>14.1} {:>12.0}",
                bytes as f64 / 1e6,
                summary.median.as_secs_f64() * 1e3,
                replayed_mb / summary.median.as_secs_f64().max(1e-9)
            );
        }
    }
    Ok(())
}

/// A table in memory for the keyed section: keyed on `id` (the GitHub PSFs but `id`, which
/// the key's own PSF indexes) or append-only (all GitHub PSFs).
fn keyed_bench_table(keyed: bool, budget: usize) -> BoxResult<Arc<Table>> {
    let mut config = TableConfig::in_memory(budget);
    if keyed {
        config.primary_key = vec![FieldPath::parse("id")?];
    }
    let table = Table::create(config)?;
    for (name, spec) in github_psfs() {
        if !(keyed && name == "id") {
            table.register_psf(name, &spec)?;
        }
    }
    Ok(table)
}

/// Ingests `records` on one thread into a fresh table; returns it and the time taken.
fn keyed_bench_ingest(records: &[&[u8]], keyed: bool, budget: usize) -> BoxResult<(Arc<Table>, Duration)> {
    let table = keyed_bench_table(keyed, budget)?;
    let start = Instant::now();
    for batch in records.chunks(BATCH) {
        table.ingest(batch)?;
    }
    Ok((table, start.elapsed()))
}

/// The keyed tables' targets (bench/README.md, "Engine (`shoal-bench`)"), as ratios to
/// append-only tables measured in the same run.
fn keyed_section(records: &[&[u8]], budget: usize, reps: usize) -> BoxResult<()> {
    let half = &records[..records.len() / 2];
    // The second half of this stream re-upserts the first half's keys.
    let updating: Vec<&[u8]> = half.iter().chain(half.iter()).copied().collect();
    let bytes: usize = updating.iter().map(|r| r.len()).sum();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = |samples: Vec<Duration>| summarize(samples).median;
    let (mut append, mut new_keys, mut updates) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        append.push(keyed_bench_ingest(&updating, false, budget)?.1);
        new_keys.push(keyed_bench_ingest(&records[..updating.len()], true, budget)?.1);
        updates.push(keyed_bench_ingest(&updating, true, budget)?.1);
    }
    let (append, new_keys, updates) = (median(append), median(new_keys), median(updates));
    println!();
    println!("keyed tables ({} records, {:.1} MB per ingestion, in memory, 1 thread, median of {reps}):", updating.len(), bytes as f64 / 1e6);
    println!("  ingest append-only (GitHub PSFs)       {:>9.1} MB/s", mb_per_s(bytes, append));
    println!(
        "  ingest keyed, new keys                 {:>9.1} MB/s  {:.2}× append (target ≥ 0.8)",
        mb_per_s(bytes, new_keys),
        append.as_secs_f64() / new_keys.as_secs_f64()
    );
    println!(
        "  ingest keyed, 50% updates              {:>9.1} MB/s  {:.2}× append (target ≥ 0.7)",
        mb_per_s(bytes, updates),
        append.as_secs_f64() / updates.as_secs_f64()
    );

    // Half of the keys updated once: keys `live`, then the first half of them again.
    let live = &records[..records.len() * 2 / 3];
    let half_updated: Vec<&[u8]> = live.iter().chain(&live[..live.len() / 2]).copied().collect();
    let (updated, _) = keyed_bench_ingest(&half_updated, true, budget)?;
    let (same_rows, _) = keyed_bench_ingest(live, false, budget)?;
    let key_stats = updated.stats().keys.ok_or("a keyed table has key stats")?;
    println!(
        "  key index: {} keys, {} superseded versions, {:.1} MB ({:.0} bytes per key)",
        key_stats.keys,
        key_stats.superseded,
        key_stats.memory_bytes as f64 / 1e6,
        key_stats.memory_bytes as f64 / key_stats.keys.max(1) as f64
    );
    println!("  queries: {} keys, half of them updated once ({} versions), against an append-only table of the {} live rows", live.len(), half_updated.len(), live.len());
    let first_id = {
        let value: serde_json::Value = serde_json::from_slice(live[live.len() / 3])?;
        value["id"].as_str().map(|s| format!("'{s}'")).or_else(|| value["id"].as_i64().map(|i| i.to_string())).ok_or("no id")?
    };
    for (label, filter, target) in [
        ("type = 'PushEvent' (index scan)", "type = 'PushEvent'".to_owned(), "≤ 1.5"),
        ("primary-key lookup vs PSF lookup", format!("id = {first_id}"), "≤ 2"),
    ] {
        let request = ScanRequest { filter: Some(parse_expr(&filter)?), columns: vec![FieldPath::parse("id")?], ..ScanRequest::default() };
        let (keyed_plan, plain_plan) = (updated.plan(&request), same_rows.plan(&request));
        let (keyed_time, keyed_rows, keyed_stats) = time_query(&updated, &request, &keyed_plan, reps.max(5))?;
        let (plain_time, plain_rows, _) = time_query(&same_rows, &request, &plain_plan, reps.max(5))?;
        if keyed_rows != plain_rows {
            return Err(format!("{filter}: the keyed table returned {keyed_rows} rows, the append-only one {plain_rows}").into());
        }
        println!(
            "  {label:<38} keyed {:>8.3} ms, append-only {:>8.3} ms: {:.2}× (target {target}); {keyed_rows} rows, {} candidates, {} versions skipped",
            ms(keyed_time.median),
            ms(plain_time.median),
            keyed_time.median.as_secs_f64() / plain_time.median.as_secs_f64(),
            keyed_stats.index_candidates,
            keyed_stats.versions_skipped
        );
    }

    // Garbage collection: the half-updated table's log compacted (roll to tail), then the
    // same index scan again.
    let memory_before = key_stats.memory_bytes;
    let start = Instant::now();
    let report = updated.compact_log(shoal_core::LogAddress::MAX, Duration::from_secs(5))?;
    let took = start.elapsed();
    let log_bytes = report.truncate.begin_address - report.truncate.previous_begin_address;
    let after = updated.stats().keys.ok_or("a keyed table has key stats")?;
    println!(
        "  log compaction: {:.1} MB of log in {:.0} ms, {:.1} MB/s ({:.2}× keyed ingest with updates); {} live versions copied, {} superseded dropped; key index {:.1} → {:.1} MB",
        log_bytes as f64 / 1e6,
        ms(took),
        mb_per_s(usize::try_from(log_bytes)?, took),
        mb_per_s(usize::try_from(log_bytes)?, took) / mb_per_s(bytes, updates),
        report.truncate.versions_copied,
        report.superseded_dropped,
        memory_before as f64 / 1e6,
        after.memory_bytes as f64 / 1e6
    );
    let request = ScanRequest { filter: Some(parse_expr("type = 'PushEvent'")?), columns: vec![FieldPath::parse("id")?], ..ScanRequest::default() };
    let (keyed_time, keyed_rows, _) = time_query(&updated, &request, &updated.plan(&request), reps.max(5))?;
    let (plain_time, plain_rows, _) = time_query(&same_rows, &request, &same_rows.plan(&request), reps.max(5))?;
    if keyed_rows != plain_rows {
        return Err(format!("after compaction: the keyed table returned {keyed_rows} rows, the append-only one {plain_rows}").into());
    }
    println!(
        "  {:<38} keyed {:>8.3} ms, append-only {:>8.3} ms: {:.2}×",
        "type = 'PushEvent', after compaction",
        ms(keyed_time.median),
        ms(plain_time.median),
        keyed_time.median.as_secs_f64() / plain_time.median.as_secs_f64()
    );
    Ok(())
}

/// The columnar compactor over the whole data: ingest into a disk table, then wait until
/// the compactor has every record in a file.
fn compaction_section(records: &[&[u8]], target: &Target, reps: usize, parser: Option<Summary>) -> BoxResult<()> {
    let json_bytes: usize = records.iter().map(|r| r.len()).sum();
    let threads = match target {
        Target::Disk { compactor_threads, .. } => *compactor_threads,
        Target::Memory { .. } => 1,
    };
    println!("\ncolumnar compaction ({:.1} MB of JSON, {} records, {threads} compactor thread(s))", json_bytes as f64 / 1e6, records.len());
    let (mut rates, mut cpu_rates) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let run = ingest_once(records, 1, target, false)?;
        let started = Instant::now();
        let stats = loop {
            let stats = run.table.stats().columnar;
            if !stats.enabled {
                run.discard();
                return Err("the columnar tier is off on the disk table".into());
            }
            // Every record in a file (the last page too: the table was flushed).
            if stats.backlog_bytes == 0 && stats.compacted_json_bytes >= json_bytes as u64 {
                break stats;
            }
            if started.elapsed() > Duration::from_secs(600) {
                run.discard();
                return Err(format!("compaction did not catch up within 600 s: {stats:?}").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let rate = stats.compacted_json_bytes as f64 / 1e6 / (stats.compaction_ms.max(1) as f64 / 1e3);
        let cpu_rate = stats.compacted_json_bytes as f64 / 1e6 / (stats.compaction_cpu_ms.max(1) as f64 / 1e3);
        println!(
            "  {:>4} files, {:>8.1} MB of JSON in {:>6} ms of compactor time: {:>6.1} MB/s ({} ms of its threads' CPU: {:.1} MB/s per core); Parquet {:.1} MB = {:.1} % of the JSON; caught up {:.1} s after ingestion",
            stats.files,
            stats.compacted_json_bytes as f64 / 1e6,
            stats.compaction_ms,
            rate,
            stats.compaction_cpu_ms,
            cpu_rate,
            stats.parquet_bytes as f64 / 1e6,
            100.0 * stats.parquet_bytes as f64 / stats.json_bytes.max(1) as f64,
            started.elapsed().as_secs_f64()
        );
        rates.push(rate);
        cpu_rates.push(cpu_rate);
        run.discard();
    }
    rates.sort_by(f64::total_cmp);
    cpu_rates.sort_by(f64::total_cmp);
    let (median, cpu_median) = (rates[rates.len() / 2], cpu_rates[cpu_rates.len() / 2]);
    match parser {
        Some(p) => println!(
            "  median {median:.1} MB/s, {cpu_median:.1} MB/s per core of CPU time = {:.2}× / {:.2}× the parser's single-thread rate in this run ({:.1} MB/s)",
            median / mb_per_s(json_bytes, p.median),
            cpu_median / mb_per_s(json_bytes, p.median),
            mb_per_s(json_bytes, p.median)
        ),
        None => println!("  median {median:.1} MB/s, {cpu_median:.1} MB/s per core of CPU time (add the parser case for a ratio)"),
    }
    Ok(())
}
