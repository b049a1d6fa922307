//! The expression language of filters and boolean-predicate PSFs (FishStore §3).
//!
//! An expression is SQL expression syntax over dotted JSON paths:
//!
//! ```text
//! type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'
//! user.followers_count >= 100 OR actor.login IN ('alice', 'bob')
//! payload."a.b" LIKE 'ab%' AND NOT payload.public AND deleted_at IS NULL
//! ```
//!
//! Text is parsed by the `sqlparser` crate ([`parse_expr`]) and lowered into the small
//! [`Expr`] tree that shoal evaluates itself; no user code runs in the engine. The
//! language is deliberately narrow: every comparison is *a field against a literal*, so
//! each leaf is a property test `(f, v)` the index can serve. Functions, arithmetic,
//! subqueries and field-against-field comparisons are rejected with
//! [`Error::InvalidExpression`] naming the construct and its column.
//!
//! # Three-valued logic
//! Evaluation follows SQL: a result is `Some(true)`, `Some(false)` or `None` (unknown),
//! and a filter keeps a record only on `Some(true)`. A missing field behaves like JSON
//! `null`. Leaves are unknown when the field is null/missing or of another type than the
//! literal (`a = 1` on `"a": "1"`); `AND`/`OR`/`NOT` use Kleene's tables; `IS [NOT] NULL`
//! is never unknown.
//!
//! # Two evaluators
//! [`Expr::eval_with`] looks fields up by path (slow; for tests and oracles).
//! [`Expr::bind`] resolves paths to field ids of a [`FieldSet`] once, and
//! [`BoundExpr::eval`] then evaluates against the parser's value slice without
//! allocating (the ingest and scan hot path).
//!
//! # Files
//! The tree, its normal form and its paths are here; [`parse_expr`] and the lowering
//! from sqlparser's syntax tree are in `sql.rs`, the two evaluators in `eval.rs`, and the
//! SQL text that parses back ([`Expr`]'s `Display`) in `display.rs`.

mod display;
mod eval;
mod sql;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

use crate::path::FieldPath;
use crate::timestamp::{format_timestamp, parse_timestamp};
use crate::value::FieldValue;

use display::write_sql_string;
pub use eval::BoundExpr;
pub use sql::{
    count_operators, dismantle, echo, element_wildcards, lower_condition, lower_field, lower_literal, parse_expr, parse_expr_within, ECHO_LIMIT, MAX_EXPR_BYTES,
    MAX_EXPR_OPERATORS, MAX_RENDERED_EXPR_BYTES,
};

// ---------------------------------------------------------------------------------------
// Literals and operators
// ---------------------------------------------------------------------------------------

/// A constant on the right-hand side of a comparison, an `IN` list or a `BETWEEN`.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// `NULL`: every comparison with it is unknown.
    Null,
    /// `TRUE` / `FALSE`.
    Bool(bool),
    /// An integer literal in `i64` range (`42`, `-7`).
    Int(i64),
    /// A literal with a fraction or exponent (`1.5`, `2e3`), or an integer beyond `i64`.
    Float(f64),
    /// A single-quoted string (`'IssuesEvent'`, `''''` for a single quote).
    Str(String),
    /// `TIMESTAMP '2021-07-21T10:00:00Z'` (also `DATE '…'`, `CAST('…' AS TIMESTAMP)`): an
    /// instant in microseconds since the Unix epoch, UTC ([`crate::timestamp`]). A field
    /// compares with it as the instant its string names ([`parse_timestamp`]): `Z` and offsets,
    /// fractions and a missing offset (UTC) all compare as time, not as text. Numbers, other
    /// strings and other types are unknown against it.
    Timestamp(i64),
}

impl Literal {
    /// The literal as a field value, so it compares with [`FieldValue::sql_cmp`].
    /// Borrows strings; never allocates. A [`Literal::Timestamp`] has no JSON value and is
    /// [`FieldValue::Missing`] (compares with nothing): use [`Literal::compare`].
    #[must_use]
    pub fn as_field_value(&self) -> FieldValue<'_> {
        match self {
            Literal::Timestamp(_) => FieldValue::Missing,
            Literal::Null => FieldValue::Null,
            Literal::Bool(b) => FieldValue::Bool(*b),
            Literal::Int(i) => FieldValue::Int(*i),
            Literal::Float(f) => FieldValue::Float(*f),
            Literal::Str(s) => FieldValue::Str(Cow::Borrowed(s)),
        }
    }
}

