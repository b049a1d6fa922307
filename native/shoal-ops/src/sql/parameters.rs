//! Parameters of prepared statements: their schema (typed by the fields the placeholders
//! are compared with), statements parsed before values are bound, and bound values as
//! literals.

use arrow_array::Array;
use arrow_schema::{DataType, Field, Schema};
use shoal_core::psf::Literal;

use super::{count_placeholders, engine_error, parse_sql, Parameters, SqlStatement};
use crate::error::OpsError;

/// The parameter schema of a prepared statement (Flight SQL's `parameter_schema`, which
/// JDBC drivers bind by): one nullable field per placeholder, named by its number (`1`,
/// `2`, …), typed as the inferred type of the field the placeholder is compared with
/// (`actor.id = ?` → `Int64`): `Int64`, `Float64`, `Utf8` or `Boolean`; `Utf8` where it is
/// compared with no field, or with one of another type (a struct, a list, JSON text).
///
/// # Errors
/// `INVALID_ARGUMENT` for a statement that does not parse; `NOT_FOUND` for an unknown table.
pub fn parameter_schema(catalog: &crate::catalog::Catalog, text: &str) -> Result<Schema, OpsError> {
    let Some((table, fields)) = parameter_fields(text)? else { return Ok(Schema::empty()) };
    let table = catalog.get(&table)?;
    Ok(parameter_types(fields.iter().map(|path| {
        let inferred = path.as_ref().and_then(|p| table.table.output_columns(std::slice::from_ref(p)).ok());
        inferred.as_deref().map(|c| c[0].1.data_type().clone())
    })))
}

/// A statement's table and, per placeholder in number order, the field it is compared with.
pub type ParameterFields = (String, Vec<Option<shoal_core::FieldPath>>);

/// The table a statement reads and, for each of its placeholders in number order, the
/// field it is compared with (`None`: with no field). `None` for a statement without
/// placeholders. What [`parameter_schema`] types, for callers that find the fields' types
/// elsewhere (a table sharded over several daemons).
///
/// # Errors
/// `INVALID_ARGUMENT` for a statement that does not parse.
pub fn parameter_fields(text: &str) -> Result<Option<ParameterFields>, OpsError> {
    let count = count_placeholders(text)?;
    if count == 0 {
        return Ok(None);
    }
    // Each placeholder bound to a string no record holds, then found again in the lowered
    // filter beside the field it is compared with. Where a string cannot stand (`LIMIT ?`),
    // every parameter is `Utf8`.
    let sentinels = sentinels(count);
    let mut fields: Vec<Option<shoal_core::FieldPath>> = vec![None; count];
    let statement = match parse_sql(text, Parameters::Bound(&sentinels)) {
        Ok(statement) => {
            if let Some(filter) = &statement.command.filter {
                let expr = shoal_core::psf::expr::parse_expr_within(filter, shoal_core::psf::expr::MAX_RENDERED_EXPR_BYTES).map_err(|e| engine_error(text, &e))?;
                collect_parameter_fields(&expr, &sentinels, &mut fields);
            }
            statement
        }
        Err(_) => parse_unbound(text)?,
    };
    Ok(Some((statement.command.table, fields)))
}

/// The parameter schema of placeholders compared with fields of these inferred types, in
/// number order (see [`parameter_schema`]): `Int64`, `Float64` and `Boolean` as they are,
/// anything else (or no field) `Utf8`.
pub fn parameter_types(types: impl Iterator<Item = Option<DataType>>) -> Schema {
    let types = types.map(|inferred| match inferred {
        Some(t @ (DataType::Int64 | DataType::Float64 | DataType::Boolean)) => t,
        _ => DataType::Utf8,
    });
    Schema::new(types.enumerate().map(|(i, t)| Field::new((i + 1).to_string(), t, true)).collect::<Vec<_>>())
}

/// Strings that stand for placeholders 1..=count (no record holds them).
fn sentinels(count: usize) -> Vec<Literal> {
    (1..=count).map(|i| Literal::Str(format!("\u{1}shoal-parameter-{i}\u{1}"))).collect()
}

/// Parses a statement whose placeholders have no values yet (a prepared statement, to check
/// it and find its result schema): each placeholder stands for `NULL`, or, where `NULL`
/// cannot stand (a `LIKE` pattern), for a string.
///
/// # Errors
/// As [`parse_sql`] with `NULL`s.
pub fn parse_unbound(text: &str) -> Result<SqlStatement, OpsError> {
    parse_sql(text, Parameters::Unbound).or_else(|null_error| {
        let count = count_placeholders(text)?;
        if count == 0 {
            return Err(null_error);
        }
        parse_sql(text, Parameters::Bound(&sentinels(count))).map_err(|_| null_error)
    })
}

