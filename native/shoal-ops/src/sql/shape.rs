//! Shaping a scan's result for a SQL statement: sort, offset, limit, projection and names
//! ([`ResultShape`]), done at the endpoint that runs the scan.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ord::sort::{lexsort_to_indices, SortColumn, SortOptions};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use super::group::Grouper;
use super::{ResultShape, MAX_SORT_BYTES};
use crate::error::OpsError;


/// Applies a [`ResultShape`] to the batches of a scan, as they come: a projection, offset
/// and limit stream through; a sort holds the result (with a `LIMIT`, only the best
/// `offset + limit` rows, re-sorted as batches arrive) until [`Shaper::finish`].
pub struct Shaper {
    shape: ResultShape,
    /// `GROUP BY`: takes every batch; its groups are what the other steps shape.
    grouper: Option<Grouper>,
    /// Indices of the output columns in the scan's batches, and the output schema.
    projection: Vec<usize>,
    output: SchemaRef,
    /// Sort keys as column indices of the scan's batches.
    sort: Vec<(usize, SortOptions)>,
    input: SchemaRef,
    held: Vec<RecordBatch>,
    pub(super) held_rows: usize,
    /// Rows still to skip (streaming) and rows still to emit.
    to_skip: usize,
    to_emit: usize,
}

impl Shaper {
    /// A shaper for batches of `input` (the scan's schema).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when a column the shape names is not in `input` or cannot be
    /// sorted (structs, lists).
    pub fn new(shape: &ResultShape, input: &SchemaRef) -> Result<Self, OpsError> {
        let grouper = shape.group_by.as_ref().map(|g| Grouper::new(g, input)).transpose()?;
        let input = &grouper.as_ref().map_or_else(|| Arc::clone(input), Grouper::schema);
        let index = |name: &str| {
            input.index_of(name).map_err(|_| OpsError::invalid_argument(crate::protocol::bounded(format!("column {name:?} is not in the result"))))
        };
        let (projection, fields): (Vec<usize>, Vec<Field>) = match &shape.projection {
            None => ((0..input.fields().len()).collect(), input.fields().iter().map(|f| f.as_ref().clone()).collect()),
            Some(columns) => columns
                .iter()
                .map(|(column, output)| {
                    let i = index(column)?;
                    Ok((i, input.field(i).clone().with_name(output.clone())))
                })
                .collect::<Result<Vec<_>, OpsError>>()?
                .into_iter()
                .unzip(),
        };
        let mut sort = Vec::new();
        for key in &shape.order_by {
            let i = index(&key.column)?;
            let data_type = input.field(i).data_type();
            if matches!(data_type, DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) | DataType::Map(..)) {
                return Err(OpsError::invalid_argument(format!(
                    "ORDER BY {}: a column of type {data_type} cannot be sorted (sort by one of its fields)",
                    key.column
                )));
            }
            sort.push((i, SortOptions { descending: key.descending, nulls_first: key.nulls_first }));
        }
        Ok(Self {
            output: Arc::new(Schema::new_with_metadata(fields, input.metadata().clone())),
            projection,
            sort,
            input: Arc::clone(input),
            held: Vec::new(),
            held_rows: 0,
            to_skip: shape.offset,
            to_emit: shape.limit.unwrap_or(usize::MAX),
            shape: shape.clone(),
            grouper,
        })
    }

    /// The schema of every batch the shaper emits.
    #[must_use]
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// Whether no more rows will be emitted (the limit is reached): the scan may stop.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.grouper.is_none() && self.sort.is_empty() && self.to_emit == 0
    }

    /// Takes one batch of the scan; returns what may be emitted now.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` when a sort without a limit passes [`MAX_SORT_BYTES`]; Arrow
    /// errors as `INTERNAL`.
    pub fn push(&mut self, batch: RecordBatch) -> Result<Option<RecordBatch>, OpsError> {
        if let Some(grouper) = &mut self.grouper {
            grouper.push(&batch)?;
            return Ok(None);
        }
        if !self.sort.is_empty() {
            self.held_rows += batch.num_rows();
            self.held.push(batch);
            let keep = self.shape.limit.map(|l| l.saturating_add(self.shape.offset));
            match keep {
                Some(keep) if self.held_rows > keep.saturating_mul(2).max(8192) => {
                    let sorted = self.sorted(Some(keep))?;
                    self.held_rows = sorted.num_rows();
                    self.held = vec![sorted];
                }
                None if self.held.iter().map(RecordBatch::get_array_memory_size).sum::<usize>() > MAX_SORT_BYTES => {
                    return Err(OpsError::new(
                        crate::ErrorClass::ResourceExhausted,
                        format!(
                            "ORDER BY without LIMIT sorts the whole result in memory, and it passed {} MiB: add a LIMIT or \
                             a narrower WHERE",
                            MAX_SORT_BYTES >> 20
                        ),
                    ));
                }
                _ => {}
            }
            return Ok(None);
        }
        let mut batch = batch;
        if self.to_skip > 0 {
            let skip = self.to_skip.min(batch.num_rows());
            self.to_skip -= skip;
            batch = batch.slice(skip, batch.num_rows() - skip);
        }
        let take = self.to_emit.min(batch.num_rows());
        self.to_emit -= take;
        if take == 0 {
            return Ok(None);
        }
        self.project(&batch.slice(0, take)).map(Some)
    }

    /// Ends the result: the sorted rows, if the shape sorts (`None` otherwise or when empty).
    ///
    /// # Errors
    /// Arrow errors as `INTERNAL`.
    pub fn finish(&mut self) -> Result<Option<RecordBatch>, OpsError> {
        if let Some(mut grouper) = self.grouper.take() {
            let mut groups = grouper.finish()?;
            if let Some(having) = &self.shape.having {
                groups = keep_having(having, &groups)?;
            }
            let groups = self.push(groups)?;
            if self.sort.is_empty() {
                return Ok(groups);
            }
        }
        if self.sort.is_empty() {
            return Ok(None);
        }
        let sorted = self.sorted(self.shape.limit.map(|l| l.saturating_add(self.shape.offset)))?;
        self.held.clear();
        let from = self.shape.offset.min(sorted.num_rows());
        let count = self.shape.limit.unwrap_or(usize::MAX).min(sorted.num_rows() - from);
        self.project(&sorted.slice(from, count)).map(Some)
    }

    /// The held batches as one, sorted, cut to `keep` rows.
    fn sorted(&self, keep: Option<usize>) -> Result<RecordBatch, OpsError> {
        let whole = arrow_select::concat::concat_batches(&self.input, &self.held).map_err(arrow_error)?;
        let columns: Vec<SortColumn> = self
            .sort
            .iter()
            .map(|(i, options)| SortColumn { values: Arc::clone(whole.column(*i)), options: Some(*options) })
            .collect();
        let indices = lexsort_to_indices(&columns, keep).map_err(arrow_error)?;
        arrow_select::take::take_record_batch(&whole, &indices).map_err(arrow_error)
    }

    fn project(&self, batch: &RecordBatch) -> Result<RecordBatch, OpsError> {
        let columns: Vec<ArrayRef> = self.projection.iter().map(|i| Arc::clone(batch.column(*i))).collect();
        RecordBatch::try_new_with_options(
            Arc::clone(&self.output),
            columns,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )
        .map_err(arrow_error)
    }
}

