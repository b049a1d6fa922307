//! Differential tests on real GitHub Archive events: for random filters, the planned
//! scan (index scans where PSFs cover the log, full scans elsewhere) returns exactly
//! what a full scan returns, and exactly what a serde_json oracle selects — with data
//! ingested before a PSF was registered and after another was deregistered, and most
//! pages evicted to segment files.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use shoal_core::psf::{parse_expr, Expr, PsfSpec};
use shoal_core::scan::{plan_scan, ScanRequest};
use shoal_core::table::{Table, TableConfig};
use shoal_core::FieldPath;

struct Fixture {
    table: Arc<Table>,
    records: Vec<serde_json::Value>,
    atoms: Vec<String>,
    _dir: tempfile::TempDir,
}

fn fixture() -> Option<&'static Fixture> {
    static FIXTURE: std::sync::OnceLock<Option<Fixture>> = std::sync::OnceLock::new();
    FIXTURE
        .get_or_init(|| {
            let lines = common::github_events(3_000)?;
            let dir = tempfile::tempdir().expect("temp dir");
            let mut config = TableConfig::on_disk(dir.path());
            config.log.page_size_bits = 18;
            config.log.memory_budget_bytes = 6 << 18;
            config.index_size_bits = 10;
            let table = Table::create(config).expect("table");
            let third = lines.len() / 3;
            let ingest = |part: &[String]| {
                for chunk in part.chunks(100) {
                    let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
                    table.ingest(&refs).expect("ingest");
                }
            };
            ingest(&lines[..third]);
            let psfs = [
                ("type", PsfSpec::Projection { field: "type".into() }),
                ("login", PsfSpec::Projection { field: "actor.login".into() }),
                ("opened_issues", PsfSpec::Predicate { expr: "type = 'IssuesEvent' AND payload.action = 'opened'".into() }),
                ("push_size", PsfSpec::range("payload.size", vec![1.0, 2.0, 5.0, 10.0])),
                ("repo_type", PsfSpec::Composite { fields: vec!["repo.name".into(), "type".into()] }),
                // String boundaries: the minutes of these events' RFC 3339 `created_at` (11:00 to 11:06).
                ("minute", PsfSpec::range("created_at", MINUTES.map(str::to_owned).to_vec())),
                // A projection of a function of a field.
                ("login_lower", PsfSpec::Projection { field: "lower(actor.login)".into() }),
                // A projection of a substring (the repository's owner's first three characters).
                ("repo_prefix", PsfSpec::Projection { field: "substr(repo.name, 1, 3)".into() }),
                // The same field as instants, in buckets of 10 s from the epoch.
                ("instant", PsfSpec::time_buckets("created_at", "10s", shoal_core::timestamp::EpochUnit::S)),
            ];
            for (name, spec) in &psfs {
                table.register_psf(name, spec).expect("register");
            }
            ingest(&lines[third..2 * third]);
            table.deregister_psf("login").expect("deregister");
            ingest(&lines[2 * third..]);
            assert!(table.log().head_address() > table.log().begin_address(), "part of the log is on disk");

            let records: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).expect("json")).collect();
            let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
            let mut atoms = vec![
                "payload.action = 'opened'".to_owned(),
                "payload.action IS NULL".to_owned(),
                "payload.pull_request.head.repo.language = 'C++'".to_owned(),
                "type IN ('WatchEvent', 'ForkEvent')".to_owned(),
                "payload.size >= 2".to_owned(),
                "payload.size < 5".to_owned(),
                "payload.size = 1".to_owned(),
                "actor.id > 20000000".to_owned(),
                "repo.name LIKE 'a%'".to_owned(),
                "repo.name LIKE '%-%'".to_owned(),
                "actor.login ILIKE '%BOT%'".to_owned(),
                "type = 'IssuesEvent' AND payload.action = 'opened'".to_owned(),
                "created_at >= '2018-01-01T11:02:00Z' AND created_at < '2018-01-01T11:04:00Z'".to_owned(),
                "created_at BETWEEN '2018-01-01T11:03:10Z' AND '2018-01-01T11:03:50Z'".to_owned(),
                "created_at < '2018-01-01T11:01:30Z'".to_owned(),
                "created_at > '2018-01-01T11:05'".to_owned(),
                "created_at >= TIMESTAMP '2018-01-01T11:02:00Z' AND created_at < TIMESTAMP '2018-01-01 11:04:00'".to_owned(),
                "CAST(created_at AS TIMESTAMP) BETWEEN '2018-01-01T12:03:10+01:00' AND '2018-01-01T11:03:50Z'".to_owned(),
                "created_at = TIMESTAMP '2018-01-01T11:03:07Z'".to_owned(),
                "created_at < TIMESTAMP '2018-01-01T11:01:30Z'".to_owned(),
                "length(repo.name) > 25".to_owned(),
                "upper(payload.ref_type) = 'TAG'".to_owned(),
                "array_contains(payload.issue.labels[*].name, 'bug')".to_owned(),
                "payload.commits[*].distinct = FALSE".to_owned(),
                "NOT array_contains(payload.issue.labels[*].name, 'enhancement')".to_owned(),
                "substring(repo.name, -3) = 'ons'".to_owned(),
                "substr(actor.login, 0, 2) = 'ma' OR SUBSTRING(actor.login FROM 2 FOR 3) > 'ik'".to_owned(),
                "date_trunc('month', created_at) = TIMESTAMP '2018-01-01'".to_owned(),
                "date_trunc('week', created_at) < TIMESTAMP '2018-01-01T11:00:00Z'".to_owned(),
            ];
            for record in records.iter().step_by(97).take(12) {
                let ty = record["type"].as_str().unwrap_or("none");
                atoms.push(format!("type = {}", quote(ty)));
                if let Some(login) = record["actor"]["login"].as_str() {
                    atoms.push(format!("actor.login = {}", quote(login)));
                    atoms.push(format!("lower(actor.login) = {}", quote(&login.to_lowercase())));
                }
                if let Some(repo) = record["repo"]["name"].as_str() {
                    let prefix: String = repo.chars().take(3).collect();
                    atoms.push(format!("substr(repo.name, 1, 3) = {}", quote(&prefix)));
                    atoms.push(format!("repo.name = {} AND type = {}", quote(repo), quote(ty)));
                }
            }
            Some(Fixture { table, records, atoms, _dir: dir })
        })
        .as_ref()
}

