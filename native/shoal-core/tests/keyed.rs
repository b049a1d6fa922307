//! Keyed tables: random sequences of upserts, deletes and merges — repeated keys, keys
//! that come back after a delete, merges that add, change and remove nested fields —
//! against a dictionary oracle. After every batch, every kind of query (full scans, index
//! scans on the key and on a secondary PSF, filters no PSF covers, pushed aggregates, the
//! key index's counts) equals the oracle; at the end, queries at every earlier snapshot
//! (`to_address`, time travel) equal the oracle of that moment, and so do they after the
//! table is closed and recovered. Pages are small and the memory budget tiny, so versions
//! and chains reach the segment files. Log compactions at random points (roll to tail)
//! change nothing a query sees, drop every obsolete version below them, and refuse time
//! travel below their snapshot horizon.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, StringArray};
use proptest::prelude::*;
use serde_json::{json, Value};
use shoal_core::keys::RecordOp;
use shoal_core::psf::{parse_expr, PsfSpec};
use shoal_core::scan::{Aggregate, AggregateFunction, ScanRequest};
use shoal_core::table::{Table, TableConfig};
use shoal_core::{Error, FieldPath, LogAddress};

type Oracle = BTreeMap<i64, Value>;

/// RFC 7386 over parsed values, written out for the oracle (the engine merges the stored
/// text instead: src/merge_patch.rs).
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(target) = target else { unreachable!() };
    for (name, value) in patch {
        if value.is_null() {
            target.remove(name);
        } else {
            merge_patch(target.entry(name.clone()).or_insert(Value::Null), value);
        }
    }
}

#[derive(Debug, Clone)]
struct Step {
    op: RecordOp,
    key: i64,
    document: Value,
}

fn step() -> impl Strategy<Value = Step> {
    let group = prop_oneof![Just(Value::Null), (0i64..3).prop_map(Value::from)];
    let nested = (prop_oneof![Just(Value::Null), (0i64..100).prop_map(Value::from)], prop::option::of(0i64..5));
    (0..3u8, 0i64..6, group, nested).prop_map(|(kind, key, g, (a, c))| {
        let op = [RecordOp::Upsert, RecordOp::Delete, RecordOp::Merge][usize::from(kind)];
        let mut n = json!({ "a": a });
        if let Some(c) = c {
            n["c"] = json!(c);
        }
        let document = match op {
            RecordOp::Delete => json!({ "id": key }),
            // An upsert's nulls are values; a merge's remove fields.
            _ => json!({ "id": key, "g": g, "n": n, "text": format!("version of {key} with {}", "x".repeat(usize::try_from(key).unwrap() * 40)) }),
        };
        Step { op, key, document }
    })
}

fn apply(oracle: &mut Oracle, step: &Step) {
    match step.op {
        RecordOp::Upsert => {
            oracle.insert(step.key, step.document.clone());
        }
        RecordOp::Delete => {
            oracle.remove(&step.key);
        }
        RecordOp::Merge => {
            let mut document = oracle.remove(&step.key).unwrap_or(Value::Null);
            merge_patch(&mut document, &step.document);
            oracle.insert(step.key, document);
        }
    }
}

fn config(dir: &std::path::Path) -> TableConfig {
    let mut config = TableConfig::on_disk(dir);
    config.log.page_size_bits = 12;
    config.log.memory_budget_bytes = 4 << 12;
    config.index_size_bits = 8;
    config.primary_key = vec![FieldPath::parse("id").unwrap()];
    config
}

/// The rows of a query (JSON output) as a map by id; panics on two rows of one key.
fn rows(table: &Table, filter: Option<&str>, to_address: LogAddress) -> Oracle {
    try_rows(table, filter, to_address).unwrap()
}

