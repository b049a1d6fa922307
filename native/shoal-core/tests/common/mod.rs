//! Shared helpers for the engine's integration tests: GitHub Archive events and a
//! serde_json oracle for filters.
#![allow(dead_code)]

use std::cmp::Ordering;
use std::path::PathBuf;

use arrow_array::{Array, RecordBatch, StringArray};
use shoal_core::psf::{CmpOp, Expr, Literal};
use shoal_core::FieldPath;

/// Up to `limit` GitHub Archive events (NDJSON lines), or `None` with a message when
/// the data was not fetched (`scripts/fetch-data.sh`). With `SHOAL_REQUIRE_DATA=1`
/// (set by the test script and CI) a missing file is a failure.
pub fn github_events(limit: usize) -> Option<Vec<String>> {
    let path = std::env::var_os("SHOAL_GITHUB_EVENTS").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/github/events.ndjson")
    });
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(text.lines().filter(|l| !l.trim().is_empty()).take(limit).map(str::to_owned).collect()),
        Err(e) => {
            assert!(
                std::env::var("SHOAL_REQUIRE_DATA").as_deref() != Ok("1"),
                "GitHub events missing at {}: {e}; run scripts/fetch-data.sh",
                path.display()
            );
            eprintln!("SKIPPED: GitHub events missing at {} ({e}); run scripts/fetch-data.sh", path.display());
            None
        }
    }
}

fn lookup<'v>(record: &'v serde_json::Value, path: &FieldPath) -> Option<&'v serde_json::Value> {
    path.segments().iter().try_fold(record, |v, key| v.as_object()?.get(key))
}

fn compare(value: &serde_json::Value, literal: &Literal) -> Option<Ordering> {
    use serde_json::Value;
    match (value, literal) {
        (Value::String(s), Literal::Str(l)) => Some(s.as_bytes().cmp(l.as_bytes())),
        (Value::Bool(b), Literal::Bool(l)) => Some(b.cmp(l)),
        (Value::Number(n), Literal::Int(l)) => match n.as_i64() {
            Some(i) => Some(i.cmp(l)),
            None => n.as_f64()?.partial_cmp(&(*l as f64)),
        },
        (Value::Number(n), Literal::Float(l)) => n.as_f64()?.partial_cmp(l),
        (Value::String(s), Literal::Timestamp(l)) => Some(utc_micros(s)?.cmp(l)),
        _ => None,
    }
}

/// Microseconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ` (the one shape GitHub Archive
/// writes), counted here with the civil-calendar day formula rather than the engine's parser.
fn utc_micros(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + d - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(((days * 24 + num(11..13)?) * 60 + num(14..16)?) * 60_000_000 + num(17..19)? * 1_000_000)
}

fn holds(op: CmpOp, ordering: Ordering) -> bool {
    match op {
        CmpOp::Eq => ordering == Ordering::Equal,
        CmpOp::NotEq => ordering != Ordering::Equal,
        CmpOp::Lt => ordering == Ordering::Less,
        CmpOp::LtEq => ordering != Ordering::Greater,
        CmpOp::Gt => ordering == Ordering::Greater,
        CmpOp::GtEq => ordering != Ordering::Less,
    }
}