/// The boundaries of the `minute` range PSF.
const MINUTES: [&str; 6] = ["2018-01-01T11:01", "2018-01-01T11:02", "2018-01-01T11:03", "2018-01-01T11:04", "2018-01-01T11:05", "2018-01-01T11:06"];

fn ids_of(table: &Table, filter: &Expr, full_scan_only: bool) -> Vec<String> {
    let request = ScanRequest {
        filter: Some(filter.clone()),
        columns: vec![FieldPath::parse("id").expect("path")],
        ..ScanRequest::default()
    };
    let plan = if full_scan_only {
        plan_scan(request.filter.as_ref(), &[], table.log().begin_address(), table.log().tail_address())
    } else {
        table.plan(&request)
    };
    let mut batches = Vec::new();
    table
        .scan_with_plan(&request, &plan, &mut |b| {
            batches.push(b);
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .expect("scan");
    common::strings(&batches, 0)
}

fn filter_text(atoms: &[String]) -> impl Strategy<Value = String> {
    let leaf = proptest::sample::select(atoms.to_vec());
    leaf.prop_recursive(3, 8, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) AND ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) OR ({b})")),
            inner.prop_map(|a| format!("NOT ({a})")),
        ]
    })
}

#[test]
fn index_scan_equals_full_scan_equals_serde_json_oracle() {
    let Some(fixture) = fixture() else { return };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 48, ..ProptestConfig::default() });
    let mut used_index = 0;
    runner
        .run(&filter_text(&fixture.atoms), |text| {
            let filter = parse_expr(&text).expect("generated filters parse");
            let expected = common::oracle_ids(&fixture.records, &filter);
            let planned = ids_of(&fixture.table, &filter, false);
            let full = ids_of(&fixture.table, &filter, true);
            prop_assert_eq!(&full, &expected, "full scan vs oracle for {}", text);
            prop_assert_eq!(&planned, &expected, "planned scan vs oracle for {}", text);
            Ok(())
        })
        .expect("differential property");
    // Each atom alone, so every PSF kind is exercised at least once.
    for atom in &fixture.atoms {
        let filter = parse_expr(atom).expect("atom parses");
        let request = ScanRequest { filter: Some(filter.clone()), ..ScanRequest::default() };
        if !fixture.table.plan(&request).index_scans.is_empty() {
            used_index += 1;
        }
        let expected = common::oracle_ids(&fixture.records, &filter);
        assert_eq!(ids_of(&fixture.table, &filter, false), expected, "{atom}");
    }
    assert!(used_index >= 5, "only {used_index} atoms used an index scan");
}

