//! Filters evaluated over columns, a batch of rows at a time (TellStore, Pilman et al.,
//! VLDB 2017, §5: scans evaluate the selection vectorised over a column layout).
//!
//! Each row's result is SQL's three-valued logic kept in one byte — `FALSE` = 0,
//! `UNKNOWN` = 1, `TRUE` = 2 — so that Kleene `AND` is the minimum, `OR` the maximum and
//! `NOT` is `2 - x`: loops the compiler vectorises. Every leaf follows
//! [`Expr::eval_with`] exactly (numbers compare numerically across ints and floats,
//! strings by bytes, anything else is unknown); the differential tests check that the
//! two agree on every record.

use std::cmp::Ordering;

use arrow_array::{Array, BooleanArray, Float64Array, Int64Array, StringArray};

use crate::path::FieldPath;
use crate::psf::{CmpOp, Expr, Literal};
use crate::value::FieldValue;

/// The row is not selected.
pub(crate) const FALSE: u8 = 0;
/// SQL's unknown (not selected).
pub(crate) const UNKNOWN: u8 = 1;
/// The row is selected.
pub(crate) const TRUE: u8 = 2;

fn tri(b: bool) -> u8 {
    if b {
        TRUE
    } else {
        FALSE
    }
}

/// The columns of one path over a batch of rows: at most one is valid in any row;
/// none where the path is missing or null.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PathView<'a> {
    pub bools: Option<&'a BooleanArray>,
    pub ints: Option<&'a Int64Array>,
    pub floats: Option<&'a Float64Array>,
    pub strings: Option<&'a StringArray>,
    /// The instants `strings` name (µs since the epoch; null where none), when the scan
    /// read them for a `TIMESTAMP` comparison ([`super::DecodedColumns::instants`]).
    pub instants: Option<&'a Int64Array>,
}

impl<'a> PathView<'a> {
    /// The value at `row`, as a scan of the raw record would have extracted it (a null
    /// and a missing field are both [`FieldValue::Missing`]: nothing downstream tells
    /// them apart).
    pub(crate) fn value(&self, row: usize) -> FieldValue<'a> {
        if let Some(a) = self.strings.filter(|a| a.is_valid(row)) {
            return FieldValue::Str(std::borrow::Cow::Borrowed(a.value(row)));
        }
        if let Some(a) = self.ints.filter(|a| a.is_valid(row)) {
            return FieldValue::Int(a.value(row));
        }
        if let Some(a) = self.floats.filter(|a| a.is_valid(row)) {
            return FieldValue::Float(a.value(row));
        }
        if let Some(a) = self.bools.filter(|a| a.is_valid(row)) {
            return FieldValue::Bool(a.value(row));
        }
        FieldValue::Missing
    }
}

/// Calls `f(i)` for each row `i` where `array` is valid.
fn for_valid(array: &dyn Array, mut f: impl FnMut(usize)) {
    match array.nulls() {
        None => (0..array.len()).for_each(f),
        Some(nulls) => nulls.valid_indices().for_each(&mut f),
    }
}

/// Evaluates `expr` over `rows` rows whose paths' columns `view` gives.
pub(crate) fn evaluate<'a>(expr: &Expr, view: &dyn Fn(&FieldPath) -> PathView<'a>, rows: usize) -> Vec<u8> {
    match expr {
        Expr::Const(b) => vec![tri(*b); rows],
        Expr::And(terms) => combine(terms, view, rows, TRUE, |a, b| a.min(b)),
        Expr::Or(terms) => combine(terms, view, rows, FALSE, |a, b| a.max(b)),
        Expr::Not(inner) => {
            let mut out = evaluate(inner, view, rows);
            out.iter_mut().for_each(|x| *x = TRUE - *x);
            out
        }
        Expr::Cmp { path, op, value } => {
            let mut out = vec![UNKNOWN; rows];
            compare(&mut out, &view(path), *op, value);
            out
        }
        Expr::In { path, list, negated } => {
            let columns = view(path);
            let mut out = vec![FALSE; rows];
            let mut term = vec![UNKNOWN; rows];
            for literal in list {
                term.fill(UNKNOWN);
                compare(&mut term, &columns, CmpOp::Eq, literal);
                out.iter_mut().zip(&term).for_each(|(o, t)| *o = (*o).max(*t));
            }
            if *negated {
                out.iter_mut().for_each(|x| *x = TRUE - *x);
            }
            out
        }
        Expr::IsNull { path, negated } => {
            let columns = view(path);
            let (null, not_null) = if *negated { (FALSE, TRUE) } else { (TRUE, FALSE) };
            let mut out = vec![null; rows];
            let arrays: [Option<&dyn Array>; 4] = [
                columns.bools.map(|a| a as &dyn Array),
                columns.ints.map(|a| a as &dyn Array),
                columns.floats.map(|a| a as &dyn Array),
                columns.strings.map(|a| a as &dyn Array),
            ];
            for array in arrays.into_iter().flatten() {
                for_valid(array, |i| out[i] = not_null);
            }
            out
        }
        Expr::Like { path, prefix, negated } => {
            let mut out = vec![UNKNOWN; rows];
            if let Some(strings) = view(path).strings {
                for_valid(strings, |i| out[i] = tri(strings.value(i).starts_with(prefix.as_str()) != *negated));
            }
            out
        }
        Expr::Pattern { path, pieces, case_insensitive, negated } => {
            let mut out = vec![UNKNOWN; rows];
            if let Some(strings) = view(path).strings {
                for_valid(strings, |i| {
                    let value = strings.value(i);
                    let matched = if *case_insensitive {
                        crate::psf::expr::like_matches(pieces, &value.to_lowercase())
                    } else {
                        crate::psf::expr::like_matches(pieces, value)
                    };
                    out[i] = tri(matched != *negated);
                });
            }
            out
        }
        Expr::Function { function, path, op, value } => {
            let mut out = vec![UNKNOWN; rows];
            if let Some(strings) = view(path).strings {
                for_valid(strings, |i| {
                    let applied = function.apply(&FieldValue::Str(std::borrow::Cow::Borrowed(strings.value(i))));
                    out[i] = value.compare(&applied).map_or(UNKNOWN, |o| tri(op.holds(o)));
                });
            }
            out
        }
        // A path a file holds in columns holds no array in it (an array makes the path
        // opaque, and the raw records are read): no row has an array to look in.
        Expr::Contains { .. } => vec![UNKNOWN; rows],
        Expr::Field(path) => {
            let mut out = vec![UNKNOWN; rows];
            if let Some(bools) = view(path).bools {
                for_valid(bools, |i| out[i] = tri(bools.value(i)));
            }
            out
        }
    }
}

