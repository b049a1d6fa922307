//! Aggregation pushed into scans: `COUNT(*)`, `COUNT(path)`, `MIN(path)`, `MAX(path)`,
//! `SUM(path)` and `AVG(path)` computed next to the data, so a client receives one row instead of every matching
//! record (TellStore, Pilman et al., VLDB 2017, §4: scans with pushed-down selection,
//! projection and aggregation).
//!
//! The scan is the ordinary one (index scans where PSFs cover the range, full scans
//! elsewhere, every candidate re-checked against the filter) with only the aggregated
//! columns projected; each output batch is folded into per-aggregate accumulators and
//! dropped. The result is *partial* over the request's log range: a client that split a
//! query into several ranges sums the counts and takes the minimum of the minimums.

use std::cmp::Ordering;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use serde::{Deserialize, Serialize};

use super::{ScanPlan, ScanRequest, ScanStats};
use crate::error::{Error, Result};
use crate::path::FieldPath;
use crate::schema::is_json_text;
use crate::table::Table;

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AggregateFunction {
    /// Records (`COUNT(*)`) or records whose column is not null (`COUNT(path)`).
    Count,
    /// Smallest non-null value (numbers numerically, strings by UTF-8 bytes, `false < true`).
    Min,
    /// Largest non-null value.
    Max,
    /// Sum of the non-null numbers (`Int64` for an integer column, checked for overflow;
    /// `Float64` for a float column); null when there is none.
    Sum,
    /// Mean of the non-null numbers, `Float64`; null when there is none. Not mergeable
    /// across partial results (merge `SUM` and `COUNT` instead).
    Avg,
}

/// One aggregate: `function` over `column` (`None` only for `COUNT(*)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    /// The function.
    pub function: AggregateFunction,
    /// The aggregated column, a dotted path; `None` for `COUNT(*)`.
    pub column: Option<FieldPath>,
}

impl fmt::Display for Aggregate {
    /// The aggregate's output column name: `count(*)`, `count(payload.size)`, `min(id)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let function = match self.function {
            AggregateFunction::Count => "count",
            AggregateFunction::Min => "min",
            AggregateFunction::Max => "max",
            AggregateFunction::Sum => "sum",
            AggregateFunction::Avg => "avg",
        };
        match &self.column {
            Some(column) => write!(f, "{function}({column})"),
            None => write!(f, "{function}(*)"),
        }
    }
}

/// The running extreme of a `MIN` or `MAX`.
#[derive(Debug, Clone, PartialEq)]
enum Extreme {
    Int(i64),
    Float(f64),
    Text(String),
    Bool(bool),
}

