//! `GROUP BY` and the aggregates the scan does not compute itself (`sum`, `avg`), done on
//! the scan's result at the endpoint that runs it: a hash aggregation over the group keys'
//! row encoding (arrow-row), one accumulator per group and aggregate.
//!
//! The scan returns the key and argument columns of every record the `WHERE` keeps; memory
//! grows with the number of groups, bounded by [`MAX_GROUPS`].

use std::sync::Arc;

use foldhash::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::error::{ErrorClass, OpsError};

/// The most groups one query may hold (1,000,000); beyond it the query is
/// `RESOURCE_EXHAUSTED`, naming the remedy.
pub const MAX_GROUPS: usize = 1_000_000;

/// An aggregate function of SQL's select list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SqlAggregate {
    /// `count(*)` (no column) or `count(column)`: non-null `Int64`.
    Count,
    /// `min(column)`: the column's type.
    Min,
    /// `max(column)`: the column's type.
    Max,
    /// `sum(column)` of an `Int64` (`Int64`) or `Float64` (`Float64`) column.
    Sum,
    /// `avg(column)` of a numeric column: `Float64`.
    Avg,
    /// `count(DISTINCT column)`: the column's distinct non-null values, `Int64`. Computed by
    /// the grouping only (also without `GROUP BY`: one group), never by the scan.
    #[serde(rename = "count_distinct")]
    CountDistinct,
}

impl SqlAggregate {
    /// The scan's own function for the SQL one: every one but `count(DISTINCT …)`, which
    /// the grouping computes.
    #[must_use]
    pub fn pushed(self) -> Option<shoal_core::scan::AggregateFunction> {
        use shoal_core::scan::AggregateFunction as F;
        match self {
            Self::Count => Some(F::Count),
            Self::Min => Some(F::Min),
            Self::Max => Some(F::Max),
            Self::Sum => Some(F::Sum),
            Self::Avg => Some(F::Avg),
            Self::CountDistinct => None,
        }
    }
}

impl From<shoal_core::scan::AggregateFunction> for SqlAggregate {
    /// The grouping's function for the scan's (a `group_by` query groups by SQL's hash aggregation).
    fn from(function: shoal_core::scan::AggregateFunction) -> Self {
        use shoal_core::scan::AggregateFunction as F;
        match function {
            F::Count => Self::Count,
            F::Min => Self::Min,
            F::Max => Self::Max,
            F::Sum => Self::Sum,
            F::Avg => Self::Avg,
        }
    }
}

impl SqlAggregate {
    fn name(self) -> &'static str {
        match self {
            Self::Count => "count",
            Self::Min => "min",
            Self::Max => "max",
            Self::Sum => "sum",
            Self::Avg => "avg",
            Self::CountDistinct => "count",
        }
    }
}

/// One aggregate call: a function and the scan's column it reads (`None`: `count(*)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateCall {
    /// The function.
    pub function: SqlAggregate,
    /// The column (a dotted path, as the scan names it); `None` for `count(*)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
}

impl AggregateCall {
    /// The aggregate's output name: `count(*)`, `sum(payload.size)`.
    #[must_use]
    pub fn name(&self) -> String {
        let distinct = if self.function == SqlAggregate::CountDistinct { "DISTINCT " } else { "" };
        format!("{}({distinct}{})", self.function.name(), self.column.as_deref().unwrap_or("*"))
    }
}

/// `GROUP BY keys` with `aggregates` (no keys: one group over every row).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grouping {
    /// The scan's columns that make the groups.
    pub keys: Vec<String>,
    /// The aggregates computed per group.
    pub aggregates: Vec<AggregateCall>,
}

/// One aggregate's state for every group.
enum Accumulator {
    Count { column: Option<usize>, counts: Vec<i64> },
    MinMaxInt { column: usize, max: bool, values: Vec<Option<i64>> },
    MinMaxFloat { column: usize, max: bool, values: Vec<Option<f64>> },
    MinMaxBool { column: usize, max: bool, values: Vec<Option<bool>> },
    MinMaxText { column: usize, max: bool, values: Vec<Option<String>> },
    SumInt { column: usize, sums: Vec<Option<i128>> },
    SumFloat { column: usize, sums: Vec<Option<f64>> },
    Avg { column: usize, float: bool, sums: Vec<(f64, i64)> },
    /// Each group's distinct values of the column, in arrow-row's encoding.
    CountDistinct { column: usize, converter: RowConverter, sets: Vec<foldhash::HashSet<Box<[u8]>>> },
}

