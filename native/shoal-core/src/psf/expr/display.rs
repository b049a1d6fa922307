//! [`Expr`] as SQL text that [`super::parse_expr`] reads back as the same expression.

use std::fmt;

use crate::path::FieldPath;

use super::Expr;

// ---------------------------------------------------------------------------------------
// Display: SQL text that parses back
// ---------------------------------------------------------------------------------------

/// The escape character written in `LIKE … ESCAPE` when a prefix holds `%` or `_`.
const LIKE_ESCAPE: char = '\\';

impl fmt::Display for Expr {
    /// SQL text for which [`parse_expr`] returns `self.clone().normalize()`.
    /// Nested `And`/`Or` terms are parenthesised; `NOT` of anything but a field or a
    /// constant is written `NOT (…)`; an empty `And` prints `TRUE`, an empty `Or` `FALSE`,
    /// an empty `In` the constant it is. Path segments that are not plain identifiers, or
    /// that are keywords sqlparser would read as syntax, are double-quoted. The one
    /// value without a spelling is a NaN [`Literal::Float`] (see [`Literal`]'s `Display`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::And(terms) if terms.is_empty() => f.write_str("TRUE"),
            Expr::Or(terms) if terms.is_empty() => f.write_str("FALSE"),
            Expr::And(terms) | Expr::Or(terms) => {
                let separator = if matches!(self, Expr::And(_)) { " AND " } else { " OR " };
                for (i, term) in terms.iter().enumerate() {
                    if i > 0 {
                        f.write_str(separator)?;
                    }
                    if matches!(term, Expr::And(_) | Expr::Or(_)) {
                        write!(f, "({term})")?;
                    } else {
                        write!(f, "{term}")?;
                    }
                }
                Ok(())
            }
            Expr::Not(inner) => match inner.as_ref() {
                Expr::Field(_) | Expr::Const(_) => write!(f, "NOT {inner}"),
                _ => write!(f, "NOT ({inner})"),
            },
            Expr::Cmp { path, op, value } => {
                write_sql_path(f, path)?;
                write!(f, " {op} {value}")
            }
            // SQL has no empty `IN` list; print the constant it normalises to.
            Expr::In { list, negated, .. } if list.is_empty() => f.write_str(if *negated { "TRUE" } else { "FALSE" }),
            Expr::In { path, list, negated } => {
                write_sql_path(f, path)?;
                f.write_str(if *negated { " NOT IN (" } else { " IN (" })?;
                for (i, literal) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{literal}")?;
                }
                f.write_str(")")
            }
            Expr::IsNull { path, negated } => {
                write_sql_path(f, path)?;
                f.write_str(if *negated { " IS NOT NULL" } else { " IS NULL" })
            }
            Expr::Like { path, prefix, negated } => {
                write_sql_path(f, path)?;
                f.write_str(if *negated { " NOT LIKE " } else { " LIKE " })?;
                let needs_escape = prefix.contains(['%', '_', LIKE_ESCAPE]);
                let mut pattern = String::with_capacity(prefix.len() + 2);
                for c in prefix.chars() {
                    if needs_escape && matches!(c, '%' | '_' | LIKE_ESCAPE) {
                        pattern.push(LIKE_ESCAPE);
                    }
                    pattern.push(c);
                }
                pattern.push('%');
                write_sql_string(f, &pattern)?;
                if needs_escape {
                    f.write_str(" ESCAPE ")?;
                    write_sql_string(f, &LIKE_ESCAPE.to_string())?;
                }
                Ok(())
            }
            Expr::Pattern { path, pieces, case_insensitive, negated } => {
                write_sql_path(f, path)?;
                f.write_str(match (*negated, *case_insensitive) {
                    (false, false) => " LIKE ",
                    (true, false) => " NOT LIKE ",
                    (false, true) => " ILIKE ",
                    (true, true) => " NOT ILIKE ",
                })?;
                let needs_escape = pieces.iter().any(|p| matches!(p, super::LikePiece::Char('%' | '_' | LIKE_ESCAPE)));
                let mut pattern = String::with_capacity(pieces.len() + 2);
                for piece in pieces {
                    match piece {
                        super::LikePiece::Char(c) => {
                            if needs_escape && matches!(*c, '%' | '_' | LIKE_ESCAPE) {
                                pattern.push(LIKE_ESCAPE);
                            }
                            pattern.push(*c);
                        }
                        super::LikePiece::One => pattern.push('_'),
                        super::LikePiece::Many => pattern.push('%'),
                    }
                }
                write_sql_string(f, &pattern)?;
                if needs_escape {
                    f.write_str(" ESCAPE ")?;
                    write_sql_string(f, &LIKE_ESCAPE.to_string())?;
                }
                Ok(())
            }
            Expr::Function { function, path, op, value } => {
                write!(f, "{} {op} {value}", function.call(&SqlPath(path).to_string()))
            }
            Expr::Contains { path, element, value, negated } => {
                f.write_str(if *negated { "NOT array_contains(" } else { "array_contains(" })?;
                write_sql_path(f, path)?;
                if let Some(element) = element {
                    f.write_str("[*].")?;
                    write_sql_path(f, element)?;
                }
                write!(f, ", {value})")
            }
            Expr::Field(path) => write_sql_path(f, path),
            Expr::Const(b) => f.write_str(if *b { "TRUE" } else { "FALSE" }),
        }
    }
}