impl Extreme {
    fn compare(&self, other: &Self) -> Option<Ordering> {
        match (self, other) {
            (Self::Int(a), Self::Int(b)) => Some(a.cmp(b)),
            (Self::Float(a), Self::Float(b)) => a.partial_cmp(b),
            (Self::Text(a), Self::Text(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
            (Self::Bool(a), Self::Bool(b)) => Some(a.cmp(b)),
            _ => None,
        }
    }
}

/// The state of one aggregate while the scan runs.
#[derive(Debug)]
enum Accumulator {
    Count { column: Option<usize>, count: i64 },
    Extreme { column: usize, max: bool, value: Option<Extreme> },
    /// `SUM` or `AVG` of an `Int64` column: exact, in 128 bits until the end.
    IntSum { column: usize, sum: i128, count: i64, avg: bool },
    /// `SUM` or `AVG` of a `Float64` column.
    FloatSum { column: usize, sum: f64, count: i64, avg: bool },
}

impl Accumulator {
    fn fold(&mut self, batch: &RecordBatch) {
        match self {
            Self::Count { column: None, count } => *count += row_count(batch.num_rows()),
            Self::Count { column: Some(c), count } => {
                let array = batch.column(*c);
                *count += row_count(array.len() - array.null_count());
            }
            Self::IntSum { column, sum, count, .. } => {
                let array = batch.column(*column).as_primitive::<Int64Type>();
                *sum += array.iter().flatten().map(i128::from).sum::<i128>();
                *count += row_count(array.len() - array.null_count());
            }
            Self::FloatSum { column, sum, count, .. } => {
                let array = batch.column(*column).as_primitive::<Float64Type>();
                *sum += array.iter().flatten().sum::<f64>();
                *count += row_count(array.len() - array.null_count());
            }
            Self::Extreme { column, max, value } => {
                if let Some(candidate) = batch_extreme(batch.column(*column).as_ref(), *max) {
                    let better = value.as_ref().is_none_or(|current| {
                        let ordering = candidate.compare(current);
                        if *max { ordering == Some(Ordering::Greater) } else { ordering == Some(Ordering::Less) }
                    });
                    if better {
                        *value = Some(candidate);
                    }
                }
            }
        }
    }

    fn finish(&self, data_type: &DataType, name: &str) -> Result<ArrayRef> {
        #[allow(clippy::cast_precision_loss)]
        Ok(match self {
            Self::Count { count, .. } => Arc::new(Int64Array::from(vec![*count])),
            Self::IntSum { count: 0, .. } | Self::FloatSum { count: 0, .. } => arrow_array::new_null_array(data_type, 1),
            Self::IntSum { sum, count, avg: true, .. } => Arc::new(Float64Array::from(vec![*sum as f64 / *count as f64])),
            Self::IntSum { sum, avg: false, .. } => {
                let sum = i64::try_from(*sum).map_err(|_| Error::AggregateOverflow { aggregate: name.to_owned(), sum: *sum })?;
                Arc::new(Int64Array::from(vec![sum]))
            }
            Self::FloatSum { sum, count, avg, .. } => {
                Arc::new(Float64Array::from(vec![if *avg { *sum / *count as f64 } else { *sum }]))
            }
            Self::Extreme { value, .. } => match (data_type, value) {
                (DataType::Int64, Some(Extreme::Int(v))) => Arc::new(Int64Array::from(vec![Some(*v)])),
                (DataType::Float64, Some(Extreme::Float(v))) => Arc::new(Float64Array::from(vec![Some(*v)])),
                (DataType::Utf8, Some(Extreme::Text(v))) => Arc::new(StringArray::from(vec![Some(v.as_str())])),
                (DataType::Boolean, Some(Extreme::Bool(v))) => Arc::new(BooleanArray::from(vec![Some(*v)])),
                _ => arrow_array::new_null_array(data_type, 1),
            },
        })
    }
}

fn row_count(rows: usize) -> i64 {
    i64::try_from(rows).unwrap_or(i64::MAX)
}

/// The smallest (or largest) non-null value of `array`, or `None` when all are null.
fn batch_extreme(array: &dyn Array, max: bool) -> Option<Extreme> {
    fn pick<T>(values: impl Iterator<Item = T>, max: bool, cmp: impl Fn(&T, &T) -> Ordering) -> Option<T> {
        if max { values.max_by(|a, b| cmp(a, b)) } else { values.min_by(|a, b| cmp(a, b)) }
    }
    match array.data_type() {
        DataType::Int64 => pick(array.as_primitive::<Int64Type>().iter().flatten(), max, Ord::cmp).map(Extreme::Int),
        // JSON has no NaN, so every parsed float is ordered; `total_cmp` keeps this total anyway.
        DataType::Float64 => {
            pick(array.as_primitive::<Float64Type>().iter().flatten(), max, f64::total_cmp).map(Extreme::Float)
        }
        DataType::Utf8 => pick(array.as_string::<i32>().iter().flatten(), max, |a, b| a.as_bytes().cmp(b.as_bytes()))
            .map(|s| Extreme::Text(s.to_owned())),
        DataType::Boolean => pick(array.as_boolean().iter().flatten(), max, Ord::cmp).map(Extreme::Bool),
        _ => None,
    }
}

/// Checks that `field` can be the argument of `aggregate`'s `MIN`/`MAX`.
fn check_orderable(aggregate: &Aggregate, field: &Field) -> Result<()> {
    let json_text = is_json_text(field);
    match field.data_type() {
        DataType::Int64 | DataType::Float64 | DataType::Boolean | DataType::Utf8 if !json_text => Ok(()),
        DataType::Utf8 => Err(Error::InvalidAggregate {
            aggregate: aggregate.to_string(),
            reason: "the column holds values of mixed JSON types (returned as JSON text), which have no common order"
                .to_owned(),
        }),
        other => Err(Error::InvalidAggregate {
            aggregate: aggregate.to_string(),
            reason: format!("MIN and MAX take numbers, strings or booleans; the column is {other}"),
        }),
    }
}

/// Checks that `field` can be the argument of `aggregate`'s `SUM`/`AVG`: a number column.
fn check_numeric(aggregate: &Aggregate, field: &Field) -> Result<()> {
    match field.data_type() {
        DataType::Int64 | DataType::Float64 => Ok(()),
        other => Err(Error::InvalidAggregate {
            aggregate: aggregate.to_string(),
            reason: if is_json_text(field) {
                "the column holds values of mixed JSON types (returned as JSON text): SUM and AVG take numbers".to_owned()
            } else {
                format!("SUM and AVG take numbers; the column is {other}")
            },
        }),
    }
}

/// The plan of an aggregation: which columns to project, where each aggregate reads.
struct AggregateLayout {
    /// Distinct aggregated columns, in first-use order.
    scan_columns: Vec<(FieldPath, Field)>,
    /// The result's fields, one per aggregate.
    result_fields: Vec<Field>,
    accumulators: Vec<Accumulator>,
}

impl Table {
    fn aggregate_layout(&self, aggregates: &[Aggregate]) -> Result<AggregateLayout> {
        let mut paths: Vec<FieldPath> = Vec::new();
        for column in aggregates.iter().filter_map(|a| a.column.as_ref()) {
            if !paths.contains(column) {
                paths.push(column.clone());
            }
        }
        let scan_columns = self.schema().columns(&paths)?;
        let mut result_fields = Vec::with_capacity(aggregates.len());
        let mut accumulators = Vec::with_capacity(aggregates.len());
        for aggregate in aggregates {
            let position = aggregate.column.as_ref().and_then(|c| paths.iter().position(|p| p == c));
            let name = aggregate.to_string();
            match (aggregate.function, position) {
                (AggregateFunction::Count, column) => {
                    result_fields.push(Field::new(name, DataType::Int64, false));
                    accumulators.push(Accumulator::Count { column, count: 0 });
                }
                (function @ (AggregateFunction::Sum | AggregateFunction::Avg), Some(column)) => {
                    let field = &scan_columns[column].1;
                    check_numeric(aggregate, field)?;
                    let avg = function == AggregateFunction::Avg;
                    let float = field.data_type() == &DataType::Float64;
                    result_fields.push(Field::new(name, if avg || float { DataType::Float64 } else { DataType::Int64 }, true));
                    accumulators.push(if float {
                        Accumulator::FloatSum { column, sum: 0.0, count: 0, avg }
                    } else {
                        Accumulator::IntSum { column, sum: 0, count: 0, avg }
                    });
                }
                (function, Some(column)) => {
                    let field = &scan_columns[column].1;
                    check_orderable(aggregate, field)?;
                    result_fields.push(Field::new(name, field.data_type().clone(), true));
                    let max = function == AggregateFunction::Max;
                    accumulators.push(Accumulator::Extreme { column, max, value: None });
                }
                (_, None) => {
                    return Err(Error::InvalidAggregate {
                        aggregate: name,
                        reason: "MIN, MAX, SUM and AVG need a column".to_owned(),
                    })
                }
            }
        }
        Ok(AggregateLayout { scan_columns, result_fields, accumulators })
    }

    /// The schema of [`Self::aggregate_with_plan`]'s result: one field per aggregate,
    /// named as the aggregate prints (`count(*)`, `min(payload.size)`); counts are
    /// non-null `Int64`, `MIN`/`MAX` have their column's type and are nullable, `SUM` is
    /// `Int64` over an integer column and `Float64` over a float column, `AVG` is `Float64`
    /// (both nullable: null when no value was summed).
    ///
    /// # Errors
    /// [`Error::UnknownColumn`] for a path no record had; [`Error::InvalidAggregate`]
    /// for `MIN`/`MAX` without a column or over a struct, list or JSON-text column, and
    /// for `SUM`/`AVG` without a column or over anything but numbers.
    pub fn aggregate_schema(&self, aggregates: &[Aggregate]) -> Result<Schema> {
        Ok(Schema::new(self.aggregate_layout(aggregates)?.result_fields))
    }

    /// Runs `request` with `plan` (from [`Self::plan`]) and folds the matching records
    /// into `aggregates`, returning one row (schema: [`Self::aggregate_schema`]) — the
    /// aggregates over the records of `[request.from_address, request.to_address)` that
    /// satisfy the filter (the first `request.limit` of them, when set). With no match,
    /// counts are 0 and `MIN`/`MAX` are null. `request.columns` is ignored.
    ///
    /// # Errors
    /// As [`Self::aggregate_schema`] and [`Self::scan_with_plan`].
    pub fn aggregate_with_plan(
        &self,
        request: &ScanRequest,
        plan: &ScanPlan,
        aggregates: &[Aggregate],
    ) -> Result<(RecordBatch, ScanStats)> {
        let AggregateLayout { scan_columns, result_fields, mut accumulators } = self.aggregate_layout(aggregates)?;
        let stats = self.scan_columns(request, plan, &scan_columns, &mut |batch| {
            for accumulator in &mut accumulators {
                accumulator.fold(&batch);
            }
            Ok(ControlFlow::Continue(()))
        })?;
        let arrays =
            accumulators.iter().zip(&result_fields).map(|(a, f)| a.finish(f.data_type(), f.name())).collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(Arc::new(Schema::new(result_fields)), arrays)?;
        Ok((batch, stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psf::{parse_expr, PsfSpec};
    use crate::table::TableConfig;

    fn aggregate(function: AggregateFunction, column: Option<&str>) -> Aggregate {
        Aggregate { function, column: column.map(|c| FieldPath::parse(c).unwrap()) }
    }

    fn run(table: &Table, filter: Option<&str>, aggregates: &[Aggregate]) -> RecordBatch {
        let request = ScanRequest { filter: filter.map(|f| parse_expr(f).unwrap()), ..ScanRequest::default() };
        let plan = table.plan(&request);
        table.aggregate_with_plan(&request, &plan, aggregates).unwrap().0
    }

    fn table() -> Arc<Table> {
        let table = Table::create(TableConfig::in_memory(1 << 20)).unwrap();
        table.register_psf("type", &PsfSpec::Projection { field: "type".into() }).unwrap();
        table
            .ingest(&[
                br#"{"type": "a", "n": 5, "x": 1.5, "s": "pear", "b": true, "o": {"k": 1}, "m": 1}"#.as_slice(),
                br#"{"type": "b", "n": -2, "x": 2, "s": "apple", "b": false, "m": "one"}"#,
                br#"{"type": "a", "n": 9, "s": "\u00e9clair"}"#,
                br#"{"type": "a", "n": null, "x": -0.5}"#,
            ])
            .unwrap();
        table
    }

    #[test]
    fn count_min_max_over_matching_records_skip_nulls() {
        use AggregateFunction::{Count, Max, Min};
        let table = table();
        let aggregates = [
            aggregate(Count, None),
            aggregate(Count, Some("n")),
            aggregate(Min, Some("n")),
            aggregate(Max, Some("n")),
            aggregate(Min, Some("x")),
            aggregate(Max, Some("s")),
            aggregate(Min, Some("b")),
        ];
        let batch = run(&table, None, &aggregates);
        let schema = batch.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["count(*)", "count(n)", "min(n)", "max(n)", "min(x)", "max(s)", "min(b)"]);
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 4);
        assert_eq!(batch.column(1).as_primitive::<Int64Type>().value(0), 3);
        assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(0), -2);
        assert_eq!(batch.column(3).as_primitive::<Int64Type>().value(0), 9);
        assert!((batch.column(4).as_primitive::<Float64Type>().value(0) + 0.5).abs() < f64::EPSILON);
        assert_eq!(batch.column(5).as_string::<i32>().value(0), "\u{e9}clair", "UTF-8 byte order: é > p");
        assert!(!batch.column(6).as_boolean().value(0));

        // Through the `type` PSF's chain, with a residual filter.
        let batch = run(&table, Some("type = 'a' AND n > 6"), &aggregates[..4]);
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 1);
        assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(0), 9);
    }