impl Literal {
    /// How `field` compares with this literal in the filter language: [`FieldValue::sql_cmp`],
    /// and for a [`Literal::Timestamp`] the instant of a string field ([`parse_timestamp`]).
    /// `None` is unknown (null, missing, another type, a string that names no instant).
    #[must_use]
    pub fn compare(&self, field: &FieldValue<'_>) -> Option<Ordering> {
        match (self, field) {
            (Literal::Timestamp(t), FieldValue::Str(s)) => parse_timestamp(s).map(|v| v.cmp(t)),
            (Literal::Timestamp(_), _) => None,
            _ => field.sql_cmp(&self.as_field_value()),
        }
    }
}

impl fmt::Display for Literal {
    /// SQL text that [`parse_expr`] reads back as the same literal. Floats always carry a
    /// fraction or an exponent (`1.0`, `1e300`) so they do not come back as integers;
    /// infinities print as `1e999` / `-1e999`. NaN has no SQL spelling and prints as
    /// `NaN`, which does not parse.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(true) => f.write_str("TRUE"),
            Literal::Bool(false) => f.write_str("FALSE"),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Float(x) if x.is_infinite() => f.write_str(if *x > 0.0 { "1e999" } else { "-1e999" }),
            // `Debug` of f64 is the shortest text that reads back exactly, and always has
            // a `.` or an exponent.
            Literal::Float(x) => write!(f, "{x:?}"),
            Literal::Str(s) => write_sql_string(f, s),
            Literal::Timestamp(t) => write!(f, "TIMESTAMP '{}'", format_timestamp(*t)),
        }
    }
}

/// A comparison operator of [`Expr::Cmp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>` (also written `!=`)
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

impl CmpOp {
    /// The operator with its operands swapped: `5 < a` is `a > 5`.
    #[must_use]
    pub fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Eq,
            CmpOp::NotEq => CmpOp::NotEq,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::LtEq => CmpOp::GtEq,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::GtEq => CmpOp::LtEq,
        }
    }

    /// The complementary operator: `NOT (a < 5)` is `a >= 5`. Exact under three-valued
    /// logic because both sides are unknown on exactly the same inputs.
    #[must_use]
    pub fn negated(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::NotEq,
            CmpOp::NotEq => CmpOp::Eq,
            CmpOp::Lt => CmpOp::GtEq,
            CmpOp::LtEq => CmpOp::Gt,
            CmpOp::Gt => CmpOp::LtEq,
            CmpOp::GtEq => CmpOp::Lt,
        }
    }

    /// Whether `field op literal` holds when the field compares to the literal as
    /// `ordering` (the result of `field.sql_cmp(literal)`).
    #[must_use]
    pub fn holds(self, ordering: Ordering) -> bool {
        match self {
            CmpOp::Eq => ordering == Ordering::Equal,
            CmpOp::NotEq => ordering != Ordering::Equal,
            CmpOp::Lt => ordering == Ordering::Less,
            CmpOp::LtEq => ordering != Ordering::Greater,
            CmpOp::Gt => ordering == Ordering::Greater,
            CmpOp::GtEq => ordering != Ordering::Less,
        }
    }

    /// The SQL spelling (`=`, `<>`, `<`, `<=`, `>`, `>=`).
    #[must_use]
    pub fn as_sql(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::NotEq => "<>",
            CmpOp::Lt => "<",
            CmpOp::LtEq => "<=",
            CmpOp::Gt => ">",
            CmpOp::GtEq => ">=",
        }
    }
}

impl fmt::Display for CmpOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_sql())
    }
}

/// A scalar function of one field that a comparison may apply before comparing
/// ([`Expr::Function`]): `lower(actor.login) = 'bob'`, `length(repo.name) > 20`,
/// `substr(repo.name, 1, 6) = 'apache'`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Function {
    /// `lower(s)`: the string in lower case (Unicode); other values: unknown.
    Lower,
    /// `upper(s)`: the string in upper case (Unicode); other values: unknown.
    Upper,
    /// `length(s)` (also `char_length`, `character_length`): the string's length in
    /// characters (Unicode scalar values), an integer; other values: unknown.
    Length,
    /// `substr(s, start[, length])` (also `substring`, and SQL's `SUBSTRING(s FROM start
    /// FOR length)`): the characters from the 1-based position `start` — 0 counts as 1, a
    /// negative start counts from the end — `length` of them (all to the end when absent;
    /// none when not positive), as Spark's and Hive's `substring` take them; other values:
    /// unknown.
    Substr {
        /// The 1-based position of the first character (negative: from the end).
        start: i64,
        /// How many characters at most; `None`: to the end.
        length: Option<i64>,
    },
}