/// The most distinct values `count(DISTINCT …)` holds over all groups of one query
/// (10,000,000); beyond it the query is `RESOURCE_EXHAUSTED`.
pub const MAX_DISTINCT_VALUES: usize = 10_000_000;

/// The groups of one `Utf8` key: each group's number by the key's bytes, and the null
/// key's group ([`Grouper`]'s `text_key`).
type TextKeyGroups = (HashMap<Box<[u8]>, usize>, Option<usize>);

/// Hash aggregation of a scan's batches by [`Grouping`].
pub(crate) struct Grouper {
    keys: Vec<usize>,
    converter: RowConverter,
    /// Each group's number by the bytes of its key row (arrow-row's encoding).
    groups: HashMap<Box<[u8]>, usize>,
    /// One `Utf8` key (`GROUP BY type`): each group's number by the key's bytes, and the
    /// null key's group, so that a row costs one hash lookup of its string (no row
    /// encoding); `None` for other keys.
    text_key: Option<TextKeyGroups>,
    /// Each group's key row, in order of first appearance (empty without keys).
    order: Vec<Box<[u8]>>,
    group_count: usize,
    accumulators: Vec<Accumulator>,
    output: SchemaRef,
}

fn invalid(message: String) -> OpsError {
    OpsError::invalid_argument(crate::protocol::bounded(message))
}

