use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::*;
use shoal_core::scan::AggregateFunction;
use crate::ErrorClass;

fn parse(text: &str) -> SqlStatement {
    parse_sql(text, Parameters::Bound(&[])).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn refused(text: &str) -> String {
    let error = parse_sql(text, Parameters::Bound(&[])).expect_err(text);
    assert_eq!(error.class, ErrorClass::InvalidArgument, "{text}: {error}");
    error.message
}

#[test]
fn a_select_becomes_a_query_command() {
    let s = parse("SELECT id, actor.login AS who FROM events WHERE type = 'PushEvent' AND payload.size > 5 LIMIT 10");
    assert!(!s.explain);
    assert_eq!(s.command.table, "events");
    assert_eq!(s.command.columns, vec!["id", "actor.login"]);
    assert_eq!(s.command.filter.as_deref(), Some("type = 'PushEvent' AND payload.size > 5"));
    assert_eq!(s.command.limit, Some(10));
    assert_eq!(s.command.max_endpoints, None);
    assert_eq!(
        s.shape.projection,
        Some(vec![("id".to_owned(), "id".to_owned()), ("actor.login".to_owned(), "who".to_owned())])
    );
}

#[test]
fn star_qualified_tables_quoted_paths_and_keywords() {
    let s = parse("select * from shoal.public.\"my-table\" where \"payload\".\"a.b\" = 1 and type in ('x', 'y');");
    assert_eq!(s.command.table, "my-table");
    assert!(s.command.columns.is_empty());
    assert_eq!(s.shape.projection, None);
    let filter = s.command.filter.unwrap();
    assert!(filter.contains("payload.\"a.b\" = 1"), "{filter}");
    assert_eq!(parse("SELECT date, user FROM t").command.columns, vec!["date", "user"]);
    assert!(refused("SELECT * FROM other.public.t").contains("unknown table"));
}

#[test]
fn aggregates_run_over_one_endpoint() {
    let s = parse("SELECT count(*) AS n, MIN(payload.size), max(created_at) FROM events WHERE type = 'PushEvent'");
    assert_eq!(
        serde_json::to_value(&s.command.aggregates).unwrap(),
        serde_json::json!([{"function": "count"}, {"function": "min", "column": "payload.size"}, {"function": "max", "column": "created_at"}])
    );
    assert_eq!(s.command.max_endpoints, Some(1));
    assert_eq!(s.command.limit, None);
    assert_eq!(s.shape.projection.unwrap()[0], ("count(*)".to_owned(), "n".to_owned()));
}

#[test]
fn order_by_fetches_its_keys_and_holds_the_limit() {
    let s = parse("SELECT id FROM events ORDER BY created_at DESC, id LIMIT 5 OFFSET 2");
    assert_eq!(s.command.columns, vec!["id", "created_at"]);
    assert_eq!(s.command.limit, None, "the sort needs every row");
    assert_eq!(s.command.max_endpoints, Some(1));
    assert_eq!(
        s.shape.order_by,
        vec![
            SortKey { column: "created_at".into(), descending: true, nulls_first: true },
            SortKey { column: "id".into(), descending: false, nulls_first: false },
        ]
    );
    assert_eq!((s.shape.offset, s.shape.limit), (2, Some(5)));
    let by_alias = parse("SELECT actor.login AS who FROM e ORDER BY who NULLS FIRST");
    assert_eq!(by_alias.shape.order_by[0].column, "actor.login");
    assert_eq!(parse("SELECT a, b FROM e ORDER BY 2").shape.order_by[0].column, "b");
    let offset_only = parse("SELECT a FROM e LIMIT 3 OFFSET 4");
    assert_eq!(offset_only.command.limit, Some(7));
    assert_eq!(offset_only.command.max_endpoints, Some(1));
}

#[test]
fn explain_and_parameters() {
    assert!(parse("EXPLAIN SELECT * FROM events WHERE type = 'x'").explain);
    let text = "SELECT id FROM events WHERE actor.login = $1 AND payload.size > $2 AND id <> $2";
    assert_eq!(count_placeholders(text).unwrap(), 2);
    assert!(count_placeholders("SELECT a FROM e WHERE a = ? AND b = $2").unwrap_err().message.contains("mixes"));
    // Found by the protocol fuzzer: a huge placeholder number must not size an allocation.
    for huge in ["SELECT a FROM e WHERE a = ?55555555555555555", "SELECT a FROM e WHERE a = $4097", "SELECT a FROM e WHERE a = $99999999999999999999999"] {
        assert!(parse_unbound(huge).is_err(), "{huge}");
    }
    assert_eq!(count_placeholders("SELECT a FROM e WHERE a = $4096").unwrap(), 4096);
    let values = [Literal::Str("it's".into()), Literal::Int(-3)];
    let s = parse_sql(text, Parameters::Bound(&values)).unwrap();
    assert_eq!(s.command.filter.as_deref(), Some("actor.login = 'it''s' AND payload.size > -3 AND id <> -3"));
    let unbound = parse_sql("SELECT id FROM events WHERE id = ?", Parameters::Bound(&[])).unwrap_err();
    assert!(unbound.message.contains("parameter 1"), "{unbound}");
    assert!(parse_sql(text, Parameters::Unbound).is_ok());
}

#[test]
fn what_the_engine_cannot_do_is_refused_by_name() {
    for (text, named) in [
        ("SELECT count(*) FROM e HAVING count(*) > 1", "HAVING needs GROUP BY"),
        ("SELECT type, count(*) FROM e GROUP BY type HAVING actor.login = 'x'", "not a GROUP BY key"),
        ("SELECT type, actor, count(*) FROM e GROUP BY type", "`actor` must be a GROUP BY key"),
        ("SELECT * FROM e GROUP BY type", "SELECT *"),
        ("SELECT type FROM e GROUP BY type ORDER BY id", "order by a key"),
        ("SELECT avg(DISTINCT size) FROM e", "DISTINCT"),
        ("SELECT type, count(*) FROM e GROUP BY ROLLUP (type)", "ROLLUP"),
        ("SELECT DISTINCT * FROM e", "DISTINCT takes paths"),
        ("SELECT DISTINCT count(*) FROM e", "DISTINCT takes paths"),
        ("SELECT DISTINCT ON (type) type FROM e", "DISTINCT ON"),
        ("SELECT a FROM e JOIN f ON e.a = f.a", "JOIN"),
        ("SELECT a FROM e, f", "one table"),
        ("SELECT a + 1 FROM e", "+"),
        ("SELECT id, count(*) FROM e", "add GROUP BY"),
        ("SELECT a FROM e UNION SELECT a FROM f", "UNION"),
        ("INSERT INTO e VALUES (1)", "only SELECT"),
        ("SELECT a FROM e WHERE a = b", "two fields"),
        ("SELECT a FROM e WHERE soundex(a) = 'x'", "soundex"),
        ("SELECT a FROM e LIMIT -1", "LIMIT"),
        ("SELECT a, b AS a FROM e", "named \"a\""),
        ("SELECT a FROM e ORDER BY count(*)", "select list"),
        ("SELEC a FROM e", "syntax error"),
        ("SELECT a FROM e; SELECT b FROM e", "after the end"),
        ("SELECT 1", "FROM"),
    ] {
        let message = refused(text);
        assert!(message.contains(named), "{text}: {message}");
    }
}

#[test]
fn huge_statements_are_refused_without_exhausting_the_stack() {
    // Past the operator limit: refused before parsing.
    let many = format!("SELECT id FROM e WHERE {}", vec!["id >= 0"; 5000].join(" AND "));
    assert!(refused(&many).contains("operators"));
    // At the limit: parsed, lowered and dropped on a small stack.
    let within = format!("SELECT id FROM e WHERE {}", vec!["id >= 0"; 2000].join(" OR "));
    let filter = std::thread::Builder::new()
        .stack_size(512 << 10)
        .spawn(move || parse_sql(&within, Parameters::Bound(&[])).map(|s| s.command.filter.unwrap().len()))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    assert!(filter > 2000 * 7);
    let nested = format!("SELECT id FROM e WHERE {}id = 1{}", "(".repeat(200), ")".repeat(200));
    assert!(refused(&nested).contains("nested too deeply"));
    assert!(refused(&"x".repeat(MAX_EXPR_BYTES + 1)).contains("bytes long"));
}

fn batch(ids: &[i64], names: &[Option<&str>]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true), Field::new("actor.login", DataType::Utf8, true)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(StringArray::from(names.to_vec()))]).unwrap()
}