impl Function {
    /// The one-argument function named `name` (any case), if the filter language has it
    /// (`substr` takes positions too: [`Function::Substr`]).
    #[must_use]
    pub fn named(name: &str) -> Option<Function> {
        match name.to_ascii_lowercase().as_str() {
            "lower" | "lcase" => Some(Function::Lower),
            "upper" | "ucase" => Some(Function::Upper),
            "length" | "char_length" | "character_length" => Some(Function::Length),
            _ => None,
        }
    }

    /// Its SQL name (`lower`, `upper`, `length`, `substr`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Function::Lower => "lower",
            Function::Upper => "upper",
            Function::Length => "length",
            Function::Substr { .. } => "substr",
        }
    }

    /// The call as SQL text over `field` (already written as SQL): `lower(a.b)`,
    /// `substr(a.b, 2, 3)`; the filter language reads it back as this function.
    #[must_use]
    pub fn call(self, field: &str) -> String {
        match self {
            Function::Substr { start, length: Some(length) } => format!("substr({field}, {start}, {length})"),
            Function::Substr { start, length: None } => format!("substr({field}, {start})"),
            _ => format!("{}({field})", self.name()),
        }
    }

    /// The function of `value`: a string for `lower`/`upper`/`substr`, an integer for
    /// `length`; [`FieldValue::Missing`] (unknown in every comparison) when `value` is not
    /// a string.
    #[must_use]
    pub fn apply(self, value: &FieldValue<'_>) -> FieldValue<'static> {
        let FieldValue::Str(text) = value else { return FieldValue::Missing };
        match self {
            Function::Lower => FieldValue::Str(Cow::Owned(text.to_lowercase())),
            Function::Upper => FieldValue::Str(Cow::Owned(text.to_uppercase())),
            Function::Length => FieldValue::Int(i64::try_from(text.chars().count()).unwrap_or(i64::MAX)),
            Function::Substr { start, length } => FieldValue::Str(Cow::Owned(substr(text, start, length))),
        }
    }
}

/// `substr(text, start, length)` in characters, as Spark's `UTF8String.substringSQL`:
/// the first index is `start - 1` for a positive start, `count + start` for a negative one,
/// 0 for 0; the end is that index plus `length` (computed before the index is clamped at
/// 0); empty when the end is not past the clamped index.
fn substr(text: &str, start: i64, length: Option<i64>) -> String {
    let count = i64::try_from(text.chars().count()).unwrap_or(i64::MAX);
    let first = match start {
        1.. => start - 1,
        0 => 0,
        _ => count.saturating_add(start),
    };
    let end = length.map_or(i64::MAX, |length| first.saturating_add(length));
    let first = first.max(0);
    if first >= end {
        return String::new();
    }
    let skip = usize::try_from(first).unwrap_or(usize::MAX);
    let take = usize::try_from(end - first).unwrap_or(usize::MAX);
    text.chars().skip(skip).take(take).collect()
}

// ---------------------------------------------------------------------------------------
// The expression tree
// ---------------------------------------------------------------------------------------

/// One piece of a LIKE pattern ([`Expr::Pattern`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikePiece {
    /// The character itself.
    Char(char),
    /// `_`: any one character.
    One,
    /// `%`: any run of characters, empty included.
    Many,
}