impl Grouper {
    /// A grouper for batches of `input`.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when a key or argument is not in `input`, a key cannot be
    /// grouped (a struct or list), or an aggregate does not apply to its column's type
    /// (`sum` of a string, `min` of a struct).
    pub(crate) fn new(grouping: &Grouping, input: &SchemaRef) -> Result<Self, OpsError> {
        let index = |name: &str| input.index_of(name).map_err(|_| invalid(format!("column {name:?} is not in the result")));
        let mut keys = Vec::new();
        let mut fields = Vec::new();
        for key in &grouping.keys {
            let i = index(key)?;
            let field = input.field(i);
            if matches!(field.data_type(), DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) | DataType::Map(..)) {
                return Err(invalid(format!("GROUP BY {key}: a column of type {} cannot be grouped (group by one of its fields)", field.data_type())));
            }
            keys.push(i);
            fields.push(field.clone());
        }
        let converter = RowConverter::new(keys.iter().map(|&i| SortField::new(input.field(i).data_type().clone())).collect())
            .map_err(|e| invalid(format!("GROUP BY: {e}")))?;
        let mut accumulators = Vec::new();
        for call in &grouping.aggregates {
            let name = call.name();
            let Some(column_name) = &call.column else {
                accumulators.push(Accumulator::Count { column: None, counts: Vec::new() });
                fields.push(Field::new(name, DataType::Int64, false));
                continue;
            };
            let column = index(column_name)?;
            let data_type = input.field(column).data_type().clone();
            let json_text = input.field(column).metadata().contains_key("shoal.json_text");
            let wrong = || invalid(format!("{name}: {column_name} is of type {data_type}{}", if json_text { " (JSON text of mixed types)" } else { "" }));
            let max = call.function == SqlAggregate::Max;
            let (accumulator, output_type) = match (call.function, &data_type) {
                (SqlAggregate::Count, _) => (Accumulator::Count { column: Some(column), counts: Vec::new() }, DataType::Int64),
                (SqlAggregate::CountDistinct, DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) | DataType::Map(..)) => return Err(wrong()),
                (SqlAggregate::CountDistinct, _) => {
                    let converter = RowConverter::new(vec![SortField::new(data_type.clone())]).map_err(|e| invalid(format!("{name}: {e}")))?;
                    (Accumulator::CountDistinct { column, converter, sets: Vec::new() }, DataType::Int64)
                }
                (SqlAggregate::Min | SqlAggregate::Max, DataType::Int64) => (Accumulator::MinMaxInt { column, max, values: Vec::new() }, DataType::Int64),
                (SqlAggregate::Min | SqlAggregate::Max, DataType::Float64) => (Accumulator::MinMaxFloat { column, max, values: Vec::new() }, DataType::Float64),
                (SqlAggregate::Min | SqlAggregate::Max, DataType::Boolean) => (Accumulator::MinMaxBool { column, max, values: Vec::new() }, DataType::Boolean),
                (SqlAggregate::Min | SqlAggregate::Max, DataType::Utf8) if !json_text => (Accumulator::MinMaxText { column, max, values: Vec::new() }, DataType::Utf8),
                (SqlAggregate::Sum, DataType::Int64) => (Accumulator::SumInt { column, sums: Vec::new() }, DataType::Int64),
                (SqlAggregate::Sum, DataType::Float64) => (Accumulator::SumFloat { column, sums: Vec::new() }, DataType::Float64),
                (SqlAggregate::Avg, DataType::Int64 | DataType::Float64) => {
                    (Accumulator::Avg { column, float: data_type == DataType::Float64, sums: Vec::new() }, DataType::Float64)
                }
                _ => return Err(wrong()),
            };
            accumulators.push(accumulator);
            fields.push(Field::new(name, output_type, !matches!(call.function, SqlAggregate::Count | SqlAggregate::CountDistinct)));
        }
        let text_key = (keys.len() == 1 && input.field(keys[0]).data_type() == &DataType::Utf8).then(|| (HashMap::default(), None));
        let mut grouper = Self {
            keys,
            converter,
            groups: HashMap::default(),
            text_key,
            order: Vec::new(),
            group_count: 0,
            accumulators,
            output: Arc::new(Schema::new(fields)),
        };
        if grouper.keys.is_empty() {
            // No keys: one group, present even when no row comes (SQL's `count(*)` of nothing is 0).
            grouper.add_group(None)?;
        }
        Ok(grouper)
    }

    /// Keys then aggregates, named by the keys' columns and [`AggregateCall::name`].
    pub(crate) fn schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    fn add_group(&mut self, row: Option<&[u8]>) -> Result<usize, OpsError> {
        let group = self.group_count;
        if group >= MAX_GROUPS {
            return Err(OpsError::new(
                ErrorClass::ResourceExhausted,
                format!("GROUP BY made more than {MAX_GROUPS} groups: group by fewer or coarser columns, or narrow the WHERE"),
            ));
        }
        if let Some(row) = row {
            self.groups.insert(row.into(), group);
            self.order.push(row.into());
        }
        self.group_count += 1;
        for accumulator in &mut self.accumulators {
            match accumulator {
                Accumulator::Count { counts, .. } => counts.push(0),
                Accumulator::MinMaxInt { values, .. } => values.push(None),
                Accumulator::MinMaxFloat { values, .. } => values.push(None),
                Accumulator::MinMaxBool { values, .. } => values.push(None),
                Accumulator::MinMaxText { values, .. } => values.push(None),
                Accumulator::SumInt { sums, .. } => sums.push(None),
                Accumulator::SumFloat { sums, .. } => sums.push(None),
                Accumulator::Avg { sums, .. } => sums.push((0.0, 0)),
                Accumulator::CountDistinct { sets, .. } => sets.push(foldhash::HashSet::default()),
            }
        }
        Ok(group)
    }

    /// Adds a batch of the scan's rows to the groups.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` past [`MAX_GROUPS`]; Arrow errors as `INTERNAL`.
    pub(crate) fn push(&mut self, batch: &RecordBatch) -> Result<(), OpsError> {
        let groups: Vec<usize> = if self.keys.is_empty() {
            vec![0; batch.num_rows()]
        } else if self.text_key.is_some() {
            self.text_groups(batch.column(self.keys[0]))?
        } else {
            let columns: Vec<ArrayRef> = self.keys.iter().map(|&i| Arc::clone(batch.column(i))).collect();
            let rows = self.converter.convert_columns(&columns).map_err(|e| OpsError::internal(e.to_string()))?;
            let mut groups = Vec::with_capacity(batch.num_rows());
            for row in &rows {
                let group = match self.groups.get(row.as_ref()) {
                    Some(&group) => group,
                    None => self.add_group(Some(row.as_ref()))?,
                };
                groups.push(group);
            }
            groups
        };
        for accumulator in &mut self.accumulators {
            update(accumulator, batch, &groups)?;
        }
        let distinct: usize = self
            .accumulators
            .iter()
            .map(|a| if let Accumulator::CountDistinct { sets, .. } = a { sets.iter().map(foldhash::HashSet::len).sum() } else { 0 })
            .sum();
        if distinct > MAX_DISTINCT_VALUES {
            return Err(OpsError::new(
                ErrorClass::ResourceExhausted,
                format!("count(DISTINCT …) holds more than {MAX_DISTINCT_VALUES} distinct values: narrow the WHERE, or group by coarser keys"),
            ));
        }
        Ok(())
    }

    /// Each row's group by its one `Utf8` key ([`Self::text_key`]); a new key's group is
    /// added with the key's row encoding, as [`Self::push`] adds it for other keys.
    fn text_groups(&mut self, keys: &ArrayRef) -> Result<Vec<usize>, OpsError> {
        let strings = keys.as_string::<i32>();
        let mut groups = Vec::with_capacity(strings.len());
        for row in 0..strings.len() {
            let (by_text, null_group) = self.text_key.as_ref().ok_or_else(|| OpsError::internal("no text key"))?;
            let known = if strings.is_valid(row) { by_text.get(strings.value(row).as_bytes()).copied() } else { *null_group };
            let group = match known {
                Some(group) => group,
                None => {
                    let encoded = self.converter.convert_columns(&[keys.slice(row, 1)]).map_err(|e| OpsError::internal(e.to_string()))?;
                    let group = self.add_group(Some(encoded.row(0).as_ref()))?;
                    let (by_text, null_group) = self.text_key.as_mut().ok_or_else(|| OpsError::internal("no text key"))?;
                    if strings.is_valid(row) {
                        by_text.insert(strings.value(row).as_bytes().into(), group);
                    } else {
                        *null_group = Some(group);
                    }
                    group
                }
            };
            groups.push(group);
        }
        Ok(groups)
    }

    /// The groups as one batch (keys, then aggregates), in order of first appearance.
    ///
    /// # Errors
    /// `OUT_OF_RANGE` when an integer sum passes `Int64`; Arrow errors as `INTERNAL`.
    pub(crate) fn finish(&mut self) -> Result<RecordBatch, OpsError> {
        let mut columns: Vec<ArrayRef> = if self.keys.is_empty() {
            Vec::new()
        } else {
            let parser = self.converter.parser();
            self.converter.convert_rows(self.order.iter().map(|bytes| parser.parse(bytes))).map_err(|e| OpsError::internal(e.to_string()))?
        };
        for accumulator in &self.accumulators {
            columns.push(match accumulator {
                Accumulator::Count { counts, .. } => Arc::new(Int64Array::from(counts.clone())),
                Accumulator::MinMaxInt { values, .. } => Arc::new(Int64Array::from(values.clone())),
                Accumulator::MinMaxFloat { values, .. } => Arc::new(Float64Array::from(values.clone())),
                Accumulator::MinMaxBool { values, .. } => Arc::new(BooleanArray::from(values.clone())),
                Accumulator::MinMaxText { values, .. } => Arc::new(StringArray::from(values.clone())),
                Accumulator::SumInt { sums, .. } => {
                    let sums = sums
                        .iter()
                        .map(|s| s.map(i64::try_from).transpose())
                        .collect::<Result<Vec<Option<i64>>, _>>()
                        .map_err(|_| OpsError::new(ErrorClass::OutOfRange, "sum(): an integer sum passes the range of Int64"))?;
                    Arc::new(Int64Array::from(sums))
                }
                Accumulator::SumFloat { sums, .. } => Arc::new(Float64Array::from(sums.clone())),
                #[allow(clippy::cast_precision_loss)]
                Accumulator::Avg { sums, .. } => {
                    Arc::new(Float64Array::from(sums.iter().map(|&(sum, n)| (n > 0).then(|| sum / n as f64)).collect::<Vec<_>>()))
                }
                Accumulator::CountDistinct { sets, .. } => {
                    Arc::new(Int64Array::from(sets.iter().map(|set| i64::try_from(set.len()).unwrap_or(i64::MAX)).collect::<Vec<_>>()))
                }
            });
        }
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(self.group_count));
        RecordBatch::try_new_with_options(Arc::clone(&self.output), columns, &options).map_err(|e| OpsError::internal(e.to_string()))
    }
}