    #[test]
    fn sum_and_avg_of_integer_and_float_columns_skip_nulls() {
        use AggregateFunction::{Avg, Sum};
        let table = table();
        let batch = run(&table, None, &[aggregate(Sum, Some("n")), aggregate(Avg, Some("n")), aggregate(Sum, Some("x")), aggregate(Avg, Some("x"))]);
        let schema = batch.schema();
        let types: Vec<&DataType> = schema.fields().iter().map(|f| f.data_type()).collect();
        assert_eq!(types, [&DataType::Int64, &DataType::Float64, &DataType::Float64, &DataType::Float64]);
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 12, "5 - 2 + 9, the null skipped");
        assert!((batch.column(1).as_primitive::<Float64Type>().value(0) - 4.0).abs() < 1e-12);
        // x is 1.5, 2 (an integer in a float column), -0.5
        assert!((batch.column(2).as_primitive::<Float64Type>().value(0) - 3.0).abs() < 1e-12);
        assert!((batch.column(3).as_primitive::<Float64Type>().value(0) - 1.0).abs() < 1e-12);
        let none = run(&table, Some("type = 'zzz'"), &[aggregate(Sum, Some("n")), aggregate(Avg, Some("x"))]);
        assert!(none.column(0).is_null(0) && none.column(1).is_null(0));
        for (column, function) in [("s", Sum), ("b", Avg), ("o", Sum), ("m", Avg)] {
            let error = table.aggregate_schema(&[aggregate(function, Some(column))]).unwrap_err();
            assert!(matches!(&error, Error::InvalidAggregate { .. }), "{error}");
        }
    }

    #[test]
    fn an_integer_sum_beyond_64_bits_is_an_error_not_a_wrapped_value() {
        let table = Table::create(TableConfig::in_memory(1 << 20)).unwrap();
        table.ingest(&[br#"{"n": 9223372036854775807}"#.as_slice(), br#"{"n": 1}"#]).unwrap();
        let request = ScanRequest::default();
        let plan = table.plan(&request);
        let error = table.aggregate_with_plan(&request, &plan, &[aggregate(AggregateFunction::Sum, Some("n"))]).unwrap_err();
        assert!(matches!(error, Error::AggregateOverflow { ref aggregate, sum } if aggregate == "sum(n)" && sum == i128::from(i64::MAX) + 1), "{error}");
    }

    #[test]
    fn no_match_gives_zero_counts_and_null_extremes() {
        let table = table();
        let batch = run(
            &table,
            Some("type = 'zzz'"),
            &[aggregate(AggregateFunction::Count, None), aggregate(AggregateFunction::Max, Some("n"))],
        );
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 0);
        assert!(batch.column(1).is_null(0));
        assert!(!batch.schema().field(0).is_nullable());
    }

    #[test]
    fn min_max_of_structs_mixed_types_or_unknown_columns_are_rejected_by_name() {
        let table = table();
        for (column, expected) in [("o", "min(o)"), ("m", "min(m)")] {
            let error = table.aggregate_schema(&[aggregate(AggregateFunction::Min, Some(column))]).unwrap_err();
            assert!(matches!(&error, Error::InvalidAggregate { aggregate, .. } if aggregate == expected), "{error}");
        }
        let error = table.aggregate_schema(&[aggregate(AggregateFunction::Max, None)]).unwrap_err();
        assert!(error.to_string().contains("max(*)"), "{error}");
        let error = table.aggregate_schema(&[aggregate(AggregateFunction::Count, Some("nope"))]).unwrap_err();
        assert!(matches!(error, Error::UnknownColumn { .. }), "{error}");
        // COUNT over a struct or a mixed column is fine.
        let batch = run(&table, None, &[aggregate(AggregateFunction::Count, Some("o")), aggregate(AggregateFunction::Count, Some("m"))]);
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 1);
        assert_eq!(batch.column(1).as_primitive::<Int64Type>().value(0), 2);
    }
}