/// As [`rows`], with the scan's error.
fn try_rows(table: &Table, filter: Option<&str>, to_address: LogAddress) -> Result<Oracle, Error> {
    let request = ScanRequest { filter: filter.map(|f| parse_expr(f).unwrap()), to_address, ..ScanRequest::default() };
    let plan = table.plan(&request);
    let mut out = Oracle::new();
    table.scan_json(&request, &plan, &mut |batch| {
        let column = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        for text in column.iter().flatten() {
            let value: Value = serde_json::from_str(text).unwrap();
            let id = value["id"].as_i64().unwrap();
            assert!(out.insert(id, value).is_none(), "two versions of key {id} returned by {filter:?}");
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(out)
}

/// Checks the queries at earlier snapshots: equal to the oracle of their moment at or
/// above the snapshot horizon, refused below it.
fn check_snapshots(table: &Table, snapshots: &[(LogAddress, Oracle)], context: &str) {
    let horizon = table.stats().keys.unwrap().snapshot_horizon;
    for (address, then) in snapshots {
        match try_rows(table, None, *address) {
            Ok(seen) => {
                assert!(*address >= horizon, "{context}: as of {address}, below the horizon {horizon}, answered");
                assert_eq!(&seen, then, "{context}: as of {address}");
            }
            Err(Error::SnapshotTooOld { snapshot, horizon: h }) => {
                assert_eq!((snapshot, h), (*address, horizon), "{context}");
                assert!(*address < horizon, "{context}: as of {address} refused at horizon {horizon}");
            }
            Err(other) => panic!("{context}: as of {address}: {other}"),
        }
    }
}

fn count(table: &Table, filter: Option<&str>) -> i64 {
    let request = ScanRequest { filter: filter.map(|f| parse_expr(f).unwrap()), ..ScanRequest::default() };
    let plan = table.plan(&request);
    let (batch, _) = table.aggregate_with_plan(&request, &plan, &[Aggregate { function: AggregateFunction::Count, column: None }]).unwrap();
    batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0)
}

fn check(table: &Table, oracle: &Oracle) {
    assert_eq!(&rows(table, None, LogAddress::MAX), oracle, "every row");
    for key in 0..6 {
        let one = rows(table, Some(&format!("id = {key}")), LogAddress::MAX);
        assert_eq!(one.get(&key), oracle.get(&key), "id = {key}");
        assert!(one.len() <= 1);
    }
    for (filter, keep) in [
        ("g = 1", &(|v: &Value| v["g"] == json!(1)) as &dyn Fn(&Value) -> bool),
        ("g >= 1", &|v: &Value| v["g"].as_i64().is_some_and(|g| g >= 1)),
        ("n.a < 50", &|v: &Value| v["n"]["a"].as_i64().is_some_and(|a| a < 50)),
    ] {
        let expected: Oracle = oracle.iter().filter(|(_, v)| keep(v)).map(|(k, v)| (*k, v.clone())).collect();
        assert_eq!(rows(table, Some(filter), LogAddress::MAX), expected, "{filter}");
    }
    assert_eq!(count(table, None), i64::try_from(oracle.len()).unwrap(), "count(*)");
    assert_eq!(table.stats().keys.unwrap().live, oracle.len() as u64, "live keys");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn keyed_tables_equal_a_dictionary_oracle(
        batches in prop::collection::vec((prop::collection::vec(step(), 1..8), prop::bool::weighted(0.25)), 1..12)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let table = Table::create(config(dir.path())).unwrap();
        table.register_psf("g", &PsfSpec::Projection { field: "g".into() }).unwrap();
        let mut oracle = Oracle::new();
        let mut snapshots: Vec<(LogAddress, Oracle)> = Vec::new();
        for (batch, compact) in &batches {
            let texts: Vec<String> = batch.iter().map(|s| s.document.to_string()).collect();
            let records: Vec<&[u8]> = texts.iter().map(String::as_bytes).collect();
            let ops: Vec<RecordOp> = batch.iter().map(|s| s.op).collect();
            table.ingest_ops(&records, &ops).unwrap();
            batch.iter().for_each(|s| apply(&mut oracle, s));
            check(&table, &oracle);
            if snapshots.len() % 3 == 2 {
                // SQL's DELETE FROM t WHERE g = …: every live row that matches gets a tombstone.
                let g = (snapshots.len() / 3) % 3;
                let report = table.delete_where(Some(&parse_expr(&format!("g = {g}")).unwrap())).unwrap();
                let before = oracle.len();
                oracle.retain(|_, v| v["g"] != json!(g));
                prop_assert_eq!(report.deleted, (before - oracle.len()) as u64);
                check(&table, &oracle);
            }
            if *compact {
                // The whole log flushed, then compacted: every version left below the tail is
                // a live copy (no superseded entry, no deleted key remains).
                table.flush().unwrap();
                let report = table.compact_log(LogAddress::MAX, std::time::Duration::from_secs(5)).unwrap();
                prop_assert!(!report.deferred);
                prop_assert_eq!(report.truncate.versions_copied, oracle.len() as u64);
                check(&table, &oracle);
                let keys = table.stats().keys.unwrap();
                prop_assert_eq!((keys.superseded, keys.keys, keys.live), (0, oracle.len() as u64, oracle.len() as u64));
                check_snapshots(&table, &snapshots, "after a compaction");
            }
            snapshots.push((table.stats().complete_until, oracle.clone()));
        }
        check_snapshots(&table, &snapshots, "at the end");
        table.flush().unwrap();
        table.close().unwrap();
        drop(table);
        let (table, report) = Table::open(config(dir.path())).unwrap();
        prop_assert!(report.keys > 0 || oracle.is_empty());
        check(&table, &oracle);
        check_snapshots(&table, &snapshots, "recovered");
    }
}

#[test]
fn records_without_a_usable_key_and_ops_on_append_only_tables_are_refused_by_name() {
    let table = Table::create(TableConfig { primary_key: vec![FieldPath::parse("k.id").unwrap()], ..TableConfig::in_memory(1 << 20) }).unwrap();
    for bad in [r#"{"x": 1}"#, r#"{"k": {"id": null}}"#, r#"{"k": {"id": [1]}}"#, r#"{"k": {"id": {"a": 1}}}"#] {
        match table.ingest(&[br#"{"k": {"id": "fine"}}"#, bad.as_bytes()]) {
            Err(Error::InvalidKey { index: 1, key }) => assert_eq!(key, "k.id"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert_eq!(table.stats().records, 0, "nothing of a refused batch is written");
    assert!(table.deregister_psf("primary_key").is_err());

    let append_only = Table::create(TableConfig::in_memory(1 << 20)).unwrap();
    let refused = append_only.ingest_ops(&[br#"{"id": 1}"#], &[RecordOp::Delete]).unwrap_err();
    assert!(refused.to_string().contains("keyed table"), "{refused}");
    assert!(append_only.ingest_ops(&[br#"{"id": 1}"#], &[RecordOp::Upsert, RecordOp::Upsert]).is_err());
    assert!(append_only.stats().keys.is_none());
}

#[test]
fn composite_keys_and_a_scan_that_outlives_later_updates_see_their_snapshot() {
    let fields = vec![FieldPath::parse("tenant").unwrap(), FieldPath::parse("id").unwrap()];
    let table: Arc<Table> = Table::create(TableConfig { primary_key: fields, ..TableConfig::in_memory(8 << 20) }).unwrap();
    table.ingest(&[br#"{"tenant": "a", "id": 1, "v": 1}"#, br#"{"tenant": "b", "id": 1, "v": 1}"#]).unwrap();
    let request = ScanRequest::default();
    let plan = table.plan(&request);
    table.ingest(&[br#"{"tenant": "a", "id": 1, "v": 2}"#]).unwrap();
    table.ingest_ops(&[br#"{"tenant": "b", "id": 1}"#], &[RecordOp::Delete]).unwrap();
    // The plan made before the update and the delete still sees both keys as they were.
    let mut seen = Vec::new();
    table
        .scan_json(&request, &plan, &mut |batch| {
            let column = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            seen.extend(column.iter().flatten().map(str::to_owned));
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
    seen.sort();
    assert_eq!(seen, [r#"{"tenant": "a", "id": 1, "v": 1}"#, r#"{"tenant": "b", "id": 1, "v": 1}"#]);
    let now = rows_of(&table);
    assert_eq!(now, [r#"{"tenant": "a", "id": 1, "v": 2}"#]);
    let stats = table.stats().keys.unwrap();
    assert_eq!((stats.live, stats.keys, stats.superseded), (1, 2, 2));
}

/// The raw text of every live row (a query's JSON output is each record's payload).
fn texts(table: &Table, filter: Option<&str>) -> Vec<String> {
    let request = ScanRequest { filter: filter.map(|f| parse_expr(f).unwrap()), ..ScanRequest::default() };
    let plan = table.plan(&request);
    let mut out = Vec::new();
    table
        .scan_json(&request, &plan, &mut |batch| {
            let column = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            out.extend(column.iter().flatten().map(str::to_owned));
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
    out
}

#[test]
fn a_merge_keeps_the_exact_text_of_everything_its_patch_does_not_name() {
    let table = Table::create(TableConfig { primary_key: vec![FieldPath::parse("id").unwrap()], ..TableConfig::in_memory(16 << 20) }).unwrap();
    // Accepted at ingest, and each once lost or changed by a merge that parsed the version
    // with serde_json: beyond f64, beyond i64, a lone surrogate, a name given twice, a
    // float serde_json prints otherwise, nesting deeper than its 128 levels.
    let deep = format!("{}1{}", r#"{"a": ["#.repeat(2000), "]}".repeat(2000));
    let kept = format!(
        r#""huge": 1E400, "count": 123456789012345678901234567890, "s": "\ud800", "d": 1, "d": 2, "f": 2.50E-3, "deep": {deep}"#
    );
    table.ingest(&[format!(r#"{{"id": 1, {kept}, "n": 1}}"#).as_bytes()]).unwrap();
    table.ingest_ops(&[br#"{"id": 1, "n": 2}"#], &[RecordOp::Merge]).unwrap();
    // The members the patch names are rewritten compactly; the others are as they were.
    let kept_compact = kept.replace(", \"", ",\"");
    assert_eq!(texts(&table, None), [format!(r#"{{"id":1,{kept_compact},"n":2}}"#)]);
    // What queries answer about a name given twice (its first occurrence) stays, until a
    // patch names it: then the first is replaced and the second goes.
    assert_eq!(texts(&table, Some("d = 1")).len(), 1);
    // Merges of one batch chain on each other's text: an upsert, then two merges.
    table
        .ingest_ops(
            &[br#"{"id": 2, "x": 1e999, "y": 1}"#, br#"{"id": 2, "y": null, "z": [1.0]}"#, br#"{"id": 1, "d": 3}"#, br#"{"id": 2, "w": {"v": null}}"#],
            &[RecordOp::Upsert, RecordOp::Merge, RecordOp::Merge, RecordOp::Merge],
        )
        .unwrap();
    assert_eq!(texts(&table, Some("id = 2")), [r#"{"id":2,"x": 1e999,"z":[1.0],"w":{}}"#]);
    assert!(texts(&table, Some("d = 1")).is_empty() && texts(&table, Some("d = 2")).is_empty());
    let one = texts(&table, Some("d = 3"));
    assert_eq!(one.len(), 1);
    assert!(one[0].starts_with(r#"{"id":1,"huge": 1E400,"count": 123456789012345678901234567890,"s": "\ud800","d":3,"f": 2.50E-3,"deep": {"a": [{"a": ["#), "{}", &one[0][..200]);
}

#[test]
fn a_patch_nested_past_the_bound_fails_its_batch_by_name() {
    let table = Table::create(TableConfig { primary_key: vec![FieldPath::parse("id").unwrap()], ..TableConfig::in_memory(16 << 20) }).unwrap();
    table.ingest(&[br#"{"id": 1, "a": 1}"#]).unwrap();
    let patch = format!(r#"{{"id": 1, "p": {}1{}}}"#, r#"{"a":"#.repeat(600), "}".repeat(600));
    match table.ingest_ops(&[br#"{"id": 2}"#, patch.as_bytes()], &[RecordOp::Upsert, RecordOp::Merge]) {
        Err(Error::InvalidRecord { index: 1, reason }) => assert!(reason.contains("deeper than 512 levels"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(texts(&table, None), [r#"{"id": 1, "a": 1}"#], "nothing of the batch was written");
}

fn rows_of(table: &Table) -> Vec<String> {
    let (batches, _) = table.scan(&ScanRequest::default()).unwrap();
    let mut out = Vec::new();
    for batch in batches {
        let schema = batch.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["tenant", "id", "v"]);
        for row in 0..batch.num_rows() {
            let tenant = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap().value(row);
            let id = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap().value(row);
            let v = batch.column(2).as_any().downcast_ref::<Int64Array>().unwrap().value(row);
            out.push(format!(r#"{{"tenant": "{tenant}", "id": {id}, "v": {v}}}"#));
        }
    }
    out
}

#[test]
fn a_withdrawn_version_gives_its_key_back_its_previous_version() {
    let table = Table::create(TableConfig { primary_key: vec![FieldPath::parse("id").unwrap()], ..TableConfig::in_memory(8 << 20) }).unwrap();
    table.ingest(&[br#"{"id": 1, "v": 1}"#, br#"{"id": 2, "v": 1}"#]).unwrap();
    let update = table.ingest(&[br#"{"id": 1, "v": 2}"#]).unwrap();
    let delete = table.ingest_ops(&[br#"{"id": 2}"#], &[RecordOp::Delete]).unwrap();
    assert_eq!(table.stats().keys.unwrap().live, 1);
    // Both batches failed to become durable: they are withdrawn.
    assert_eq!(table.withdraw(&update.addresses).records + table.withdraw(&delete.addresses).records, 2);
    let expected: Oracle = [(1, json!({"id": 1, "v": 1})), (2, json!({"id": 2, "v": 1}))].into();
    assert_eq!(rows(&table, None, LogAddress::MAX), expected);
    assert_eq!(rows(&table, Some("id = 1"), LogAddress::MAX), [(1, json!({"id": 1, "v": 1}))].into());
    assert_eq!(table.stats().keys.unwrap().live, 2);
}

/// An on-disk keyed table of `keys` keys, each written `rounds` times (`{"id", "round"}`),
/// and its oracle.
fn updated_table(dir: &std::path::Path, keys: i64, rounds: i64) -> (Arc<Table>, Oracle) {
    let table = Table::create(config(dir)).unwrap();
    let mut oracle = Oracle::new();
    for round in 0..rounds {
        update_all(&table, &mut oracle, keys, round);
    }
    (table, oracle)
}

fn update_all(table: &Table, oracle: &mut Oracle, keys: i64, round: i64) {
    let documents: Vec<Value> = (0..keys).map(|id| json!({"id": id, "round": round, "pad": "p".repeat(100)})).collect();
    let texts: Vec<String> = documents.iter().map(Value::to_string).collect();
    table.ingest(&texts.iter().map(String::as_bytes).collect::<Vec<_>>()).unwrap();
    oracle.extend(documents.into_iter().map(|d| (d["id"].as_i64().unwrap(), d)));
}

#[test]
fn a_compaction_waits_for_scans_with_older_snapshots_before_dropping_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let (table, oracle) = updated_table(dir.path(), 40, 3);
    table.flush().unwrap();
    let request = ScanRequest { batch_rows: 4, ..ScanRequest::default() };
    let plan = table.plan(&request);
    let mut seen = Oracle::new();
    let mut during = None;
    table
        .scan_json(&request, &plan, &mut |batch| {
            if during.is_none() {
                // The scan holds its snapshot open: the compaction copies, raises the horizon,
                // and leaves the head for later.
                during = Some(table.compact_log(LogAddress::MAX, std::time::Duration::from_millis(200)).unwrap());
            }
            let column = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            for text in column.iter().flatten() {
                let value: Value = serde_json::from_str(text).unwrap();
                assert!(seen.insert(value["id"].as_i64().unwrap(), value).is_none());
            }
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
    let during = during.unwrap();
    assert!(during.deferred, "{during:?}");
    assert_eq!(during.truncate.versions_copied, 40);
    assert_eq!(during.truncate.begin_address, during.truncate.previous_begin_address);
    assert_eq!(seen, oracle, "the scan that outlived the copies saw each key once");
    // The head was kept, so the horizon went back: the old plan still answers, once per key.
    assert_eq!(table.stats().keys.unwrap().snapshot_horizon, LogAddress::ZERO);
    let mut again = 0;
    table.scan_json(&request, &plan, &mut |batch| {
        again += batch.num_rows();
        Ok(ControlFlow::Continue(()))
    })
    .unwrap();
    assert_eq!(again, oracle.len());
    assert_eq!(rows(&table, None, LogAddress::MAX), oracle);
    // No scan runs: the next compaction drops the head (the copies are already there), and
    // the old plan's snapshot is below the horizon now: planned again, the query answers.
    table.flush().unwrap();
    let after = table.compact_log(LogAddress::MAX, std::time::Duration::from_millis(200)).unwrap();
    assert!(!after.deferred && after.truncate.begin_address > during.truncate.begin_address, "{after:?}");
    assert!(matches!(table.scan_json(&request, &plan, &mut |_| Ok(ControlFlow::Continue(()))), Err(Error::SnapshotTooOld { .. })));
    assert_eq!(rows(&table, None, LogAddress::MAX), oracle);
    assert_eq!(table.stats().keys.unwrap().superseded, 0);
}

#[test]
fn retention_on_a_keyed_table_drops_obsolete_versions_and_never_a_live_one() {
    let dir = tempfile::tempdir().unwrap();
    let (table, mut oracle) = updated_table(dir.path(), 30, 4);
    let append_only = Table::create(TableConfig::in_memory(1 << 20)).unwrap();
    assert!(matches!(append_only.compact_log(LogAddress::MAX, std::time::Duration::ZERO), Err(Error::InvalidOperation(_))));
    // Half the keys deleted, then a head truncation by size, then by address.
    let deletes: Vec<String> = (0..15).map(|id| json!({"id": id}).to_string()).collect();
    table.ingest_ops(&deletes.iter().map(String::as_bytes).collect::<Vec<_>>(), &[RecordOp::Delete; 15]).unwrap();
    oracle.retain(|id, _| *id >= 15);
    table.flush().unwrap();
    let report = table.truncate(shoal_core::retention::RetentionRule::KeepBytes(4096)).unwrap();
    assert!(report.begin_address > report.previous_begin_address, "{report:?}");
    // The live versions below the new head were copied (the last page's stay where they are).
    assert!((1..=15).contains(&report.versions_copied), "{report:?}");
    assert_eq!(rows(&table, None, LogAddress::MAX), oracle);
    assert_eq!(count(&table, None), 15);
    assert_eq!(table.stats().keys.unwrap().keys, 30, "the tombstones, newest, are above the new head");
    // Everything flushed dropped: the tombstones go, the live versions are copied again.
    table.flush().unwrap();
    let report = table.truncate(shoal_core::retention::RetentionRule::BeforeAddress(LogAddress::MAX)).unwrap();
    assert_eq!(report.versions_copied, 15, "{report:?}");
    assert_eq!(rows(&table, None, LogAddress::MAX), oracle);
    let keys = table.stats().keys.unwrap();
    assert_eq!((keys.live, keys.keys, keys.superseded), (15, 15, 0), "the deleted keys' tombstones went with the head");
    // Recovery reads the compacted log back to the same rows and the same horizon.
    table.close().unwrap();
    drop(table);
    let (table, _) = Table::open(config(dir.path())).unwrap();
    assert_eq!(rows(&table, None, LogAddress::MAX), oracle);
    assert_eq!(table.stats().keys.unwrap().snapshot_horizon, keys.snapshot_horizon);
    assert!(matches!(try_rows(&table, None, keys.snapshot_horizon - 1), Err(Error::SnapshotTooOld { .. })));
}

#[test]
fn the_default_policy_keeps_the_superseded_versions_table_and_the_log_bounded_under_updates() {
    let dir = tempfile::tempdir().unwrap();
    let (table, mut oracle) = updated_table(dir.path(), 50, 1);
    let mut largest = (0u64, 0u64, 0u64);
    for round in 1..40 {
        update_all(&table, &mut oracle, 50, round);
        table.flush().unwrap();
        table.apply_retention().unwrap();
        let stats = table.stats();
        let keys = stats.keys.unwrap();
        largest = (largest.0.max(keys.superseded), largest.1.max(keys.memory_bytes), largest.2.max(stats.tail_address - stats.begin_address));
    }
    assert_eq!(rows(&table, None, LogAddress::MAX), oracle);
    let written = table.stats().tail_address;
    // Obsolete versions reach half of all (50 live) before a compaction drops them: at
    // most about 50 superseded entries, a log of about twice the live rows (pages of
    // 4 KiB; 50 rows of ~130 bytes are ~2 pages), against 40 rounds written.
    assert!(largest.0 <= 100, "superseded entries peaked at {}", largest.0);
    assert!(largest.1 <= 100 * 24 + 50 * 60, "key index memory peaked at {} bytes", largest.1);
    assert!(largest.2 <= 8 * 4096, "the log between begin and tail peaked at {} bytes (of {written} written)", largest.2);
}

/// The `(id, round)` pairs a query with output columns `id, round` returns, sorted by id,
/// and its stats; panics on two rows of one key.
fn column_rows(table: &Table, filter: Option<&str>, to_address: LogAddress) -> (Vec<(i64, i64)>, shoal_core::scan::ScanStats) {
    let request = ScanRequest {
        filter: filter.map(|f| parse_expr(f).unwrap()),
        columns: vec![FieldPath::parse("id").unwrap(), FieldPath::parse("round").unwrap()],
        to_address,
        ..ScanRequest::default()
    };
    let (batches, stats) = table.scan(&request).unwrap();
    let mut out = Vec::new();
    for batch in batches {
        let ids = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let rounds = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        out.extend((0..batch.num_rows()).map(|row| (ids.value(row), rounds.value(row))));
    }
    out.sort_unstable();
    assert!(out.windows(2).all(|w| w[0].0 != w[1].0), "two versions of one key: {filter:?} as of {to_address}");
    (out, stats)
}

#[test]
fn columnar_scans_of_a_keyed_table_see_one_version_per_key_at_every_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.columnar =
        shoal_core::columnar::ColumnarConfig { file_log_bytes: 2 << 12, row_group_rows: 16, idle_ms: 0, ..Default::default() };
    let table = Table::create(config).unwrap();
    let mut oracle = Oracle::new();
    let mut snapshots: Vec<(LogAddress, Oracle)> = Vec::new();
    for round in 0..4 {
        update_all(&table, &mut oracle, 60, round);
        // Every fifth key deleted in odd rounds (it comes back in the next).
        if round % 2 == 1 {
            let deletes: Vec<String> = (0..60).step_by(5).map(|id| json!({"id": id}).to_string()).collect();
            table.ingest_ops(&deletes.iter().map(String::as_bytes).collect::<Vec<_>>(), &[RecordOp::Delete; 12]).unwrap();
            oracle.retain(|id, _| id % 5 != 0);
        }
        snapshots.push((table.stats().complete_until, oracle.clone()));
    }
    // The compactor covers every flushed page (files hold every version, tombstones excluded).
    table.flush().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while table.stats().columnar.backlog_bytes > 0 || table.stats().columnar.files == 0 {
        assert!(std::time::Instant::now() < deadline, "compaction did not catch up: {:?}", table.stats().columnar);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pairs = |oracle: &Oracle, keep: &dyn Fn(i64) -> bool| -> Vec<(i64, i64)> {
        oracle.iter().filter(|(id, _)| keep(**id)).map(|(id, v)| (*id, v["round"].as_i64().unwrap())).collect()
    };
    // Columns straight from the files, and records read back by `_address` (JSON output).
    let (all, stats) = column_rows(&table, None, LogAddress::MAX);
    assert_eq!(all, pairs(&oracle, &|_| true));
    assert!(stats.columnar_rows > 0 && stats.versions_skipped > 0, "{stats:?}");
    let (some, _) = column_rows(&table, Some("round >= 2 AND id < 30"), LogAddress::MAX);
    assert_eq!(some, pairs(&oracle, &|id| id < 30));
    assert_eq!(rows(&table, Some("round >= 0"), LogAddress::MAX), oracle);
    assert_eq!(count(&table, Some("round >= 0")), i64::try_from(oracle.len()).unwrap());
    // Time travel: the versions each snapshot saw, from the same files (chain walks decide).
    for (address, then) in &snapshots {
        let (seen, stats) = column_rows(&table, Some("round >= 0"), *address);
        assert_eq!(seen, pairs(then, &|_| true), "as of {address}");
        assert_eq!(&rows(&table, Some("round >= 0"), *address), then, "as of {address}, JSON");
        assert!(stats.columnar_rows > 0, "as of {address}: {stats:?}");
    }
    // A log compaction drops the files below the new head with it; answers do not change.
    let report = table.compact_log(LogAddress::MAX, std::time::Duration::from_secs(5)).unwrap();
    assert!(report.truncate.begin_address > report.truncate.previous_begin_address, "{report:?}");
    assert_eq!(column_rows(&table, None, LogAddress::MAX).0, pairs(&oracle, &|_| true));
    assert_eq!(rows(&table, Some("round >= 0"), LogAddress::MAX), oracle);
}

#[test]
fn a_keyed_tables_reservation_counts_its_key_index() {
    let table = Table::create(TableConfig { primary_key: vec![FieldPath::parse("id").unwrap()], ..TableConfig::in_memory(8 << 20) }).unwrap();
    let empty = table.reserved_bytes();
    let texts: Vec<String> = (0..1000).map(|id| json!({"id": id}).to_string()).collect();
    table.ingest(&texts.iter().map(String::as_bytes).collect::<Vec<_>>()).unwrap();
    let memory = table.stats().keys.unwrap().memory_bytes;
    assert!(memory >= 1000 * 48, "{memory}");
    assert_eq!(table.memory_stats().key_index_bytes, memory);
    assert!(table.reserved_bytes() - empty >= memory, "{:?}", table.memory_stats());
}