/// Adds each row's value of the accumulator's column to its group.
///
/// # Errors
/// Arrow's row encoding failing, as `INTERNAL`.
#[allow(clippy::cast_precision_loss)]
fn update(accumulator: &mut Accumulator, batch: &RecordBatch, groups: &[usize]) -> Result<(), OpsError> {
    fn extreme<T: PartialOrd + Clone>(slot: &mut Option<T>, value: T, max: bool) {
        let better = match slot {
            None => true,
            Some(current) => (max && value > *current) || (!max && value < *current),
        };
        if better {
            *slot = Some(value);
        }
    }
    match accumulator {
        Accumulator::Count { column: None, counts } => groups.iter().for_each(|&g| counts[g] += 1),
        Accumulator::Count { column: Some(c), counts } => {
            let array = batch.column(*c);
            for (row, &g) in groups.iter().enumerate() {
                counts[g] += i64::from(array.is_valid(row));
            }
        }
        Accumulator::MinMaxInt { column, max, values } => {
            let array = batch.column(*column).as_primitive::<Int64Type>();
            for (row, &g) in groups.iter().enumerate() {
                if array.is_valid(row) {
                    extreme(&mut values[g], array.value(row), *max);
                }
            }
        }
        Accumulator::MinMaxFloat { column, max, values } => {
            let array = batch.column(*column).as_primitive::<Float64Type>();
            for (row, &g) in groups.iter().enumerate() {
                if array.is_valid(row) {
                    extreme(&mut values[g], array.value(row), *max);
                }
            }
        }
        Accumulator::MinMaxBool { column, max, values } => {
            let array = batch.column(*column).as_boolean();
            for (row, &g) in groups.iter().enumerate() {
                if array.is_valid(row) {
                    extreme(&mut values[g], array.value(row), *max);
                }
            }
        }
        Accumulator::MinMaxText { column, max, values } => {
            let array = batch.column(*column).as_string::<i32>();
            for (row, &g) in groups.iter().enumerate() {
                if array.is_valid(row) {
                    let value = array.value(row);
                    let better = values[g].as_deref().is_none_or(|current| if *max { value > current } else { value < current });
                    if better {
                        values[g] = Some(value.to_owned());
                    }
                }
            }
        }
        Accumulator::SumInt { column, sums } => {
            let array = batch.column(*column).as_primitive::<Int64Type>();
            for (row, &g) in groups.iter().enumerate() {
                if array.is_valid(row) {
                    *sums[g].get_or_insert(0) += i128::from(array.value(row));
                }
            }
        }
        Accumulator::SumFloat { column, sums } => {
            let array = batch.column(*column).as_primitive::<Float64Type>();
            for (row, &g) in groups.iter().enumerate() {
                if array.is_valid(row) {
                    *sums[g].get_or_insert(0.0) += array.value(row);
                }
            }
        }
        Accumulator::Avg { column, float, sums } => {
            let array = batch.column(*column);
            for (row, &g) in groups.iter().enumerate() {
                if array.is_valid(row) {
                    let value = if *float {
                        array.as_primitive::<Float64Type>().value(row)
                    } else {
                        array.as_primitive::<Int64Type>().value(row) as f64
                    };
                    sums[g].0 += value;
                    sums[g].1 += 1;
                }
            }
        }
        Accumulator::CountDistinct { column, converter, sets } => {
            let array = batch.column(*column);
            let rows = converter.convert_columns(&[Arc::clone(array)]).map_err(|e| OpsError::internal(e.to_string()))?;
            for (row, &g) in groups.iter().enumerate() {
                if array.is_valid(row) {
                    let encoded = rows.row(row);
                    if !sets[g].contains(encoded.as_ref()) {
                        sets[g].insert(encoded.as_ref().into());
                    }
                }
            }
        }
    }
    Ok(())
}