/// Whether `text` matches `pieces` (SQL's LIKE): the usual wildcard match, `%` backtracking
/// to the last one seen — linear in `text` times the pattern's length at worst.
#[must_use]
pub fn like_matches(pieces: &[LikePiece], text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < chars.len() {
        match pieces.get(p) {
            Some(LikePiece::Many) => {
                star = Some((p, t));
                p += 1;
            }
            Some(LikePiece::One) => {
                p += 1;
                t += 1;
            }
            Some(LikePiece::Char(c)) if *c == chars[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((star_p, star_t)) => {
                    p = star_p + 1;
                    t = star_t + 1;
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            },
        }
    }
    pieces[p.min(pieces.len())..].iter().all(|piece| *piece == LikePiece::Many)
}

/// A filter or boolean-predicate PSF: a condition over the fields of one record.
///
/// [`parse_expr`] returns the [normalised](Expr::normalize) form: `And`/`Or` are flat
/// and have at least two terms, constants are folded away unless the whole expression
/// is constant, and `Not` appears only around a bare [`Expr::Field`].
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// All terms hold (`a AND b AND c`). Empty: `TRUE`.
    And(Vec<Expr>),
    /// Some term holds (`a OR b OR c`). Empty: `FALSE`.
    Or(Vec<Expr>),
    /// The negation (`NOT a`).
    Not(Box<Expr>),
    /// `path op value`. The literal is always on the right: `5 < a` becomes `a > 5`.
    /// Unknown when the field is missing, null, or not comparable with the literal
    /// (see [`FieldValue::sql_cmp`]); `a = NULL` is always unknown.
    Cmp {
        /// The field compared.
        path: FieldPath,
        /// The operator.
        op: CmpOp,
        /// The constant it is compared with.
        value: Literal,
    },
    /// `path [NOT] IN (list)`: exactly `path = l1 OR path = l2 OR …` (negated: its
    /// `NOT`). True if an element is equal; otherwise unknown if any comparison was
    /// unknown (null/missing field, a `NULL` or mistyped element); otherwise false. An
    /// empty list (which SQL cannot spell) is always false.
    In {
        /// The field tested.
        path: FieldPath,
        /// The candidate values.
        list: Vec<Literal>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `path IS [NOT] NULL`: true when the field is missing or JSON `null`. Never unknown.
    IsNull {
        /// The field tested.
        path: FieldPath,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `path [NOT] LIKE 'prefix%'`: a prefix match on strings; unknown when the field is
    /// not a string. Other patterns are [`Expr::Pattern`]; a pattern without wildcards
    /// parses as [`CmpOp::Eq`].
    Like {
        /// The field tested.
        path: FieldPath,
        /// The prefix the string must start with (may be empty).
        prefix: String,
        /// `NOT LIKE`.
        negated: bool,
    },
    /// `path [NOT] LIKE|ILIKE pattern` with `%` (any run of characters) and `_` (one
    /// character) anywhere (SQL's LIKE; `ILIKE` compares lowercased): unknown when the
    /// field is not a string. Evaluated on each record (no PSF answers it); a prefix
    /// pattern is [`Expr::Like`].
    Pattern {
        /// The field tested.
        path: FieldPath,
        /// The pattern (lowercased for `ILIKE`).
        pieces: Vec<LikePiece>,
        /// `ILIKE`: the string is lowercased before it is matched.
        case_insensitive: bool,
        /// `NOT LIKE` / `NOT ILIKE`.
        negated: bool,
    },
    /// `function(path) op value` (`lower(actor.login) = 'bob'`): the comparison of
    /// [`Expr::Cmp`] with the field's value passed through `function` first (unknown when
    /// the function has no value for it: a field that is not a string).
    Function {
        /// The function applied.
        function: Function,
        /// The field it is applied to.
        path: FieldPath,
        /// The operator.
        op: CmpOp,
        /// The constant the function's value is compared with.
        value: Literal,
    },
    /// `array_contains(path, value)`, or with `element` `path[*].element = value`: whether
    /// an element of the JSON array at `path` (its field `element`) equals `value`. As SQL's
    /// `EXISTS` of those equalities: true if one is true; otherwise unknown if one is
    /// unknown (a null element, an element of another type than the literal); otherwise
    /// false. Unknown when `path` holds no array. `negated`: `NOT array_contains(…)`.
    Contains {
        /// The array's path.
        path: FieldPath,
        /// The path within each element compared (`[*].author.name`); `None`: the element.
        element: Option<FieldPath>,
        /// The constant looked for.
        value: Literal,
        /// `NOT array_contains(…)`.
        negated: bool,
    },
    /// A bare field used as a condition (`payload.public`): its value when it is a JSON
    /// boolean, otherwise unknown.
    Field(FieldPath),
    /// `TRUE` or `FALSE`.
    Const(bool),
}


impl Expr {
    /// Rewrites the expression into its normal form, preserving its three-valued meaning
    /// on every record:
    ///
    /// - nested `And`/`Or` are flattened; one-term `And`/`Or` become the term;
    /// - constants fold (`x AND TRUE` → `x`, `x AND FALSE` → `FALSE`, `x OR TRUE` →
    ///   `TRUE`; exact in Kleene logic since `FALSE AND unknown` is `FALSE`);
    /// - `NOT` is pushed to the leaves: De Morgan for `And`/`Or`, `NOT NOT x` → `x`,
    ///   `NOT a < 5` → `a >= 5`, and `IN`/`IS NULL`/`LIKE` flip their `negated` flag.
    ///   Each step is exact under three-valued logic (a comparison and its complement are
    ///   unknown on the same inputs). Only `NOT field` has no leaf equivalent and keeps
    ///   its `Not`;
    /// - an `In` with an empty list becomes the constant it always is (`FALSE`, or
    ///   `TRUE` for `NOT IN`).
    ///
    /// Idempotent: `e.normalize().normalize() == e.normalize()`.
    #[must_use]
    pub fn normalize(self) -> Expr {
        match self {
            Expr::And(terms) => and_of(terms.into_iter().map(Expr::normalize)),
            Expr::Or(terms) => or_of(terms.into_iter().map(Expr::normalize)),
            Expr::Not(inner) => inner.normalize().negate_normalized(),
            // `a IN ()` is an empty `OR`: false whatever `a` is (Spark agrees since 3.5).
            Expr::In { list, negated, .. } if list.is_empty() => Expr::Const(negated),
            leaf => leaf,
        }
    }

    /// The negation of an expression already in normal form, itself in normal form.
    fn negate_normalized(self) -> Expr {
        match self {
            Expr::And(terms) => or_of(terms.into_iter().map(Expr::negate_normalized)),
            Expr::Or(terms) => and_of(terms.into_iter().map(Expr::negate_normalized)),
            Expr::Not(inner) => *inner,
            Expr::Cmp { path, op, value } => Expr::Cmp { path, op: op.negated(), value },
            Expr::In { path, list, negated } => Expr::In { path, list, negated: !negated },
            Expr::IsNull { path, negated } => Expr::IsNull { path, negated: !negated },
            Expr::Like { path, prefix, negated } => Expr::Like { path, prefix, negated: !negated },
            Expr::Pattern { path, pieces, case_insensitive, negated } => Expr::Pattern { path, pieces, case_insensitive, negated: !negated },
            Expr::Function { function, path, op, value } => Expr::Function { function, path, op: op.negated(), value },
            Expr::Contains { path, element, value, negated } => Expr::Contains { path, element, value, negated: !negated },
            field @ Expr::Field(_) => Expr::Not(Box::new(field)),
            Expr::Const(b) => Expr::Const(!b),
        }
    }

    /// The distinct paths the expression reads, in order of first appearance.
    #[must_use]
    pub fn fields(&self) -> Vec<FieldPath> {
        let mut out = Vec::new();
        self.visit_paths(&mut |path| {
            if !out.contains(path) {
                out.push(path.clone());
            }
        });
        out
    }

    fn visit_paths<'e>(&'e self, visit: &mut dyn FnMut(&'e FieldPath)) {
        match self {
            Expr::And(terms) | Expr::Or(terms) => terms.iter().for_each(|t| t.visit_paths(visit)),
            Expr::Not(inner) => inner.visit_paths(visit),
            Expr::Cmp { path, .. }
            | Expr::In { path, .. }
            | Expr::IsNull { path, .. }
            | Expr::Like { path, .. }
            | Expr::Pattern { path, .. }
            | Expr::Function { path, .. }
            | Expr::Contains { path, .. }
            | Expr::Field(path) => visit(path),
            Expr::Const(_) => {}
        }
    }

    /// The terms of a top-level `And`, or the expression itself when it is not an `And`.
    /// On a normalised expression these are the conditions a scan can serve one by one
    /// from an index and re-check as a residual filter.
    #[must_use]
    pub fn conjuncts(&self) -> Vec<&Expr> {
        match self {
            Expr::And(terms) => terms.iter().collect(),
            other => vec![other],
        }
    }
}

/// `And` of already-normalised terms, in normal form.
fn and_of(terms: impl IntoIterator<Item = Expr>) -> Expr {
    let mut out = Vec::new();
    for term in terms {
        match term {
            Expr::Const(true) => {}
            Expr::Const(false) => return Expr::Const(false),
            Expr::And(inner) => out.extend(inner),
            other => out.push(other),
        }
    }
    match out.len() {
        0 => Expr::Const(true),
        1 => out.pop().unwrap_or(Expr::Const(true)),
        _ => Expr::And(out),
    }
}

/// `Or` of already-normalised terms, in normal form.
fn or_of(terms: impl IntoIterator<Item = Expr>) -> Expr {
    let mut out = Vec::new();
    for term in terms {
        match term {
            Expr::Const(false) => {}
            Expr::Const(true) => return Expr::Const(true),
            Expr::Or(inner) => out.extend(inner),
            other => out.push(other),
        }
    }
    match out.len() {
        0 => Expr::Const(false),
        1 => out.pop().unwrap_or(Expr::Const(false)),
        _ => Expr::Or(out),
    }
}