/// Notes, for each sentinel literal in `expr`, the field it is compared with.
fn collect_parameter_fields(expr: &shoal_core::psf::Expr, sentinels: &[Literal], fields: &mut [Option<shoal_core::FieldPath>]) {
    use shoal_core::psf::Expr;
    let mut note = |path: &shoal_core::FieldPath, literal: &Literal| {
        if let Some(i) = sentinels.iter().position(|s| s == literal) {
            fields[i].get_or_insert_with(|| path.clone());
        }
    };
    match expr {
        Expr::And(terms) | Expr::Or(terms) => {
            for term in terms {
                collect_parameter_fields(term, sentinels, fields);
            }
        }
        Expr::Not(inner) => collect_parameter_fields(inner, sentinels, fields),
        Expr::Cmp { path, value, .. } => note(path, value),
        Expr::In { path, list, .. } => list.iter().for_each(|value| note(path, value)),
        Expr::Like { path, prefix, .. } => note(path, &Literal::Str(prefix.clone())),
        Expr::Pattern { path, .. } => note(path, &Literal::Str(String::new())),
        // `lower(s) = ?`, `upper(s) = ?`: a string, as the field is.
        Expr::Function { function: shoal_core::psf::Function::Lower | shoal_core::psf::Function::Upper, path, value, .. } => note(path, value),
        Expr::Function { .. } | Expr::Contains { .. } | Expr::IsNull { .. } | Expr::Field(_) | Expr::Const(_) => {}
    }
}

/// A parameter value (one row of a Flight SQL parameter batch) as a literal.
///
/// # Errors
/// `INVALID_ARGUMENT` for a type that has no literal in the filter language (lists,
/// structs, binary, times of day…) or a non-finite float, naming the parameter.
pub fn parameter_literal(array: &dyn Array, row: usize, number: usize) -> Result<Literal, OpsError> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
    };
    if array.is_null(row) {
        return Ok(Literal::Null);
    }
    let float = |f: f64| {
        if f.is_finite() {
            Ok(Literal::Float(f))
        } else {
            Err(OpsError::invalid_argument(format!("parameter {number} is {f}, which has no SQL literal")))
        }
    };
    Ok(match array.data_type() {
        DataType::Null => Literal::Null,
        DataType::Boolean => Literal::Bool(array.as_boolean().value(row)),
        DataType::Int8 => Literal::Int(i64::from(array.as_primitive::<Int8Type>().value(row))),
        DataType::Int16 => Literal::Int(i64::from(array.as_primitive::<Int16Type>().value(row))),
        DataType::Int32 => Literal::Int(i64::from(array.as_primitive::<Int32Type>().value(row))),
        DataType::Int64 => Literal::Int(array.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => Literal::Int(i64::from(array.as_primitive::<UInt8Type>().value(row))),
        DataType::UInt16 => Literal::Int(i64::from(array.as_primitive::<UInt16Type>().value(row))),
        DataType::UInt32 => Literal::Int(i64::from(array.as_primitive::<UInt32Type>().value(row))),
        DataType::UInt64 => {
            let v = array.as_primitive::<UInt64Type>().value(row);
            #[allow(clippy::cast_precision_loss)]
            i64::try_from(v).map_or(Literal::Float(v as f64), Literal::Int)
        }
        DataType::Float32 => float(f64::from(array.as_primitive::<Float32Type>().value(row)))?,
        DataType::Float64 => float(array.as_primitive::<Float64Type>().value(row))?,
        DataType::Utf8 => Literal::Str(array.as_string::<i32>().value(row).to_owned()),
        DataType::LargeUtf8 => Literal::Str(array.as_string::<i64>().value(row).to_owned()),
        DataType::Utf8View => Literal::Str(array.as_string_view().value(row).to_owned()),
        // Arrow's timestamps count from the epoch in UTC (without a zone: read as UTC).
        DataType::Timestamp(unit, _) => {
            use arrow_array::types::{TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType};
            use arrow_schema::TimeUnit;
            let micros = match unit {
                TimeUnit::Second => array.as_primitive::<TimestampSecondType>().value(row).checked_mul(1_000_000),
                TimeUnit::Millisecond => array.as_primitive::<TimestampMillisecondType>().value(row).checked_mul(1_000),
                TimeUnit::Microsecond => Some(array.as_primitive::<TimestampMicrosecondType>().value(row)),
                TimeUnit::Nanosecond => Some(array.as_primitive::<TimestampNanosecondType>().value(row).div_euclid(1_000)),
            };
            Literal::Timestamp(micros.ok_or_else(|| OpsError::invalid_argument(format!("parameter {number}: the timestamp is out of range")))?)
        }
        DataType::Date32 => {
            let days = array.as_primitive::<arrow_array::types::Date32Type>().value(row);
            Literal::Timestamp(i64::from(days) * 86_400 * 1_000_000)
        }
        DataType::Date64 => {
            let millis = array.as_primitive::<arrow_array::types::Date64Type>().value(row);
            Literal::Timestamp(millis.checked_mul(1_000).ok_or_else(|| OpsError::invalid_argument(format!("parameter {number}: the date is out of range")))?)
        }
        other => {
            return Err(OpsError::invalid_argument(format!(
                "parameter {number} is of type {other}; bind a boolean, integer, float, string, timestamp or date"
            )))
        }
    })
}