fn ids(batch: &RecordBatch, column: usize) -> Vec<i64> {
    batch.column(column).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()
}

#[test]
fn a_shaper_sorts_offsets_limits_and_renames() {
    let s = parse("SELECT actor.login AS who, id FROM e ORDER BY id DESC LIMIT 3 OFFSET 1");
    let input = batch(&[], &[]).schema();
    let mut shaper = Shaper::new(&s.shape, &input).unwrap();
    assert_eq!(shaper.schema().field(0).name(), "who");
    // Enough batches that the held rows are cut to the best offset + limit on the way.
    for chunk in (0..20_000i64).collect::<Vec<_>>().chunks(1000) {
        let names: Vec<Option<&str>> = chunk.iter().map(|_| Some("a")).collect();
        assert!(shaper.push(batch(chunk, &names)).unwrap().is_none());
    }
    assert!(shaper.held_rows < 20_000);
    let out = shaper.finish().unwrap().unwrap();
    assert_eq!(ids(&out, 1), vec![19_998, 19_997, 19_996]);
}

#[test]
fn a_streaming_shaper_skips_and_stops() {
    let s = parse("SELECT id FROM e LIMIT 3 OFFSET 2");
    let mut shaper = Shaper::new(&s.shape, &batch(&[], &[]).schema()).unwrap();
    let first = shaper.push(batch(&[1], &[None])).unwrap();
    assert!(first.is_none());
    let second = shaper.push(batch(&[2, 3, 4], &[None, None, None])).unwrap().unwrap();
    assert_eq!(ids(&second, 0), vec![3, 4]);
    assert!(!shaper.is_done());
    let third = shaper.push(batch(&[5, 6], &[None, None])).unwrap().unwrap();
    assert_eq!(ids(&third, 0), vec![5]);
    assert!(shaper.is_done());
    assert_eq!(third.schema().fields().len(), 1);
}

