//! Keyed tables (issue 18): random sequences of upserts, deletes and merges — repeated
//! keys, keys that come back after a delete, merges that add, change and remove nested
//! fields — against a dictionary oracle. After every batch, every kind of query (full
//! scans, index scans on the key and on a secondary PSF, filters no PSF covers, pushed
//! aggregates, the key index's counts) equals the oracle; at the end, queries at every
//! earlier snapshot (`to_address`, time travel) equal the oracle of that moment, and so do
//! they after the table is closed and recovered. Pages are small and the memory budget
//! tiny, so versions and chains reach the segment files.

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
use shoal_core::{Error, FieldPath};

type Oracle = BTreeMap<i64, Value>;

/// RFC 7386, written out for the oracle (the engine uses the `json-patch` crate).
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
fn rows(table: &Table, filter: Option<&str>, to_address: u64) -> Oracle {
    let request = ScanRequest { filter: filter.map(|f| parse_expr(f).unwrap()), to_address, ..ScanRequest::default() };
    let plan = table.plan(&request);
    let mut out = Oracle::new();
    table
        .scan_json(&request, &plan, &mut |batch| {
            let column = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            for text in column.iter().flatten() {
                let value: Value = serde_json::from_str(text).unwrap();
                let id = value["id"].as_i64().unwrap();
                assert!(out.insert(id, value).is_none(), "two versions of key {id} returned by {filter:?}");
            }
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
    out
}

fn count(table: &Table, filter: Option<&str>) -> i64 {
    let request = ScanRequest { filter: filter.map(|f| parse_expr(f).unwrap()), ..ScanRequest::default() };
    let plan = table.plan(&request);
    let (batch, _) = table.aggregate_with_plan(&request, &plan, &[Aggregate { function: AggregateFunction::Count, column: None }]).unwrap();
    batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0)
}

fn check(table: &Table, oracle: &Oracle) {
    assert_eq!(&rows(table, None, u64::MAX), oracle, "every row");
    for key in 0..6 {
        let one = rows(table, Some(&format!("id = {key}")), u64::MAX);
        assert_eq!(one.get(&key), oracle.get(&key), "id = {key}");
        assert!(one.len() <= 1);
    }
    for (filter, keep) in [
        ("g = 1", &(|v: &Value| v["g"] == json!(1)) as &dyn Fn(&Value) -> bool),
        ("g >= 1", &|v: &Value| v["g"].as_i64().is_some_and(|g| g >= 1)),
        ("n.a < 50", &|v: &Value| v["n"]["a"].as_i64().is_some_and(|a| a < 50)),
    ] {
        let expected: Oracle = oracle.iter().filter(|(_, v)| keep(v)).map(|(k, v)| (*k, v.clone())).collect();
        assert_eq!(rows(table, Some(filter), u64::MAX), expected, "{filter}");
    }
    assert_eq!(count(table, None), i64::try_from(oracle.len()).unwrap(), "count(*)");
    assert_eq!(table.stats().keys.unwrap().live, oracle.len() as u64, "live keys");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn keyed_tables_equal_a_dictionary_oracle(batches in prop::collection::vec(prop::collection::vec(step(), 1..8), 1..12)) {
        let dir = tempfile::tempdir().unwrap();
        let table = Table::create(config(dir.path())).unwrap();
        table.register_psf("g", &PsfSpec::Projection { field: "g".into() }).unwrap();
        let mut oracle = Oracle::new();
        let mut snapshots: Vec<(u64, Oracle)> = Vec::new();
        for batch in &batches {
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
            snapshots.push((table.stats().complete_until, oracle.clone()));
        }
        for (address, then) in &snapshots {
            prop_assert_eq!(&rows(&table, None, *address), then, "as of {}", address);
        }
        table.flush().unwrap();
        table.close().unwrap();
        drop(table);
        let (table, report) = Table::open(config(dir.path())).unwrap();
        prop_assert!(report.keys > 0);
        check(&table, &oracle);
        for (address, then) in &snapshots {
            prop_assert_eq!(&rows(&table, None, *address), then, "recovered, as of {}", address);
        }
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
    assert_eq!(table.withdraw(&update.addresses) + table.withdraw(&delete.addresses), 2);
    let expected: Oracle = [(1, json!({"id": 1, "v": 1})), (2, json!({"id": 2, "v": 1}))].into();
    assert_eq!(rows(&table, None, u64::MAX), expected);
    assert_eq!(rows(&table, Some("id = 1"), u64::MAX), [(1, json!({"id": 1, "v": 1}))].into());
    assert_eq!(table.stats().keys.unwrap().live, 2);
}