/// The groups `having` keeps: its condition evaluated on each group's row (SQL's
/// three-valued logic: a condition that is unknown drops the group).
///
/// # Errors
/// `INVALID_ARGUMENT` for a condition that does not parse (a ticket not made by this
/// server); Arrow errors as `INTERNAL`.
fn keep_having(having: &super::Having, groups: &RecordBatch) -> Result<RecordBatch, OpsError> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type};
    use shoal_core::FieldValue;
    let expr = shoal_core::psf::parse_expr(&having.filter).map_err(|e| OpsError::invalid_argument(format!("HAVING: {e}")))?;
    let columns: Vec<(String, Option<&ArrayRef>)> = having.columns.iter().map(|(path, column)| (path.clone(), groups.column_by_name(column))).collect();
    fn value(array: &ArrayRef, row: usize) -> FieldValue<'_> {
        if array.is_null(row) {
            return FieldValue::Null;
        }
        match array.data_type() {
            DataType::Int64 => FieldValue::Int(array.as_primitive::<Int64Type>().value(row)),
            DataType::Float64 => FieldValue::Float(array.as_primitive::<Float64Type>().value(row)),
            DataType::Boolean => FieldValue::Bool(array.as_boolean().value(row)),
            DataType::Utf8 => FieldValue::Str(std::borrow::Cow::Borrowed(array.as_string::<i32>().value(row))),
            _ => FieldValue::Missing,
        }
    }
    let keep: arrow_array::BooleanArray = (0..groups.num_rows())
        .map(|row| {
            let lookup = |path: &shoal_core::FieldPath| {
                let name = path.to_string();
                columns.iter().find(|(p, _)| *p == name).and_then(|(_, a)| *a).map_or(FieldValue::Missing, |a| value(a, row))
            };
            Some(expr.eval_with(&lookup) == Some(true))
        })
        .collect();
    arrow_select::filter::filter_record_batch(groups, &keep).map_err(arrow_error)
}

fn arrow_error(error: ArrowError) -> OpsError {
    OpsError::internal(format!("shaping the result: {error}"))
}