#[test]
fn nulls_sort_last_ascending_and_first_descending() {
    let names = [Some("b"), None, Some("a")];
    for (text, expected) in [
        ("SELECT id FROM e ORDER BY actor.login", vec![3, 1, 2]),
        ("SELECT id FROM e ORDER BY actor.login DESC", vec![2, 1, 3]),
        ("SELECT id FROM e ORDER BY actor.login NULLS FIRST", vec![2, 3, 1]),
    ] {
        let s = parse(text);
        let mut shaper = Shaper::new(&s.shape, &batch(&[], &[]).schema()).unwrap();
        shaper.push(batch(&[1, 2, 3], &names)).unwrap();
        assert_eq!(ids(&shaper.finish().unwrap().unwrap(), 0), expected, "{text}");
    }
}

#[test]
fn parameters_are_typed_by_the_fields_they_are_compared_with() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::config::EngineConfig { data_dir: dir.path().to_path_buf(), in_memory: true, memory_budget_bytes: 4 << 20, ..Default::default() };
    let catalog = crate::catalog::Catalog::open(config).unwrap();
    let create: crate::protocol::CreateTable = serde_json::from_str(r#"{"name": "e", "page_size_bits": 16}"#).unwrap();
    catalog.create(&create).unwrap();
    let entry = catalog.get("e").unwrap();
    let records = StringArray::from(vec![r#"{"id": 1, "score": 1.5, "ok": true, "actor": {"login": "a"}, "tags": ["x"]}"#]);
    let batch = RecordBatch::try_new(Arc::new(Schema::new(vec![Field::new("json", DataType::Utf8, false)])), vec![Arc::new(records)]).unwrap();
    crate::ops::acknowledge(crate::ops::ingest_batch(&entry, &batch, &crate::protocol::BatchMetadata::default(), 0).unwrap()).unwrap();
    let schema = parameter_schema(
        &catalog,
        "SELECT id FROM e WHERE id = ? AND (score > ? OR ok = ?) AND actor.login IN ('b', ?) AND tags = ? AND nope = ? ORDER BY id LIMIT 3",
    )
    .unwrap();
    let types: Vec<_> = schema.fields().iter().map(|f| (f.name().clone(), f.data_type().clone())).collect();
    assert_eq!(
        types,
        vec![
            ("1".into(), DataType::Int64),
            ("2".into(), DataType::Float64),
            ("3".into(), DataType::Boolean),
            ("4".into(), DataType::Utf8),
            ("5".into(), DataType::Utf8),
            ("6".into(), DataType::Utf8),
        ]
    );
    assert!(parameter_schema(&catalog, "SELECT id FROM e").unwrap().fields().is_empty());
    // Where a string cannot stand for a placeholder, every parameter is Utf8; where NULL
    // cannot (a LIKE pattern), a prepared statement still parses.
    let limited = parameter_schema(&catalog, "SELECT id FROM e WHERE id = ? LIMIT ?").unwrap();
    assert_eq!(limited.fields().iter().map(|f| f.data_type().clone()).collect::<Vec<_>>(), vec![DataType::Utf8, DataType::Utf8]);
    assert!(parse_sql("SELECT id FROM e WHERE actor.login LIKE ?", Parameters::Unbound).is_err());
    assert!(parse_unbound("SELECT id FROM e WHERE actor.login LIKE ?").is_ok());
    assert_eq!(parameter_schema(&catalog, "SELECT id FROM e WHERE actor.login LIKE ?").unwrap().field(0).data_type(), &DataType::Utf8);
    assert_eq!(parameter_schema(&catalog, "SELECT id FROM gone WHERE id = ?").unwrap_err().class, ErrorClass::NotFound);
}


#[test]
fn group_by_scans_keys_and_arguments_and_groups_them() {
    let s = parse("SELECT type, count(*) AS n, sum(payload.size), avg(payload.size) FROM events WHERE id > 0 GROUP BY type ORDER BY n DESC LIMIT 3");
    assert_eq!(s.command.columns, vec!["type", "payload.size"]);
    assert!(s.command.aggregates.is_empty() && s.command.limit.is_none());
    assert_eq!(s.command.max_endpoints, Some(1));
    let grouping = s.shape.group_by.as_ref().unwrap();
    assert_eq!(grouping.keys, vec!["type"]);
    assert_eq!(grouping.aggregates.iter().map(AggregateCall::name).collect::<Vec<_>>(), vec!["count(*)", "sum(payload.size)", "avg(payload.size)"]);
    assert_eq!(s.shape.order_by[0].column, "count(*)");
    // Without GROUP BY every aggregate (sum and avg too) is pushed into the scan: one row,
    // computed next to the data, on one endpoint.
    let total = parse("SELECT sum(payload.size) AS total, avg(payload.size), count(*) FROM events");
    assert!(total.shape.group_by.is_none());
    assert_eq!(
        total.command.aggregates.iter().map(|a| a.function).collect::<Vec<_>>(),
        vec![AggregateFunction::Sum, AggregateFunction::Avg, AggregateFunction::Count]
    );
    assert_eq!(total.command.max_endpoints, Some(1));
    assert!(parse("SELECT count(*) FROM events").shape.group_by.is_none());
}

fn typed_batch(types: &[Option<&str>], sizes: &[Option<i64>]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("type", DataType::Utf8, true), Field::new("payload.size", DataType::Int64, true)]));
    RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(types.to_vec())), Arc::new(Int64Array::from(sizes.to_vec()))]).unwrap()
}

