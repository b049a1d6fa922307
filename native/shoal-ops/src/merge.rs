//! Final aggregates from partial ones: what a reader of several partial answers (the
//! endpoints of a `"partial": true` query, or the shards of a sharded table) does to get
//! the answer one scan of everything would give — counts and sums summed, the least of
//! the minimums, the greatest of the maximums, averages as the summed sums over the
//! summed counts — per group (`group_by`) or over everything.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Float64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::error::OpsError;
use crate::protocol::AggregateSpec;
use crate::sql::{AggregateCall, Grouping, SqlAggregate};
use shoal_core::scan::AggregateFunction;

/// The aggregates to ask each part for, partially, so that [`merge_partials`] can finish
/// `aggregates`: the same, with each `avg` asked as a `sum` and a `count` of its column.
#[must_use]
pub fn partial_aggregates(aggregates: &[AggregateSpec]) -> Vec<AggregateSpec> {
    aggregates
        .iter()
        .flat_map(|spec| match spec.function {
            AggregateFunction::Avg => vec![
                AggregateSpec { function: AggregateFunction::Sum, column: spec.column.clone() },
                AggregateSpec { function: AggregateFunction::Count, column: spec.column.clone() },
            ],
            _ => vec![spec.clone()],
        })
        .collect()
}

/// Merges `partials` — rows of the group keys (`keys` columns), then one column per
/// aggregate of [`partial_aggregates`]`(aggregates)` — into the final answer in `schema`
/// (the keys, then one column per aggregate of `aggregates`): one row per group, or one
/// row without keys.
///
/// # Errors
/// `INVALID_ARGUMENT` when a partial column cannot be merged (a type the grouping does
/// not aggregate); `INTERNAL` when the partials do not have the layout above.
pub fn merge_partials(keys: usize, aggregates: &[AggregateSpec], partials: &[RecordBatch], schema: &SchemaRef) -> Result<RecordBatch, OpsError> {
    let width = keys + partial_aggregates(aggregates).len();
    let Some(first) = partials.first() else {
        return Err(OpsError::internal("no partial aggregates to merge"));
    };
    // The partials' columns, positionally, under plain names (c0, c1, …): the first
    // part's types, the others cast to them.
    let input: SchemaRef = Arc::new(Schema::new(
        first.schema().fields().iter().enumerate().map(|(i, f)| Field::new(format!("c{i}"), f.data_type().clone(), true)).collect::<Vec<_>>(),
    ));
    if input.fields().len() != width {
        return Err(OpsError::internal(format!("partial aggregates have {} columns, expected {width}", input.fields().len())));
    }
    let mut calls = Vec::new();
    let mut column = keys;
    for spec in aggregates {
        let merged = |function, column: usize| AggregateCall { function, column: Some(format!("c{column}")) };
        match spec.function {
            AggregateFunction::Count | AggregateFunction::Sum => calls.push(merged(SqlAggregate::Sum, column)),
            AggregateFunction::Min => calls.push(merged(SqlAggregate::Min, column)),
            AggregateFunction::Max => calls.push(merged(SqlAggregate::Max, column)),
            AggregateFunction::Avg => {
                calls.push(merged(SqlAggregate::Sum, column));
                calls.push(merged(SqlAggregate::Sum, column + 1));
                column += 1;
            }
        }
        column += 1;
    }
    let grouping = Grouping { keys: (0..keys).map(|i| format!("c{i}")).collect(), aggregates: calls };
    let mut grouper = crate::sql::Grouper::new(&grouping, &input)?;
    for batch in partials {
        let columns = batch
            .columns()
            .iter()
            .zip(input.fields())
            .map(|(c, f)| if c.data_type() == f.data_type() { Ok(Arc::clone(c)) } else { arrow_cast::cast(c, f.data_type()) })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| OpsError::internal(format!("partial aggregates of different types: {e}")))?;
        let batch = RecordBatch::try_new(Arc::clone(&input), columns).map_err(|e| OpsError::internal(e.to_string()))?;
        grouper.push(&batch)?;
    }
    let grouped = grouper.finish()?;
    let mut columns: Vec<ArrayRef> = grouped.columns()[..keys].to_vec();
    let mut at = keys;
    for spec in aggregates {
        if spec.function == AggregateFunction::Avg {
            columns.push(average(grouped.column(at), grouped.column(at + 1))?);
            at += 2;
        } else {
            columns.push(Arc::clone(grouped.column(at)));
            at += 1;
        }
    }
    let columns = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| if c.data_type() == f.data_type() { Ok(c) } else { arrow_cast::cast(&c, f.data_type()) })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| OpsError::internal(format!("merged aggregates: {e}")))?;
    RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| OpsError::internal(format!("merged aggregates: {e}")))
}