#[test]
fn plans_use_each_psf_kind_within_its_safe_boundaries() {
    let Some(fixture) = fixture() else { return };
    let table = &fixture.table;
    let psfs = table.psfs().all();
    for (filter, psf) in [
        ("type = 'IssuesEvent'", "type"),
        ("type = 'IssuesEvent' AND payload.action = 'opened'", "opened_issues"),
        ("payload.size >= 5", "push_size"),
        ("lower(actor.login) = 'x'", "login_lower"),
        ("lower(actor.login) IN ('x', 'y')", "login_lower"),
        ("substr(repo.name, 1, 3) = 'apa'", "repo_prefix"),
    ] {
        let plan = table.plan(&ScanRequest { filter: Some(parse_expr(filter).expect("parse")), ..ScanRequest::default() });
        assert_eq!(plan.index_scans.len(), 1, "{filter}: {plan:?}");
        assert_eq!(plan.index_scans[0].psfs, vec![psf.to_owned()]);
        let registered = psfs.iter().find(|p| p.name == psf).expect("psf").safe_register_address();
        assert_eq!(plan.index_scans[0].from, registered);
        assert_eq!(plan.full_scans.len(), 1, "records before registration are full-scanned");
        assert_eq!(plan.full_scans[0].to, registered);
    }
    // A string range bounded on both sides reads the buckets between the bounds only (11:03,
    // and the one holding 11:04:00Z), fewer than either bound alone; disjoint bounds prove
    // that nothing matches.
    let bounded = "created_at >= '2018-01-01T11:03:00Z' AND created_at < '2018-01-01T11:04:00Z'";
    let plan = table.plan(&ScanRequest { filter: Some(parse_expr(bounded).expect("parse")), ..ScanRequest::default() });
    assert!(!plan.index_scans.is_empty() && plan.index_scans[0].psfs == vec!["minute".to_owned()], "{plan:?}");
    let buckets: Vec<&str> = plan.index_scans[0].properties.iter().map(|p| p.value.as_str()).collect();
    assert_eq!(buckets, ["bucket 3", "bucket 4"], "{plan:?}");
    let disjoint = "created_at > '2018-01-01T11:05' AND created_at < '2018-01-01T11:01'";
    let plan = table.plan(&ScanRequest { filter: Some(parse_expr(disjoint).expect("parse")), ..ScanRequest::default() });
    assert!(plan.index_scans[0].properties.is_empty() && plan.reason.contains("matches no record"), "{plan:?}");
    // A timestamp range reads the 10-second buckets between its instants (those from 11:03:00,
    // 11:03:10 and 11:03:20); one side alone would be unbounded (more than MAX_RANGE_CHAINS
    // chains), so no path is used.
    let hours = "created_at >= TIMESTAMP '2018-01-01T11:03:05Z' AND created_at <= TIMESTAMP '2018-01-01T12:03:25+01:00'";
    let plan = table.plan(&ScanRequest { filter: Some(parse_expr(hours).expect("parse")), ..ScanRequest::default() });
    assert!(!plan.index_scans.is_empty() && plan.index_scans[0].psfs == vec!["instant".to_owned()], "{plan:?}");
    assert_eq!(plan.index_scans[0].properties.len(), 3, "{plan:?}");
    let one_sided = "created_at >= TIMESTAMP '2018-01-01T11:03:00Z'";
    let plan = table.plan(&ScanRequest { filter: Some(parse_expr(one_sided).expect("parse")), ..ScanRequest::default() });
    assert!(plan.index_scans.is_empty(), "{plan:?}");
    // A string literal is compared as text: the timestamp buckets do not serve it.
    let text = "created_at >= '2018-01-01T11:03:00Z' AND created_at < '2018-01-01T11:03:30Z'";
    let plan = table.plan(&ScanRequest { filter: Some(parse_expr(text).expect("parse")), ..ScanRequest::default() });
    assert!(plan.index_scans.iter().all(|scan| scan.psfs != vec!["instant".to_owned()]), "{plan:?}");
    // PushEvents are over half of the records: the planner prefers a full scan.
    let plan = table.plan(&ScanRequest { filter: Some(parse_expr("type = 'PushEvent'").expect("parse")), ..ScanRequest::default() });
    assert!(plan.index_scans.is_empty(), "{plan:?}");
    assert!(plan.reason.contains("full scan is cheaper"), "{}", plan.reason);
    assert_eq!(plan.full_scans.len(), 1, "adjacent full-scan ranges are merged: {plan:?}");
    // The deregistered projection covers only the middle third.
    let login = psfs.iter().find(|p| p.name == "login").expect("login psf");
    let (from, to) = login.coverage().expect("coverage");
    let plan = table.plan(&ScanRequest { filter: Some(parse_expr("actor.login = 'x'").expect("parse")), ..ScanRequest::default() });
    assert_eq!((plan.index_scans[0].from, plan.index_scans[0].to), (from, to));
    assert_eq!(plan.full_scans.len(), 2);
}