/// SQL three-valued evaluation of `expr` on a serde_json record, written independently
/// of the engine's evaluator.
pub fn oracle(expr: &Expr, record: &serde_json::Value) -> Option<bool> {
    let is_null = |p: &FieldPath| lookup(record, p).is_none_or(serde_json::Value::is_null);
    match expr {
        Expr::Const(b) => Some(*b),
        Expr::Field(p) => lookup(record, p)?.as_bool(),
        Expr::Not(inner) => oracle(inner, record).map(|b| !b),
        Expr::And(terms) => {
            let mut result = Some(true);
            for t in terms {
                match oracle(t, record) {
                    Some(false) => return Some(false),
                    None => result = None,
                    Some(true) => {}
                }
            }
            result
        }
        Expr::Or(terms) => {
            let mut result = Some(false);
            for t in terms {
                match oracle(t, record) {
                    Some(true) => return Some(true),
                    None => result = None,
                    Some(false) => {}
                }
            }
            result
        }
        Expr::Cmp { path, op, value } => Some(holds(*op, compare(lookup(record, path)?, value)?)),
        Expr::In { path, list, negated } => {
            let v = lookup(record, path)?;
            let mut unknown = v.is_null();
            for l in list {
                match compare(v, l) {
                    Some(Ordering::Equal) => return Some(!negated),
                    None => unknown = true,
                    _ => {}
                }
            }
            if unknown { None } else { Some(*negated) }
        }
        Expr::IsNull { path, negated } => Some(is_null(path) != *negated),
        Expr::Like { path, prefix, negated } => {
            let s = lookup(record, path)?.as_str()?;
            Some(s.starts_with(prefix.as_str()) != *negated)
        }
        Expr::Pattern { path, pieces, case_insensitive, negated } => {
            let s = lookup(record, path)?.as_str()?;
            let s = if *case_insensitive { s.to_lowercase() } else { s.to_owned() };
            Some(shoal_core::psf::expr::like_matches(pieces, &s) != *negated)
        }
        Expr::Function { function, path, op, value } => {
            let s = lookup(record, path)?.as_str()?;
            let applied = match function {
                shoal_core::psf::Function::Lower => serde_json::Value::String(s.to_lowercase()),
                shoal_core::psf::Function::Upper => serde_json::Value::String(s.to_uppercase()),
                shoal_core::psf::Function::Length => serde_json::Value::from(s.chars().count()),
                shoal_core::psf::Function::Substr { start, length } => {
                    // Spark's `substring`, written independently of the engine's: Unicode
                    // characters from a 1-based start (0 as 1, negative from the end).
                    let chars: Vec<char> = s.chars().collect();
                    let count = chars.len() as i64;
                    let first = if *start > 0 { start - 1 } else if *start < 0 { count + start } else { 0 };
                    let end = length.map_or(count, |l| (first + l).min(count));
                    let first = first.max(0);
                    let picked: String = if first < end { chars[first as usize..end as usize].iter().collect() } else { String::new() };
                    serde_json::Value::String(picked)
                }
            };
            Some(holds(*op, compare(&applied, value)?))
        }
        Expr::Contains { path, element, value, negated } => {
            let items = lookup(record, path)?.as_array()?;
            let mut unknown = false;
            for item in items {
                let picked = match element {
                    Some(element) => lookup(item, element),
                    None => Some(item),
                };
                match picked.and_then(|v| compare(v, value)) {
                    Some(Ordering::Equal) => return Some(!negated),
                    None => unknown = true,
                    _ => {}
                }
            }
            if unknown { None } else { Some(*negated) }
        }
        #[allow(unreachable_patterns)]
        _ => panic!("oracle does not know {expr:?}"),
    }
}

/// The sorted values of a Utf8 column across batches.
pub fn strings(batches: &[RecordBatch], column: usize) -> Vec<String> {
    let mut out = Vec::new();
    for batch in batches {
        let array = batch.column(column).as_any().downcast_ref::<StringArray>().expect("a Utf8 column");
        out.extend((0..array.len()).map(|i| array.value(i).to_owned()));
    }
    out.sort();
    out
}

/// The sorted `id`s of the `records` the serde_json oracle says `filter` is true for.
pub fn oracle_ids(records: &[serde_json::Value], filter: &Expr) -> Vec<String> {
    let mut ids: Vec<String> =
        records.iter().filter(|r| oracle(filter, r) == Some(true)).map(|r| r["id"].as_str().expect("id").to_owned()).collect();
    ids.sort();
    ids
}

/// Ids (column `id`, sorted) of the records matching `filter`: by the table's own plan
/// (index scans where PSFs cover the log) and by a full scan of the whole log.
pub fn planned_and_full_ids(table: &shoal_core::table::Table, filter: &str) -> (Vec<String>, Vec<String>) {
    use shoal_core::scan::{plan_scan, ScanRequest};
    let request = ScanRequest {
        filter: Some(shoal_core::psf::parse_expr(filter).expect("filter")),
        columns: vec![FieldPath::parse("id").expect("path")],
        ..ScanRequest::default()
    };
    let run = |plan| {
        let mut batches = Vec::new();
        table
            .scan_with_plan(&request, &plan, &mut |b| {
                batches.push(b);
                Ok(std::ops::ControlFlow::Continue(()))
            })
            .expect("scan");
        strings(&batches, 0)
    };
    let full = plan_scan(request.filter.as_ref(), &[], table.log().begin_address(), table.log().tail_address());
    (run(table.plan(&request)), run(full))
}

/// The JSONTestSuite must-accept files (`y_*.json`) whose text is a JSON object, as
/// records; `None` when the suite is not there (see `bad_input.rs` for where it is looked
/// for).
pub fn json_test_suite_objects() -> Option<Vec<String>> {
    let dir = std::env::var_os("SHOAL_JSON_TEST_SUITE").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/JSONTestSuite/test_parsing")
    });
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).ok()?.filter_map(std::result::Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("y_") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        if serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v.is_object()) {
            out.push(text);
        }
    }
    out.sort();
    Some(out)
}