/// `sums / counts` as `Float64`, null where the count is 0 (SQL's `avg` of nothing).
fn average(sums: &ArrayRef, counts: &ArrayRef) -> Result<ArrayRef, OpsError> {
    let sums = arrow_cast::cast(sums, &DataType::Float64).map_err(|e| OpsError::internal(e.to_string()))?;
    let counts = arrow_cast::cast(counts, &DataType::Int64).map_err(|e| OpsError::internal(e.to_string()))?;
    let (sums, counts) = (sums.as_primitive::<Float64Type>(), counts.as_primitive::<Int64Type>());
    #[allow(clippy::cast_precision_loss)]
    let averages: Float64Array = (0..sums.len())
        .map(|i| (!sums.is_null(i) && !counts.is_null(i) && counts.value(i) > 0).then(|| sums.value(i) / counts.value(i) as f64))
        .collect();
    Ok(Arc::new(averages))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};

    fn spec(function: AggregateFunction, column: Option<&str>) -> AggregateSpec {
        AggregateSpec { function, column: column.map(str::to_owned) }
    }

    /// Two parts' partial rows per group merge into what one scan of both would answer.
    #[test]
    fn partials_of_two_parts_merge_per_group() {
        let aggregates = [spec(AggregateFunction::Count, None), spec(AggregateFunction::Avg, Some("x")), spec(AggregateFunction::Max, Some("x"))];
        assert_eq!(partial_aggregates(&aggregates).len(), 4);
        let partial_schema = Arc::new(Schema::new(vec![
            Field::new("type", DataType::Utf8, true),
            Field::new("count(*)", DataType::Int64, false),
            Field::new("sum(x)", DataType::Int64, true),
            Field::new("count(x)", DataType::Int64, false),
            Field::new("max(x)", DataType::Int64, true),
        ]));
        let part = |types: Vec<Option<&str>>, counts: Vec<i64>, sums: Vec<Option<i64>>, xs: Vec<i64>, maxes: Vec<Option<i64>>| {
            RecordBatch::try_new(
                Arc::clone(&partial_schema),
                vec![
                    Arc::new(StringArray::from(types)),
                    Arc::new(Int64Array::from(counts)),
                    Arc::new(Int64Array::from(sums)),
                    Arc::new(Int64Array::from(xs)),
                    Arc::new(Int64Array::from(maxes)),
                ],
            )
            .unwrap()
        };
        let a = part(vec![Some("push"), None], vec![3, 1], vec![Some(6), None], vec![3, 0], vec![Some(3), None]);
        let b = part(vec![Some("push"), Some("fork")], vec![1, 2], vec![Some(10), Some(4)], vec![1, 2], vec![Some(10), Some(3)]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("type", DataType::Utf8, true),
            Field::new("count(*)", DataType::Int64, false),
            Field::new("avg(x)", DataType::Float64, true),
            Field::new("max(x)", DataType::Int64, true),
        ]));
        let merged = merge_partials(1, &aggregates, &[a, b], &schema).unwrap();
        let types: Vec<Option<&str>> = merged.column(0).as_string::<i32>().iter().collect();
        assert_eq!(types, vec![Some("push"), None, Some("fork")]);
        assert_eq!(merged.column(1).as_primitive::<Int64Type>().values().to_vec(), vec![4, 1, 2]);
        let averages: Vec<Option<f64>> = merged.column(2).as_primitive::<Float64Type>().iter().collect();
        assert_eq!(averages, vec![Some(4.0), None, Some(2.0)]);
        let maxes: Vec<Option<i64>> = merged.column(3).as_primitive::<Int64Type>().iter().collect();
        assert_eq!(maxes, vec![Some(10), None, Some(3)]);
    }
}