#[test]
fn a_shaper_groups_then_sorts_and_limits() {
    let s = parse("SELECT type AS t, count(*) AS n, count(payload.size), sum(payload.size) AS s, avg(payload.size), min(payload.size), max(type) FROM e GROUP BY type ORDER BY n DESC, t LIMIT 3");
    let mut shaper = Shaper::new(&s.shape, &typed_batch(&[], &[]).schema()).unwrap();
    assert_eq!(
        shaper.schema().fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>(),
        vec!["t", "n", "count(payload.size)", "s", "avg(payload.size)", "min(payload.size)", "max(type)"]
    );
    assert!(!shaper.is_done());
    shaper.push(typed_batch(&[Some("a"), Some("b"), None, Some("a")], &[Some(1), None, Some(5), Some(3)])).unwrap();
    shaper.push(typed_batch(&[Some("c"), Some("b"), Some("a"), None], &[Some(2), Some(4), None, Some(7)])).unwrap();
    let out = shaper.finish().unwrap().unwrap();
    let rows: Vec<String> = (0..out.num_rows())
        .map(|r| {
            (0..out.num_columns())
                .map(|c| arrow_cast::display::array_value_to_string(out.column(c), r).unwrap())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    // a: 3 rows (sizes 1, 3, null); b: 2 (null, 4); null type: 2 (5, 7); c: 1. Ties by key; nulls last.
    assert_eq!(rows, vec!["a|3|2|4|2.0|1|a", "b|2|1|4|4.0|4|b", "|2|2|12|6.0|5|"]);
}

#[test]
fn having_keeps_the_groups_its_condition_holds_for() {
    // An aggregate of the select list (by its call and by its alias), one only HAVING names
    // (computed, not shown), and a group key.
    let s = parse("SELECT type AS t, count(*) AS n FROM e GROUP BY type HAVING count(*) >= 2 AND n < 4 AND max(payload.size) > 3 AND type IS NOT NULL ORDER BY n DESC");
    let grouping = s.shape.group_by.as_ref().unwrap();
    assert_eq!(grouping.aggregates.iter().map(AggregateCall::name).collect::<Vec<_>>(), vec!["count(*)", "max(payload.size)"]);
    assert_eq!(s.command.columns, vec!["type", "payload.size"]);
    let mut shaper = Shaper::new(&s.shape, &typed_batch(&[], &[]).schema()).unwrap();
    assert_eq!(shaper.schema().fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>(), vec!["t", "n"]);
    shaper.push(typed_batch(&[Some("a"), Some("b"), None, Some("a")], &[Some(1), None, Some(5), Some(3)])).unwrap();
    shaper.push(typed_batch(&[Some("c"), Some("b"), Some("a"), None], &[Some(2), Some(4), None, Some(7)])).unwrap();
    let out = shaper.finish().unwrap().unwrap();
    // a: 3 rows, max 3 (not > 3); b: 2 rows, max 4: kept; null type: 2 rows, max 7, but its key
    // is null; c: 1 row.
    let kept: Vec<String> = (0..out.num_rows()).map(|r| arrow_cast::display::array_value_to_string(out.column(0), r).unwrap()).collect();
    assert_eq!(kept, vec!["b"]);
}

#[test]
fn count_distinct_counts_distinct_non_null_values_with_and_without_group_by() {
    let rows = |text: &str| -> Vec<String> {
        let s = parse(text);
        let mut shaper = Shaper::new(&s.shape, &typed_batch(&[], &[]).schema()).unwrap();
        shaper.push(typed_batch(&[Some("a"), Some("b"), None, Some("a")], &[Some(1), None, Some(5), Some(1)])).unwrap();
        shaper.push(typed_batch(&[Some("c"), Some("b"), Some("a"), None], &[Some(2), Some(4), Some(3), Some(5)])).unwrap();
        let out = shaper.finish().unwrap().unwrap();
        (0..out.num_rows())
            .map(|r| (0..out.num_columns()).map(|c| arrow_cast::display::array_value_to_string(out.column(c), r).unwrap()).collect::<Vec<_>>().join("|"))
            .collect()
    };
    // Without GROUP BY: one group (the scan does not compute it), next to count(*).
    let s = parse("SELECT count(DISTINCT type) AS kinds, count(*) FROM e");
    assert!(s.command.aggregates.is_empty() && s.shape.group_by.as_ref().unwrap().keys.is_empty());
    assert_eq!(rows("SELECT count(DISTINCT type) AS kinds, count(*) FROM e"), vec!["3|8"]);
    // Per group: a's sizes 1, 1, 3; b's null, 4; null type's 5, 5; c's 2.
    assert_eq!(
        rows("SELECT type, count(DISTINCT payload.size) FROM e GROUP BY type ORDER BY type"),
        vec!["a|2", "b|1", "c|1", "|1"]
    );
    assert_eq!(parse("SELECT count(DISTINCT type) FROM e").shape.projection.unwrap()[0].1, "count(DISTINCT type)");
    for (text, named) in [("SELECT sum(DISTINCT x) FROM e", "count(DISTINCT path) only"), ("SELECT count(DISTINCT *) FROM e", "count(DISTINCT *)")] {
        assert!(refused(text).contains(named), "{text}: {}", refused(text));
    }
}

#[test]
fn keyless_groups_answer_one_row_even_for_no_rows() {
    // (SQL no longer produces a keyless grouping, the scan computes those aggregates; the
    // shaper still answers one, e.g. from a ticket of an older daemon.)
    let call = |function, column: Option<&str>| AggregateCall { function, column: column.map(str::to_owned) };
    let grouping = |aggregates| ResultShape { group_by: Some(Grouping { keys: vec![], aggregates }), ..ResultShape::default() };
    let s = grouping(vec![
        call(SqlAggregate::Count, None),
        call(SqlAggregate::Sum, Some("payload.size")),
        call(SqlAggregate::Avg, Some("payload.size")),
    ]);
    let mut shaper = Shaper::new(&s, &typed_batch(&[], &[]).schema()).unwrap();
    let out = shaper.finish().unwrap().unwrap();
    assert_eq!(out.num_rows(), 1);
    assert_eq!(out.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0), 0);
    assert!(out.column(1).is_null(0) && out.column(2).is_null(0));
    // Types the aggregate does not apply to are refused by name.
    let strings = grouping(vec![call(SqlAggregate::Sum, Some("type"))]);
    let error = Shaper::new(&strings, &typed_batch(&[], &[]).schema()).err().unwrap();
    assert!(error.message.contains("sum(type): type is of type Utf8"), "{error}");
}

#[test]
fn select_distinct_is_a_grouping_without_aggregates() {
    let s = parse("SELECT DISTINCT type, actor.login AS who FROM e WHERE id > 1 ORDER BY who LIMIT 5");
    let grouping = s.shape.group_by.as_ref().unwrap();
    assert_eq!(grouping.keys, vec!["type", "actor.login"]);
    assert!(grouping.aggregates.is_empty());
    assert_eq!(s.command.columns, vec!["type", "actor.login"]);
    let mut shaper = Shaper::new(&parse("SELECT DISTINCT type FROM e ORDER BY type").shape, &typed_batch(&[], &[]).schema()).unwrap();
    shaper.push(typed_batch(&[Some("b"), Some("a"), Some("b"), None], &[None, None, None, None])).unwrap();
    let out = shaper.finish().unwrap().unwrap();
    let types: Vec<Option<&str>> = out.column(0).as_any().downcast_ref::<StringArray>().unwrap().iter().collect();
    assert_eq!(types, vec![Some("a"), Some("b"), None]);
}

#[test]
fn delete_statements_become_the_delete_action_and_other_changes_are_refused_by_name() {
    let delete = parse_sql_delete("DELETE FROM shoal.public.users WHERE status = 'closed' AND n > 3;", Parameters::Bound(&[])).unwrap();
    assert_eq!(delete.table, "users");
    let filter = delete.filter.unwrap();
    assert!(filter.contains("status") && filter.contains("closed") && filter.contains('3'), "{filter}");
    assert_eq!(parse_sql_delete("DELETE FROM users", Parameters::Bound(&[])).unwrap(), SqlDelete { table: "users".into(), filter: None });
    for (text, update) in [("DELETE FROM users", true), ("  delete\nfrom users", true), ("SELECT 1", false), ("deleted", false), ("DELETE", false)] {
        assert_eq!(super::is_update(text), update, "{text}");
    }
    for (text, named) in [
        ("UPDATE users SET n = 1", "UPDATE is not supported"),
        ("INSERT INTO users VALUES (1)", "INSERT is not supported"),
        ("DELETE FROM users RETURNING id", "RETURNING"),
        ("DELETE FROM a, b WHERE a.id = 1", "one table"),
        ("SELECT * FROM users", "only DELETE"),
        ("DELETE FROM users WHERE soundex(status) = 'X'", "soundex"),
    ] {
        let message = parse_sql_delete(text, Parameters::Bound(&[])).unwrap_err().to_string();
        assert!(message.contains(named), "{text}: {message}");
    }
    // As a query, DELETE names the way it runs.
    assert!(refused("DELETE FROM users").contains("execute_update"));
}

#[test]
fn one_text_key_groups_as_the_row_encoding_does() {
    // GROUP BY type takes the one-string-key path; GROUP BY type, payload.size (always
    // null here) the row encoding: the same groups, counts and order of appearance.
    let keys: Vec<Option<String>> = (0..5_000u32)
        .map(|i| match i.wrapping_mul(2_654_435_761) % 23 {
            0 => None,
            1 => Some(String::new()),
            k => Some(format!("k{}é", k % 17)),
        })
        .collect();
    let run = |text: &str| {
        let mut shaper = Shaper::new(&parse(text).shape, &typed_batch(&[], &[]).schema()).unwrap();
        for chunk in keys.chunks(777) {
            let types: Vec<Option<&str>> = chunk.iter().map(Option::as_deref).collect();
            shaper.push(typed_batch(&types, &vec![None; chunk.len()])).unwrap();
        }
        let out = shaper.finish().unwrap().unwrap();
        let types: Vec<Option<String>> = out.column(0).as_any().downcast_ref::<StringArray>().unwrap().iter().map(|t| t.map(str::to_owned)).collect();
        let counts: Vec<i64> = out.column(out.num_columns() - 1).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec();
        (types, counts)
    };
    let one = run("SELECT type, count(*) FROM e GROUP BY type");
    let two = run("SELECT type, count(*) FROM e GROUP BY type, payload.size");
    assert_eq!(one, two);
    assert_eq!(one.1.iter().sum::<i64>(), keys.len() as i64);
    assert!(one.0.contains(&None) && one.0.contains(&Some(String::new())), "{:?}", one.0);
}

#[test]
fn insert_values_become_json_records() {
    use super::{is_insert, is_update, parse_sql_insert};
    let insert = parse_sql_insert("INSERT INTO shoal.public.t (id, name, score, ok, gone) VALUES (1, 'a''b', -2.5, TRUE, NULL), (2, 'c', 3, FALSE, 1);").unwrap();
    assert_eq!(insert.table, "t");
    assert_eq!(
        insert.records,
        vec![r#"{"id":1,"name":"a'b","ok":true,"score":-2.5}"#, r#"{"gone":1,"id":2,"name":"c","ok":false,"score":3}"#]
    );
    let json = parse_sql_insert(r#"insert into t values ('{"id": 1, "tags": ["x"]}')"#).unwrap();
    assert_eq!(json.records, vec![r#"{"id": 1, "tags": ["x"]}"#]);
    assert!(is_insert("  INSERT INTO t VALUES (1)") && is_update("insert\tinto t") && !is_insert("inserted"));
    let select = parse_sql_insert("INSERT INTO t SELECT id, actor.login AS login FROM u WHERE type = 'PushEvent' LIMIT 3;").unwrap();
    assert_eq!((select.table.as_str(), select.records.len()), ("t", 0));
    assert_eq!(select.select.as_deref(), Some("SELECT id, actor.login AS login FROM u WHERE type = 'PushEvent' LIMIT 3"));
    for (text, named) in [
        ("INSERT INTO t (a) SELECT a FROM u", "INSERT … SELECT takes no column list"),
        ("INSERT INTO t (a) VALUES (1, 2)", "row 1 has 2 values for 1 columns"),
        ("INSERT INTO t VALUES (1)", "without a column list"),
        ("INSERT INTO t VALUES ('{not json')", "not JSON"),
        ("INSERT INTO t (a) VALUES (b)", "VALUES needs a literal"),
        ("INSERT INTO t (a) VALUES (1) RETURNING a", "no ON CONFLICT, RETURNING"),
    ] {
        let error = parse_sql_insert(text).unwrap_err().to_string();
        assert!(error.contains(named), "{text}: {error}");
    }
}