/// `'text'` with quotes doubled.
pub(super) fn write_sql_string(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    write!(f, "'{}'", text.replace('\'', "''"))
}

/// A path as SQL: segments joined by `.`, each bare when sqlparser reads it back as
/// itself, otherwise double-quoted with `""` for a quote.
/// A path written as the filter language reads it ([`write_sql_path`]).
pub(crate) struct SqlPath<'a>(pub(crate) &'a FieldPath);

impl fmt::Display for SqlPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_sql_path(f, self.0)
    }
}

fn write_sql_path(f: &mut fmt::Formatter<'_>, path: &FieldPath) -> fmt::Result {
    for (i, segment) in path.segments().iter().enumerate() {
        if i > 0 {
            f.write_str(".")?;
        }
        if is_bare_segment(segment, i == 0) {
            f.write_str(segment)?;
        } else {
            write!(f, "\"{}\"", segment.replace('"', "\"\""))?;
        }
    }
    Ok(())
}

/// Whether `segment` can be written unquoted: a plain identifier
/// (`[A-Za-z_][A-Za-z0-9_]*`) that sqlparser does not read as syntax at that position.
fn is_bare_segment(segment: &str, first: bool) -> bool {
    let mut chars = segment.chars();
    let plain = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    plain && !is_reserved_segment(segment, first)
}

/// Keywords that sqlparser (0.63, generic dialect) does not read back as a field name
/// when they start a path: they begin other syntax (`NULL`, `INTERVAL '1' DAY`,
/// `EXISTS (…)`, `(SELECT …)`, `x AND ALL(…)`). Every other keyword — `type`, `user`,
/// `date`, `value`, `key`, … — reads back as an identifier, and after a `.` every
/// keyword does. Sorted, upper case. `display_round_trips_keyword_named_segments` checks
/// this list against all of sqlparser's keywords.
const RESERVED_LEADING_KEYWORDS: &[&str] =
    &["ALL", "ANY", "EXISTS", "FALSE", "INTERVAL", "NOT", "NULL", "SELECT", "SOME", "STRUCT", "TRIM", "TRUE", "WITH"];

/// Whether `segment` must be quoted because of the keyword rules above.
fn is_reserved_segment(segment: &str, first: bool) -> bool {
    first && RESERVED_LEADING_KEYWORDS.binary_search(&segment.to_ascii_uppercase().as_str()).is_ok()
}