fn combine<'a>(
    terms: &[Expr],
    view: &dyn Fn(&FieldPath) -> PathView<'a>,
    rows: usize,
    identity: u8,
    join: impl Fn(u8, u8) -> u8,
) -> Vec<u8> {
    let mut out = vec![identity; rows];
    for term in terms {
        let value = evaluate(term, view, rows);
        out.iter_mut().zip(&value).for_each(|(o, v)| *o = join(*o, *v));
    }
    out
}

/// Writes `column op literal` into `out` where the path has a value the literal compares
/// with ([`FieldValue::sql_cmp`]); other rows keep what `out` holds (unknown).
fn compare(out: &mut [u8], view: &PathView<'_>, op: CmpOp, literal: &Literal) {
    let holds = |ordering: Option<Ordering>| ordering.map_or(UNKNOWN, |o| tri(op.holds(o)));
    match literal {
        Literal::Null => {}
        Literal::Str(s) => {
            if let Some(strings) = view.strings {
                let needle = s.as_bytes();
                if op == CmpOp::Eq || op == CmpOp::NotEq {
                    let equal = tri(op == CmpOp::Eq);
                    let unequal = TRUE - equal;
                    for_valid(strings, |i| out[i] = if strings.value(i).as_bytes() == needle { equal } else { unequal });
                } else {
                    for_valid(strings, |i| out[i] = tri(op.holds(strings.value(i).as_bytes().cmp(needle))));
                }
            }
        }
        Literal::Int(l) => {
            if let Some(ints) = view.ints {
                let values = ints.values();
                for_valid(ints, |i| out[i] = tri(op.holds(values[i].cmp(l))));
            }
            if let Some(floats) = view.floats {
                #[allow(clippy::cast_precision_loss)]
                let l = *l as f64;
                let values = floats.values();
                for_valid(floats, |i| out[i] = holds(values[i].partial_cmp(&l)));
            }
        }
        Literal::Float(l) => {
            if let Some(ints) = view.ints {
                let values = ints.values();
                #[allow(clippy::cast_precision_loss)]
                for_valid(ints, |i| out[i] = holds((values[i] as f64).partial_cmp(l)));
            }
            if let Some(floats) = view.floats {
                let values = floats.values();
                for_valid(floats, |i| out[i] = holds(values[i].partial_cmp(l)));
            }
        }
        Literal::Bool(b) => {
            if let Some(bools) = view.bools {
                for_valid(bools, |i| out[i] = tri(op.holds(bools.value(i).cmp(b))));
            }
        }
        Literal::Timestamp(t) => {
            if let Some(instants) = view.instants {
                let values = instants.values();
                for_valid(instants, |i| out[i] = tri(op.holds(values[i].cmp(t))));
            } else if let Some(strings) = view.strings {
                let key = crate::timestamp::InstantKey::new(*t);
                for_valid(strings, |i| out[i] = holds(key.compare(strings.value(i))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psf::parse_expr;
    use std::collections::HashMap;

    /// Column views of `values` per path, as a file would hold them.
    struct Columns {
        paths: HashMap<FieldPath, (BooleanArray, Int64Array, Float64Array, StringArray, Int64Array)>,
    }

    impl Columns {
        fn new(rows: &[Vec<(&str, FieldValue<'static>)>], paths: &[&str]) -> Self {
            let mut out = HashMap::new();
            for path in paths {
                let get = |row: &Vec<(&str, FieldValue<'static>)>| {
                    row.iter().find(|(p, _)| p == path).map_or(FieldValue::Missing, |(_, v)| v.clone())
                };
                let bools = rows.iter().map(|r| if let FieldValue::Bool(b) = get(r) { Some(b) } else { None }).collect();
                let ints = rows.iter().map(|r| if let FieldValue::Int(i) = get(r) { Some(i) } else { None }).collect();
                let floats = rows.iter().map(|r| if let FieldValue::Float(f) = get(r) { Some(f) } else { None }).collect();
                let strings: StringArray =
                    rows.iter().map(|r| if let FieldValue::Str(s) = get(r) { Some(s.into_owned()) } else { None }).collect();
                let instants = crate::columnar::instants_of(&strings);
                out.insert(FieldPath::parse(path).unwrap(), (bools, ints, floats, strings, instants));
            }
            Self { paths: out }
        }

        fn view(&self, path: &FieldPath) -> PathView<'_> {
            self.paths.get(path).map_or_else(PathView::default, |(b, i, f, s, _)| PathView {
                bools: Some(b),
                ints: Some(i),
                floats: Some(f),
                strings: Some(s),
                instants: None,
            })
        }

        /// As [`Self::view`], with the strings' instants read beforehand (as scans of
        /// `TIMESTAMP` comparisons do).
        fn view_with_instants(&self, path: &FieldPath) -> PathView<'_> {
            let instants = self.paths.get(path).map(|(_, _, _, _, t)| t);
            PathView { instants, ..self.view(path) }
        }
    }

    #[test]
    fn vectorised_filters_agree_with_the_row_evaluator() {
        use FieldValue::{Bool, Float, Int, Missing, Null};
        let s = |t: &str| FieldValue::Str(std::borrow::Cow::Owned(t.to_owned()));
        let values = [Missing, Null, Bool(true), Bool(false), Int(1), Int(-3), Int(i64::MAX), Float(1.0), Float(-0.0), Float(2.5),
            Float(1e300), s("1"), s("abc"), s("ab"), s(""), s("é"), s("2021-07-21T10:00:00Z"), s("2021-07-21 12:30:00+02:00"),
            s("2021-07-21"), s("2021-02-30T00:00:00Z")];
        let rows: Vec<Vec<(&str, FieldValue<'static>)>> = values
            .iter()
            .flat_map(|a| values.iter().map(move |b| vec![("a", a.clone()), ("b", b.clone())]))
            .collect();
        let columns = Columns::new(&rows, &["a", "b"]);
        let filters = [
            "a = 1", "a <> 1", "a < 1", "a >= 1.0", "a > -0.5", "a = 0", "a <= 'ab'", "a > 'ab'", "a = 'abc'", "a <> ''",
            "a = TRUE", "a < TRUE", "a = NULL", "a IN (1, 'ab', NULL)", "a NOT IN (1, 'ab')", "a IN (2.5, FALSE)",
            "a IS NULL", "a IS NOT NULL", "a LIKE 'a%'", "a NOT LIKE 'a%'", "a", "NOT a", "a = 1 AND b = 'ab'",
            "a = 1 OR b IS NULL", "NOT (a > 0 OR b < 'b')", "(a = 1 OR a = 'ab') AND NOT b", "zz = 1", "zz IS NULL",
            "a = 9223372036854775807", "a > 1e299",
            "a >= TIMESTAMP '2021-07-21T10:00:00Z'", "a < TIMESTAMP '2021-07-21 10:30:00.5+00:00' AND b > TIMESTAMP '2021-07-21'",
            "a IN (TIMESTAMP '2021-07-21T00:00:00Z', 1)", "NOT a <> TIMESTAMP '2021-07-21T10:30:00Z'",
        ];
        for text in filters {
            let Ok(expr) = parse_expr(text) else { panic!("{text} does not parse") };
            let got = evaluate(&expr, &|p| columns.view(p), rows.len());
            let with_instants = evaluate(&expr, &|p| columns.view_with_instants(p), rows.len());
            assert_eq!(got, with_instants, "{text}: strings and their instants disagree");
            for (i, row) in rows.iter().enumerate() {
                let expected = expr.eval_with(&|p: &FieldPath| {
                    row.iter().find(|(name, _)| *name == p.to_string()).map_or(FieldValue::Missing, |(_, v)| v.clone())
                });
                let expected = match expected {
                    Some(true) => TRUE,
                    Some(false) => FALSE,
                    None => UNKNOWN,
                };
                assert_eq!(got[i], expected, "{text} on {row:?}");
            }
        }
    }
}