/// `COUNT(*)`, `COUNT`, `MIN`, `MAX`, `SUM` and `AVG` pushed into the scan equal what the serde_json
/// oracle computes over the records that satisfy the filter — through index scans, full
/// scans and pages on disk.
#[test]
fn pushed_aggregates_equal_the_oracle() {
    use shoal_core::scan::{Aggregate, AggregateFunction};
    let Some(fixture) = fixture() else { return };
    let path = |p: &str| FieldPath::parse(p).expect("path");
    let aggregates = [
        Aggregate { function: AggregateFunction::Count, column: None },
        Aggregate { function: AggregateFunction::Count, column: Some(path("payload.size")) },
        Aggregate { function: AggregateFunction::Min, column: Some(path("payload.size")) },
        Aggregate { function: AggregateFunction::Max, column: Some(path("payload.size")) },
        Aggregate { function: AggregateFunction::Min, column: Some(path("actor.login")) },
        Aggregate { function: AggregateFunction::Max, column: Some(path("created_at")) },
        Aggregate { function: AggregateFunction::Max, column: Some(path("public")) },
        Aggregate { function: AggregateFunction::Sum, column: Some(path("payload.size")) },
        Aggregate { function: AggregateFunction::Avg, column: Some(path("actor.id")) },
    ];
    let lookup = |record: &serde_json::Value, p: &str| -> serde_json::Value {
        p.split('.').try_fold(record, |v, k| v.get(k)).cloned().unwrap_or(serde_json::Value::Null)
    };
    for filter_text in ["type = 'PushEvent'", "type = 'IssuesEvent' AND payload.action = 'opened'", "payload.size >= 5", "actor.id > 20000000", "type = 'NoSuchEvent'"] {
        let filter = parse_expr(filter_text).expect("parse");
        let matching: Vec<&serde_json::Value> =
            fixture.records.iter().filter(|r| common::oracle(&filter, r) == Some(true)).collect();
        let request = ScanRequest { filter: Some(filter), ..ScanRequest::default() };
        let plan = fixture.table.plan(&request);
        let (batch, _) = fixture.table.aggregate_with_plan(&request, &plan, &aggregates).expect("aggregate");
        let sizes: Vec<i64> = matching.iter().filter_map(|r| lookup(r, "payload.size").as_i64()).collect();
        let logins: Vec<String> = matching.iter().filter_map(|r| lookup(r, "actor.login").as_str().map(str::to_owned)).collect();
        let created: Vec<String> = matching.iter().filter_map(|r| lookup(r, "created_at").as_str().map(str::to_owned)).collect();
        let public: Vec<bool> = matching.iter().filter_map(|r| lookup(r, "public").as_bool()).collect();
        let column = |i: usize| arrow_cast::display::array_value_to_string(batch.column(i), 0).expect("display");
        let text = |v: Option<String>| v.unwrap_or_default();
        assert_eq!(column(0), matching.len().to_string(), "count(*) for {filter_text}");
        assert_eq!(column(1), sizes.len().to_string(), "count(payload.size) for {filter_text}");
        assert_eq!(column(2), text(sizes.iter().min().map(ToString::to_string)), "{filter_text}");
        assert_eq!(column(3), text(sizes.iter().max().map(ToString::to_string)), "{filter_text}");
        assert_eq!(column(4), text(logins.iter().min().cloned()), "{filter_text}");
        assert_eq!(column(5), text(created.iter().max().cloned()), "{filter_text}");
        assert_eq!(column(6), text(public.iter().max().map(ToString::to_string)), "{filter_text}");
        let sum = if sizes.is_empty() { String::new() } else { sizes.iter().sum::<i64>().to_string() };
        assert_eq!(column(7), sum, "sum(payload.size) for {filter_text}");
        let ids: Vec<i64> = matching.iter().filter_map(|r| lookup(r, "actor.id").as_i64()).collect();
        #[allow(clippy::cast_precision_loss)]
        let avg = (!ids.is_empty()).then(|| ids.iter().map(|&i| i128::from(i)).sum::<i128>() as f64 / ids.len() as f64);
        let got = batch.column(8).as_any().downcast_ref::<arrow_array::Float64Array>().expect("avg is Float64");
        assert_eq!(arrow_array::Array::is_null(got, 0), avg.is_none(), "avg(actor.id) null for {filter_text}");
        if let Some(avg) = avg {
            assert!((got.value(0) - avg).abs() <= avg.abs() * 1e-12, "avg(actor.id) for {filter_text}: {} vs {avg}", got.value(0));
        }
    }
}
