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

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

use sqlparser::ast::{self as sql, BinaryOperator, Spanned, UnaryOperator, Value};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Span, Token, Tokenizer};

use crate::error::{Error, Result};
use crate::parser::FieldSet;
use crate::path::FieldPath;
use crate::value::FieldValue;

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
}

impl Literal {
    /// The literal as a field value, so it compares with [`FieldValue::sql_cmp`].
    /// Borrows strings; never allocates.
    #[must_use]
    pub fn as_field_value(&self) -> FieldValue<'_> {
        match self {
            Literal::Null => FieldValue::Null,
            Literal::Bool(b) => FieldValue::Bool(*b),
            Literal::Int(i) => FieldValue::Int(*i),
            Literal::Float(f) => FieldValue::Float(*f),
            Literal::Str(s) => FieldValue::Str(Cow::Borrowed(s)),
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

// ---------------------------------------------------------------------------------------
// The expression tree
// ---------------------------------------------------------------------------------------

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
    /// not a string. Other patterns (`%` or `_` elsewhere) are not supported; a pattern
    /// without wildcards parses as [`CmpOp::Eq`].
    Like {
        /// The field tested.
        path: FieldPath,
        /// The prefix the string must start with (may be empty).
        prefix: String,
        /// `NOT LIKE`.
        negated: bool,
    },
    /// A bare field used as a condition (`payload.public`): its value when it is a JSON
    /// boolean, otherwise unknown.
    Field(FieldPath),
    /// `TRUE` or `FALSE`.
    Const(bool),
}

/// Parses and [normalises](Expr::normalize) a filter or PSF expression.
///
/// Identifiers are case-sensitive JSON keys; a double-quoted identifier is one key
/// whatever it contains (`payload."a.b"`, `"key with space"`). Keywords such as `type`,
/// `date`, `user` or `value` may be used as keys unquoted.
///
/// # Errors
/// [`Error::InvalidExpression`] for a syntax error, trailing input, or a construct the
/// language does not support (functions, arithmetic, subqueries, comparisons between
/// two fields or two literals, `LIKE` patterns other than a prefix, …). The reason names
/// the construct and its position.
///
/// # Example
/// ```
/// use shoal_core::psf::expr::{parse_expr, CmpOp, Expr, Literal};
/// use shoal_core::FieldPath;
///
/// let e = parse_expr("type = 'IssuesEvent' AND payload.action = 'opened'").unwrap();
/// let Expr::And(terms) = &e else { panic!() };
/// assert_eq!(terms[1], Expr::Cmp {
///     path: FieldPath::parse("payload.action").unwrap(),
///     op: CmpOp::Eq,
///     value: Literal::Str("opened".into()),
/// });
/// assert_eq!(parse_expr(&e.to_string()).unwrap(), e);
/// ```
///
/// # Limits
/// The text may be at most [`MAX_EXPR_BYTES`] long and hold at most
/// [`MAX_EXPR_OPERATORS`] operators; parentheses and `NOT` nest at most sqlparser's
/// recursion limit (50) deep. Beyond them the error says which limit was passed. The
/// limits keep every step (parsing, lowering, dropping the syntax tree) within a small
/// stack: sqlparser builds `a AND b AND c …` as a tree as deep as the chain is long.
///
/// # Errors
/// [`Error::InvalidExpression`] for text that does not parse, is not supported, or passes
/// a limit; the error quotes at most [`ECHO_LIMIT`] bytes of the text.
pub fn parse_expr(text: &str) -> Result<Expr> {
    let lowering = Lowering { text };
    if text.len() > MAX_EXPR_BYTES {
        return Err(lowering.error(format!(
            "the expression is {} bytes long; the limit is {MAX_EXPR_BYTES} bytes",
            text.len()
        )));
    }
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| lowering.syntax_error(&ParserError::from(e)))?;
    let operators = tokens.iter().filter(|t| is_operator_token(&t.token)).count();
    if operators > MAX_EXPR_OPERATORS {
        return Err(lowering.error(format!(
            "the expression has {operators} operators (AND, OR, NOT, comparisons, arithmetic); the limit is \
             {MAX_EXPR_OPERATORS} (a list of values to match is one `IN (...)`, which has no such limit)"
        )));
    }
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(tokens);
    let ast = parser.parse_expr().map_err(|e| lowering.syntax_error(&e))?;
    let next = parser.peek_token();
    let lowered = if next.token == Token::EOF {
        lowering.condition(&ast)
    } else {
        Err(lowering.error(format!(
            "unexpected `{}` after the end of the expression{}",
            next.token,
            lowering.at(next.span)
        )))
    };
    dismantle(ast);
    Ok(lowered?.normalize())
}

/// The longest expression text [`parse_expr`] accepts, in bytes (1 MiB).
pub const MAX_EXPR_BYTES: usize = 1 << 20;

/// The most operators one expression may hold: `AND`, `OR`, `NOT`, comparison and
/// arithmetic operators each count one (`IN` lists count one for the `IN`, not per value).
/// At the limit, parsing a chain of `AND`s, `OR`s or `+`s needs less than 128 KiB of
/// stack in a debug build (measured; the test runs it on 1 MiB), so a request cannot
/// exhaust a 2 MiB server thread's stack.
pub const MAX_EXPR_OPERATORS: usize = 4_096;

/// The most bytes of the expression text an error message quotes; longer text is cut
/// and its length given, so that an error stays small enough for any transport.
pub const ECHO_LIMIT: usize = 256;

/// Whether a token is an operator for [`MAX_EXPR_OPERATORS`]: anything but literals,
/// names, punctuation and whitespace.
fn is_operator_token(token: &Token) -> bool {
    use sqlparser::keywords::Keyword;
    match token {
        Token::Word(word) => matches!(
            word.keyword,
            Keyword::AND | Keyword::OR | Keyword::NOT | Keyword::IS | Keyword::IN | Keyword::LIKE | Keyword::BETWEEN
        ),
        Token::Number(..)
        | Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::NationalStringLiteral(_)
        | Token::EscapedStringLiteral(_)
        | Token::HexStringLiteral(_)
        | Token::Comma
        | Token::Period
        | Token::LParen
        | Token::RParen
        | Token::Whitespace(_)
        | Token::EOF => false,
        _ => true,
    }
}

/// Drops a syntax tree without recursing along its longest path: sqlparser's nodes drop
/// recursively, and a chain of binary operators is a left-leaning tree as deep as the
/// chain is long. The other children are at most the parser's recursion limit deep.
fn dismantle(mut e: sql::Expr) {
    loop {
        e = match e {
            sql::Expr::BinaryOp { left, right, .. } => {
                dismantle(*right);
                *left
            }
            sql::Expr::Nested(inner) | sql::Expr::UnaryOp { expr: inner, .. } => *inner,
            _ => return,
        };
    }
}

/// `text` cut to at most [`ECHO_LIMIT`] bytes (at a character boundary), with the length
/// of the whole when it was cut.
#[must_use]
pub fn echo(text: &str) -> Cow<'_, str> {
    if text.len() <= ECHO_LIMIT {
        return Cow::Borrowed(text);
    }
    let mut end = ECHO_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes in all)", &text[..end], text.len()))
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

    /// Resolves every path to its field id in `fields`, adding the paths that are not
    /// there yet, for evaluation with [`BoundExpr::eval`].
    #[must_use]
    pub fn bind(&self, fields: &mut FieldSet) -> BoundExpr {
        BoundExpr { root: Node::bind(self, fields) }
    }

    /// Evaluates the expression with `lookup` giving each field's value
    /// ([`FieldValue::Missing`] for an absent one). `None` is SQL's unknown. Looks fields up
    /// by path on every leaf: meant for tests and oracles; use [`Expr::bind`] on hot paths.
    ///
    /// The values may borrow a record (`'v`), not the path they are looked up by.
    #[must_use]
    pub fn eval_with<'v>(&self, lookup: &dyn Fn(&FieldPath) -> FieldValue<'v>) -> Option<bool> {
        match self {
            Expr::And(terms) => kleene_and(terms, |t| t.eval_with(lookup)),
            Expr::Or(terms) => kleene_or(terms, |t| t.eval_with(lookup)),
            Expr::Not(inner) => inner.eval_with(lookup).map(|b| !b),
            Expr::Cmp { path, op, value } => eval_cmp(&lookup(path), *op, value),
            Expr::In { path, list, negated } => eval_in(&lookup(path), list, *negated),
            Expr::IsNull { path, negated } => Some(lookup(path).is_null() != *negated),
            Expr::Like { path, prefix, negated } => eval_like(&lookup(path), prefix, *negated),
            Expr::Field(path) => eval_field(&lookup(path)),
            Expr::Const(b) => Some(*b),
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

// ---------------------------------------------------------------------------------------
// Three-valued evaluation of the leaves and connectives (shared by both evaluators)
// ---------------------------------------------------------------------------------------

fn eval_cmp(field: &FieldValue<'_>, op: CmpOp, value: &Literal) -> Option<bool> {
    field.sql_cmp(&value.as_field_value()).map(|ordering| op.holds(ordering))
}

fn eval_in(field: &FieldValue<'_>, list: &[Literal], negated: bool) -> Option<bool> {
    kleene_or(list, |l| eval_cmp(field, CmpOp::Eq, l)).map(|found| found != negated)
}

fn eval_like(field: &FieldValue<'_>, prefix: &str, negated: bool) -> Option<bool> {
    match field {
        FieldValue::Str(s) => Some(s.starts_with(prefix) != negated),
        _ => None,
    }
}

fn eval_field(field: &FieldValue<'_>) -> Option<bool> {
    match field {
        FieldValue::Bool(b) => Some(*b),
        _ => None,
    }
}

/// Kleene conjunction: false if any term is false, else unknown if any is unknown.
fn kleene_and<T>(terms: &[T], mut eval: impl FnMut(&T) -> Option<bool>) -> Option<bool> {
    let mut unknown = false;
    for term in terms {
        match eval(term) {
            Some(false) => return Some(false),
            None => unknown = true,
            Some(true) => {}
        }
    }
    if unknown {
        None
    } else {
        Some(true)
    }
}

/// Kleene disjunction: true if any term is true, else unknown if any is unknown.
fn kleene_or<T>(terms: &[T], mut eval: impl FnMut(&T) -> Option<bool>) -> Option<bool> {
    let mut unknown = false;
    for term in terms {
        match eval(term) {
            Some(true) => return Some(true),
            None => unknown = true,
            Some(false) => {}
        }
    }
    if unknown {
        None
    } else {
        Some(false)
    }
}

// ---------------------------------------------------------------------------------------
// Bound expressions: paths resolved to field ids
// ---------------------------------------------------------------------------------------

/// An [`Expr`] whose paths are resolved to field ids of a [`FieldSet`]
/// (see [`Expr::bind`]): the form evaluated per record during ingestion and scans.
#[derive(Debug, Clone)]
pub struct BoundExpr {
    root: Node,
}

/// [`Expr`] with field ids in place of paths.
#[derive(Debug, Clone)]
enum Node {
    And(Box<[Node]>),
    Or(Box<[Node]>),
    Not(Box<Node>),
    Cmp { field: usize, op: CmpOp, value: Literal },
    In { field: usize, list: Box<[Literal]>, negated: bool },
    IsNull { field: usize, negated: bool },
    Like { field: usize, prefix: Box<str>, negated: bool },
    Field(usize),
    Const(bool),
}

/// What a field id beyond the value slice reads as.
const MISSING: FieldValue<'static> = FieldValue::Missing;

impl Node {
    fn bind(expr: &Expr, fields: &mut FieldSet) -> Node {
        match expr {
            Expr::And(terms) => Node::And(terms.iter().map(|t| Node::bind(t, fields)).collect()),
            Expr::Or(terms) => Node::Or(terms.iter().map(|t| Node::bind(t, fields)).collect()),
            Expr::Not(inner) => Node::Not(Box::new(Node::bind(inner, fields))),
            Expr::Cmp { path, op, value } => Node::Cmp { field: fields.insert(path), op: *op, value: value.clone() },
            Expr::In { path, list, negated } => {
                Node::In { field: fields.insert(path), list: list.clone().into(), negated: *negated }
            }
            Expr::IsNull { path, negated } => Node::IsNull { field: fields.insert(path), negated: *negated },
            Expr::Like { path, prefix, negated } => {
                Node::Like { field: fields.insert(path), prefix: prefix.as_str().into(), negated: *negated }
            }
            Expr::Field(path) => Node::Field(fields.insert(path)),
            Expr::Const(b) => Node::Const(*b),
        }
    }

    fn eval(&self, values: &[FieldValue<'_>]) -> Option<bool> {
        let value = |field: usize| values.get(field).unwrap_or(&MISSING);
        match self {
            Node::And(terms) => kleene_and(terms, |t| t.eval(values)),
            Node::Or(terms) => kleene_or(terms, |t| t.eval(values)),
            Node::Not(inner) => inner.eval(values).map(|b| !b),
            Node::Cmp { field, op, value: literal } => eval_cmp(value(*field), *op, literal),
            Node::In { field, list, negated } => eval_in(value(*field), list, *negated),
            Node::IsNull { field, negated } => Some(value(*field).is_null() != *negated),
            Node::Like { field, prefix, negated } => eval_like(value(*field), prefix, *negated),
            Node::Field(field) => eval_field(value(*field)),
            Node::Const(b) => Some(*b),
        }
    }
}

impl BoundExpr {
    /// Evaluates the expression on one record: `values[id]` is the value of the field
    /// with id `id` in the [`FieldSet`] the expression was bound to (a shorter slice
    /// reads the missing ids as [`FieldValue::Missing`]). `None` is SQL's unknown; a
    /// filter keeps the record only on `Some(true)`. Does not allocate.
    #[must_use]
    pub fn eval(&self, values: &[FieldValue<'_>]) -> Option<bool> {
        self.root.eval(values)
    }
}

// ---------------------------------------------------------------------------------------
// Lowering: sqlparser's AST to Expr
// ---------------------------------------------------------------------------------------

/// One side of a comparison.
enum Operand {
    Field(FieldPath),
    Literal(Literal),
}

/// Converts sqlparser's AST of `text` into an [`Expr`], rejecting what shoal does not
/// evaluate with a reason that names the construct and its position.
struct Lowering<'t> {
    text: &'t str,
}

impl Lowering<'_> {
    fn error(&self, reason: String) -> Error {
        Error::InvalidExpression { expr: echo(self.text).into_owned(), reason }
    }

    fn syntax_error(&self, error: &ParserError) -> Error {
        let message = match error {
            ParserError::TokenizerError(m) | ParserError::ParserError(m) => m.clone(),
            ParserError::RecursionLimitExceeded => "the expression is nested too deeply".to_owned(),
        };
        self.error(format!("syntax error: {message}"))
    }

    /// ` at column C` (` at line L, column C` for multi-line text), or nothing when
    /// sqlparser has no position for the node.
    fn at(&self, span: Span) -> String {
        let start = span.start;
        if start.line == 0 {
            String::new()
        } else if self.text.contains('\n') {
            format!(" at line {}, column {}", start.line, start.column)
        } else {
            format!(" at column {}", start.column)
        }
    }

    /// `reason` about the node `e`, followed by the node's SQL text and position.
    fn unsupported(&self, reason: &str, e: &sql::Expr) -> Error {
        // Printing a node and finding its span recurse through it: a long operator chain
        // (`a + 1 + 1 …`) is named by its size instead.
        let depth = spine_depth(e);
        if depth > SHOWN_DEPTH {
            return self.error(format!("{reason}, in a chain of {depth} operators"));
        }
        self.error(format!("{reason}: `{}`{}", echo(&e.to_string()), self.at(e.span())))
    }

    /// A condition: something that is true, false or unknown for a record.
    fn condition(&self, e: &sql::Expr) -> Result<Expr> {
        match e {
            sql::Expr::Nested(inner) => self.condition(inner),
            sql::Expr::BinaryOp { op: op @ (BinaryOperator::And | BinaryOperator::Or), .. } => {
                // `a AND b AND c` is `(a AND b) AND c`: walk the left spine in a loop, so
                // that a long chain costs no stack.
                let mut terms = Vec::new();
                let mut node = e;
                while let sql::Expr::BinaryOp { left, op: inner, right } = node {
                    if inner != op {
                        break;
                    }
                    terms.push(right.as_ref());
                    node = left;
                }
                terms.push(node);
                let lowered = terms.into_iter().rev().map(|t| self.condition(t)).collect::<Result<Vec<_>>>()?;
                Ok(if *op == BinaryOperator::And { Expr::And(lowered) } else { Expr::Or(lowered) })
            }
            sql::Expr::BinaryOp { left, op, right } => match comparison_op(op) {
                Some(op) => self.comparison(e, left, op, right),
                None => Err(self.unsupported_operator(op, e)),
            },
            sql::Expr::UnaryOp { op: UnaryOperator::Not, expr } => Ok(Expr::Not(Box::new(self.condition(expr)?))),
            sql::Expr::UnaryOp { op, .. } => Err(self.unsupported_operator(op, e)),
            sql::Expr::IsNull(inner) => Ok(Expr::IsNull { path: self.field_of(inner, "IS NULL")?, negated: false }),
            sql::Expr::IsNotNull(inner) => {
                Ok(Expr::IsNull { path: self.field_of(inner, "IS NOT NULL")?, negated: true })
            }
            sql::Expr::InList { expr, list, negated } => {
                let construct = if *negated { "NOT IN" } else { "IN" };
                let path = self.field_of(expr, construct)?;
                let list = list.iter().map(|item| self.literal_of(item, construct)).collect::<Result<_>>()?;
                Ok(Expr::In { path, list, negated: *negated })
            }
            sql::Expr::Between { expr, negated, low, high } => {
                let construct = if *negated { "NOT BETWEEN" } else { "BETWEEN" };
                let path = self.field_of(expr, construct)?;
                let (low, high) = (self.literal_of(low, construct)?, self.literal_of(high, construct)?);
                let bound = |op: CmpOp, value: Literal| Expr::Cmp { path: path.clone(), op, value };
                Ok(if *negated {
                    Expr::Or(vec![bound(CmpOp::Lt, low), bound(CmpOp::Gt, high)])
                } else {
                    Expr::And(vec![bound(CmpOp::GtEq, low), bound(CmpOp::LtEq, high)])
                })
            }
            sql::Expr::Like { negated, any, expr, pattern, escape_char } => {
                if *any {
                    return Err(self.unsupported("LIKE ANY is not supported", e));
                }
                self.like(*negated, expr, pattern, escape_char.as_deref())
            }
            sql::Expr::Value(v) => match &v.value {
                Value::Boolean(b) => Ok(Expr::Const(*b)),
                _ => Err(self.unsupported("a literal is not a condition (compare a field with it)", e)),
            },
            sql::Expr::Identifier(_)
            | sql::Expr::CompoundIdentifier(_)
            | sql::Expr::CompoundFieldAccess { .. }
            | sql::Expr::Function(_) => Ok(Expr::Field(self.field_of(e, "a condition")?)),
            _ => Err(self.unsupported_construct(e)),
        }
    }

    /// `left op right` with exactly one field and one literal; the literal ends on the right.
    fn comparison(&self, whole: &sql::Expr, left: &sql::Expr, op: CmpOp, right: &sql::Expr) -> Result<Expr> {
        match (self.operand(left)?, self.operand(right)?) {
            (Operand::Field(path), Operand::Literal(value)) => Ok(Expr::Cmp { path, op, value }),
            (Operand::Literal(value), Operand::Field(path)) => Ok(Expr::Cmp { path, op: op.flipped(), value }),
            (Operand::Field(_), Operand::Field(_)) => {
                Err(self.unsupported("comparison between two fields is not supported", whole))
            }
            (Operand::Literal(_), Operand::Literal(_)) => {
                Err(self.unsupported("comparison between two literals is not supported", whole))
            }
        }
    }

    /// `expr [NOT] LIKE pattern [ESCAPE c]`, where the pattern is a string literal with
    /// `%` only at its end.
    fn like(&self, negated: bool, expr: &sql::Expr, pattern: &sql::Expr, escape: Option<&sql::Expr>) -> Result<Expr> {
        let construct = if negated { "NOT LIKE" } else { "LIKE" };
        let path = self.field_of(expr, construct)?;
        let Literal::Str(text) = self.literal_of(pattern, construct)? else {
            return Err(self.unsupported(&format!("the pattern of {construct} must be a string"), pattern));
        };
        let escape = match escape {
            None => None,
            Some(e) => match self.literal_of(e, "ESCAPE")? {
                Literal::Str(s) if s.chars().count() == 1 => s.chars().next(),
                _ => return Err(self.unsupported("ESCAPE takes a string of exactly one character", e)),
            },
        };
        let Some((prefix, wildcard)) = like_prefix(&text, escape) else {
            return Err(self.unsupported(
                &format!(
                    "only prefix patterns ('abc%') are supported by {construct}; \
                     `%` may appear only at the end and `_` not at all"
                ),
                pattern,
            ));
        };
        Ok(if wildcard {
            Expr::Like { path, prefix, negated }
        } else {
            // No wildcard: the pattern matches only itself.
            let op = if negated { CmpOp::NotEq } else { CmpOp::Eq };
            Expr::Cmp { path, op, value: Literal::Str(prefix) }
        })
    }

    fn operand(&self, e: &sql::Expr) -> Result<Operand> {
        match e {
            sql::Expr::Nested(inner) => self.operand(inner),
            sql::Expr::Value(_) | sql::Expr::UnaryOp { .. } if is_literal_syntax(e) => {
                self.literal_of(e, "a comparison").map(Operand::Literal)
            }
            sql::Expr::BinaryOp { op, .. } if comparison_op(op).is_some() || is_connective(op) => {
                Err(self.unsupported("the operands of a comparison must be a field and a literal, not a condition", e))
            }
            sql::Expr::BinaryOp { op, .. } => Err(self.unsupported_operator(op, e)),
            sql::Expr::UnaryOp { op, .. } => Err(self.unsupported_operator(op, e)),
            _ => self.field_of(e, "a comparison").map(Operand::Field),
        }
    }

    /// A dotted path; `construct` names what needs it, for the error message.
    fn field_of(&self, e: &sql::Expr, construct: &str) -> Result<FieldPath> {
        let segments: Vec<String> = match e {
            sql::Expr::Nested(inner) => return self.field_of(inner, construct),
            sql::Expr::Identifier(ident) => vec![ident.value.clone()],
            sql::Expr::CompoundIdentifier(idents) => idents.iter().map(|i| i.value.clone()).collect(),
            sql::Expr::Function(_) => match keyword_field(e) {
                Some(path) => return Ok(path),
                None => return Err(self.unsupported_construct(e)),
            },
            sql::Expr::CompoundFieldAccess { root, access_chain } => {
                let mut segments = self.field_of(root, construct)?.segments().to_vec();
                for access in access_chain {
                    match access {
                        sql::AccessExpr::Dot(sql::Expr::Identifier(ident)) => segments.push(ident.value.clone()),
                        sql::AccessExpr::Dot(part) => return Err(self.unsupported("not a field name", part)),
                        sql::AccessExpr::Subscript(_) => {
                            return Err(self.unsupported("array subscripts are not supported", e))
                        }
                    }
                }
                segments
            }
            _ if is_literal_syntax(e) => {
                return Err(self.unsupported(&format!("{construct} needs a field here, not a literal"), e))
            }
            sql::Expr::BinaryOp { op, .. } => return Err(self.unsupported_operator(op, e)),
            sql::Expr::UnaryOp { op, .. } => return Err(self.unsupported_operator(op, e)),
            _ => return Err(self.unsupported_construct(e)),
        };
        FieldPath::from_segments(segments).map_err(|err| self.error(format!("{err}{}", self.at(e.span()))))
    }

    /// A literal; `construct` names what needs it, for the error message.
    fn literal_of(&self, e: &sql::Expr, construct: &str) -> Result<Literal> {
        match e {
            sql::Expr::Nested(inner) => self.literal_of(inner, construct),
            sql::Expr::Value(v) => match &v.value {
                Value::Null => Ok(Literal::Null),
                Value::Boolean(b) => Ok(Literal::Bool(*b)),
                Value::Number(digits, _) => self.number(digits, false, e),
                Value::SingleQuotedString(s)
                | Value::TripleSingleQuotedString(s)
                | Value::EscapedStringLiteral(s)
                | Value::UnicodeStringLiteral(s)
                | Value::NationalStringLiteral(s) => Ok(Literal::Str(s.clone())),
                Value::DollarQuotedString(s) => Ok(Literal::Str(s.value.clone())),
                Value::Placeholder(_) => Err(self.unsupported("placeholders are not supported", e)),
                Value::HexStringLiteral(_)
                | Value::SingleQuotedByteStringLiteral(_)
                | Value::DoubleQuotedByteStringLiteral(_) => {
                    Err(self.unsupported("hexadecimal and byte-string literals are not supported", e))
                }
                _ => Err(self.unsupported("unsupported kind of literal (use a single-quoted string)", e)),
            },
            sql::Expr::UnaryOp { op: sign @ (UnaryOperator::Minus | UnaryOperator::Plus), expr } => {
                match expr.as_ref() {
                    sql::Expr::Value(sql::ValueWithSpan { value: Value::Number(digits, _), .. }) => {
                        self.number(digits, *sign == UnaryOperator::Minus, e)
                    }
                    _ => Err(self.unsupported_operator(sign, e)),
                }
            }
            _ => Err(self.unsupported(&format!("{construct} needs a literal here"), e)),
        }
    }

    /// An `i64` when the text is an integer in range, else an `f64`.
    fn number(&self, digits: &str, negative: bool, e: &sql::Expr) -> Result<Literal> {
        let text = if negative { format!("-{digits}") } else { digits.to_owned() };
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Literal::Int(i));
        }
        match text.parse::<f64>() {
            Ok(f) if !f.is_nan() => Ok(Literal::Float(f)),
            _ => Err(self.unsupported("not a number", e)),
        }
    }

    fn unsupported_operator(&self, op: &dyn fmt::Display, e: &sql::Expr) -> Error {
        self.unsupported(&format!("unsupported operator `{op}`"), e)
    }

    /// The error for a node shoal has no counterpart for, naming the kind of construct.
    fn unsupported_construct(&self, e: &sql::Expr) -> Error {
        let what = match e {
            sql::Expr::Function(_) => "function calls are not supported",
            sql::Expr::Subquery(_) | sql::Expr::InSubquery { .. } | sql::Expr::Exists { .. } => {
                "subqueries are not supported"
            }
            sql::Expr::Case { .. } => "CASE expressions are not supported",
            sql::Expr::Cast { .. } | sql::Expr::Convert { .. } => "casts are not supported",
            sql::Expr::TypedString(_) => "typed literals are not supported (compare with a plain literal)",
            sql::Expr::Interval(_) => "intervals are not supported",
            sql::Expr::IsTrue(_) | sql::Expr::IsNotTrue(_) | sql::Expr::IsFalse(_) | sql::Expr::IsNotFalse(_) => {
                "IS [NOT] TRUE/FALSE is not supported (use the field or `field = TRUE`)"
            }
            sql::Expr::IsUnknown(_) | sql::Expr::IsNotUnknown(_) => "IS [NOT] UNKNOWN is not supported",
            sql::Expr::IsDistinctFrom(..) | sql::Expr::IsNotDistinctFrom(..) => {
                "IS [NOT] DISTINCT FROM is not supported"
            }
            sql::Expr::ILike { .. } => "ILIKE is not supported (LIKE is case-sensitive)",
            sql::Expr::SimilarTo { .. } | sql::Expr::RLike { .. } => {
                "regular expressions are not supported (use LIKE 'prefix%')"
            }
            sql::Expr::AnyOp { .. } | sql::Expr::AllOp { .. } => "ANY/ALL comparisons are not supported (use IN)",
            sql::Expr::InUnnest { .. } => "IN UNNEST is not supported",
            sql::Expr::CompoundFieldAccess { .. } | sql::Expr::JsonAccess { .. } => {
                "subscripts and JSON access operators are not supported (write a dotted path)"
            }
            sql::Expr::Tuple(_) | sql::Expr::Array(_) | sql::Expr::Struct { .. } | sql::Expr::Map(_) => {
                "composite literals are not supported"
            }
            sql::Expr::Wildcard(_) | sql::Expr::QualifiedWildcard(..) => "wildcards are not supported",
            _ => "unsupported expression",
        };
        self.unsupported(what, e)
    }
}

/// Keywords that sqlparser reads as parameterless functions (`user`, `current_date`)
/// are field names here.
fn keyword_field(e: &sql::Expr) -> Option<FieldPath> {
    let sql::Expr::Function(function) = e else { return None };
    let plain = matches!(function.args, sql::FunctionArguments::None)
        && matches!(function.parameters, sql::FunctionArguments::None)
        && function.filter.is_none()
        && function.over.is_none()
        && function.null_treatment.is_none()
        && function.within_group.is_empty()
        && !function.uses_odbc_syntax;
    if !plain {
        return None;
    }
    let segments = function.name.0.iter().map(|part| part.as_ident().map(|i| i.value.clone()));
    FieldPath::from_segments(segments.collect::<Option<Vec<_>>>()?).ok()
}

fn comparison_op(op: &BinaryOperator) -> Option<CmpOp> {
    Some(match op {
        BinaryOperator::Eq => CmpOp::Eq,
        BinaryOperator::NotEq => CmpOp::NotEq,
        BinaryOperator::Lt => CmpOp::Lt,
        BinaryOperator::LtEq => CmpOp::LtEq,
        BinaryOperator::Gt => CmpOp::Gt,
        BinaryOperator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

fn is_connective(op: &BinaryOperator) -> bool {
    matches!(op, BinaryOperator::And | BinaryOperator::Or | BinaryOperator::Xor)
}

/// A literal value, or a sign in front of a number.
/// Nodes at most this deep are quoted in error messages (see [`Lowering::unsupported`]).
const SHOWN_DEPTH: usize = 32;

/// The length of the chain of binary operators, nesting and unary operators down the left
/// of `e`, counted without recursion (up to `SHOWN_DEPTH + 1`; the other children of a
/// node are at most the parser's recursion limit deep, but each step may also go right).
fn spine_depth(e: &sql::Expr) -> usize {
    let mut depth = 0;
    let mut stack = vec![(e, 0usize)];
    while let Some((node, at)) = stack.pop() {
        depth = depth.max(at);
        if depth > SHOWN_DEPTH {
            break;
        }
        match node {
            sql::Expr::BinaryOp { left, right, .. } => {
                stack.push((left, at + 1));
                stack.push((right, at + 1));
            }
            sql::Expr::Nested(inner) | sql::Expr::UnaryOp { expr: inner, .. } => stack.push((inner, at + 1)),
            _ => {}
        }
    }
    depth
}

fn is_literal_syntax(e: &sql::Expr) -> bool {
    match e {
        sql::Expr::Value(_) => true,
        sql::Expr::UnaryOp { op: UnaryOperator::Minus | UnaryOperator::Plus, expr } => {
            matches!(expr.as_ref(), sql::Expr::Value(sql::ValueWithSpan { value: Value::Number(..), .. }))
        }
        _ => false,
    }
}

/// Splits a `LIKE` pattern into its literal prefix and whether it ended in `%`
/// (`'ab%'` → `("ab", true)`, `'ab'` → `("ab", false)`; trailing `%%` count as one).
/// `None` when a `%` is followed by anything but `%`, or when `_` is used unescaped.
fn like_prefix(pattern: &str, escape: Option<char>) -> Option<(String, bool)> {
    let mut prefix = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            c if Some(c) == escape => prefix.push(chars.next()?),
            '%' => return chars.all(|rest| rest == '%').then_some((prefix, true)),
            '_' => return None,
            c => prefix.push(c),
        }
    }
    Some((prefix, false))
}

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
            Expr::Field(path) => write_sql_path(f, path),
            Expr::Const(b) => f.write_str(if *b { "TRUE" } else { "FALSE" }),
        }
    }
}

/// `'text'` with quotes doubled.
fn write_sql_string(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    write!(f, "'{}'", text.replace('\'', "''"))
}

/// A path as SQL: segments joined by `.`, each bare when sqlparser reads it back as
/// itself, otherwise double-quoted with `""` for a quote.
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn path(text: &str) -> FieldPath {
        FieldPath::parse(text).unwrap()
    }

    fn segments(segments: &[&str]) -> FieldPath {
        FieldPath::from_segments(segments.iter().copied()).unwrap()
    }

    fn cmp(p: &str, op: CmpOp, value: Literal) -> Expr {
        Expr::Cmp { path: path(p), op, value }
    }

    fn str_lit(s: &str) -> Literal {
        Literal::Str(s.to_owned())
    }

    /// Runs `f` on a thread with a `stack_bytes` stack (a stack overflow aborts the test
    /// process, which fails the test run).
    fn on_small_stack<T: Send + 'static>(stack_bytes: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new().stack_size(stack_bytes).spawn(f).unwrap().join().unwrap()
    }

    /// Regression (hardening issue, item 1): `" AND ".join(["id >= 0"] * 3000)` overflowed
    /// a server thread's stack. Chains up to the operator limit parse on a 1 MiB stack
    /// (half a tokio worker's) in a debug build; longer ones are refused by name.
    #[test]
    fn long_operator_chains_parse_within_a_small_stack_or_are_refused() {
        let terms = MAX_EXPR_OPERATORS / 2; // each term is one `>=` and one connective
        for connective in [" AND ", " OR "] {
            let text = vec!["id >= 0"; terms].join(connective);
            let parsed = on_small_stack(1 << 20, move || parse_expr(&text).map(|e| e.conjuncts().len()));
            let expected = if connective == " AND " { terms } else { 1 };
            assert_eq!(parsed.unwrap(), expected, "{connective}");
        }
        // Mixed chains, parenthesised groups, and arithmetic that is rejected by name
        // (its error message prints the deep node).
        let mixed = (0..terms / 2).map(|i| format!("(a = {i} OR b < {i})")).collect::<Vec<_>>().join(" AND ");
        assert!(on_small_stack(1 << 20, move || parse_expr(&mixed)).is_ok());
        let arithmetic = format!("a{} > 2", " + 1".repeat(MAX_EXPR_OPERATORS - 1));
        let error = on_small_stack(1 << 20, move || parse_expr(&arithmetic)).unwrap_err().to_string();
        assert!(error.contains("unsupported operator `+`"), "{error}");
        assert!(error.len() < 4 * ECHO_LIMIT, "the error echoes at most ECHO_LIMIT bytes: {} bytes", error.len());
        for text in [
            vec!["id >= 0"; 3_000].join(" AND "),
            vec!["a=1"; 100_000].join(" OR "),
            format!("a{} > 2", " + 1".repeat(50_000)),
        ] {
            let error = on_small_stack(1 << 20, move || parse_expr(&text)).unwrap_err().to_string();
            assert!(error.contains("operators") && error.contains(&format!("the limit is {MAX_EXPR_OPERATORS}")), "{error}");
            assert!(error.len() < 4 * ECHO_LIMIT, "{} bytes", error.len());
        }
        let huge = format!("a IN ({})", vec!["1"; MAX_EXPR_BYTES / 2 + 1].join(","));
        let error = parse_expr(&huge).unwrap_err().to_string();
        assert!(error.contains(&format!("the limit is {MAX_EXPR_BYTES} bytes")), "{error}");
        // A long IN list is one operator.
        let list = format!("a IN ({})", (0..20_000).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
        assert!(parse_expr(&list).is_ok());
        // Nesting is bounded by the parser's recursion limit, with an error, not a crash.
        let nested = format!("{}a = 1{}", "(".repeat(10_000), ")".repeat(10_000));
        let error = on_small_stack(1 << 20, move || parse_expr(&nested)).unwrap_err().to_string();
        assert!(error.contains("nested too deeply"), "{error}");
        let nots = format!("{}a", "NOT ".repeat(10_000));
        assert!(on_small_stack(1 << 20, move || parse_expr(&nots)).is_err());
    }

    fn field(p: &str) -> Expr {
        Expr::Field(path(p))
    }

    fn parse(text: &str) -> Expr {
        parse_expr(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// The reason of the error `text` is rejected with.
    fn rejection(text: &str) -> String {
        match parse_expr(text) {
            Err(Error::InvalidExpression { expr, reason }) => {
                assert_eq!(expr, text);
                reason
            }
            other => panic!("{text} was not rejected: {other:?}"),
        }
    }

    /// Evaluates `e` on a record given as (path, value) pairs; other paths are missing.
    fn eval(e: &Expr, record: &[(&str, FieldValue<'static>)]) -> Option<bool> {
        let record: Vec<(FieldPath, FieldValue<'static>)> = record.iter().map(|(p, v)| (path(p), v.clone())).collect();
        let lookup =
            |p: &FieldPath| record.iter().find(|(q, _)| q == p).map_or(FieldValue::Missing, |(_, v)| v.clone());
        let slow = e.eval_with(&lookup);
        let mut fields = FieldSet::new();
        let bound = e.bind(&mut fields);
        let values: Vec<FieldValue<'static>> = fields.paths().iter().map(lookup).collect();
        assert_eq!(bound.eval(&values), slow, "bound and path evaluation differ on {e}");
        slow
    }

    fn s(text: &'static str) -> FieldValue<'static> {
        FieldValue::Str(Cow::Borrowed(text))
    }

    // ---- parsing ------------------------------------------------------------------------

    #[test]
    fn fishstore_predicates_parse_to_conjunctions_of_equalities() {
        assert_eq!(
            parse("type = 'IssuesEvent' AND payload.action = 'opened'"),
            Expr::And(vec![
                cmp("type", CmpOp::Eq, str_lit("IssuesEvent")),
                cmp("payload.action", CmpOp::Eq, str_lit("opened")),
            ])
        );
        assert_eq!(
            parse("type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'"),
            Expr::And(vec![
                cmp("type", CmpOp::Eq, str_lit("PullRequestEvent")),
                cmp("payload.pull_request.head.repo.language", CmpOp::Eq, str_lit("C++")),
            ])
        );
        assert_eq!(parse("user.followers_count >= 100"), cmp("user.followers_count", CmpOp::GtEq, Literal::Int(100)));
    }

    #[test]
    fn keyword_named_keys_parse_as_paths() {
        for key in [
            "type",
            "TYPE",
            "date",
            "user",
            "timestamp",
            "value",
            "key",
            "current_date",
            "current_user",
            "localtime",
            "session_user",
            "time",
            "year",
            "name",
            "select_x",
            "case",
            "from",
            "order",
            "end",
            "interval_x",
        ] {
            let p = segments(&[key]);
            assert_eq!(
                parse(&format!("{key} = 1")),
                Expr::Cmp { path: p.clone(), op: CmpOp::Eq, value: Literal::Int(1) }
            );
            assert_eq!(parse(key), Expr::Field(p.clone()), "{key}");
            assert_eq!(
                parse(&format!("{key}.login IS NULL")),
                Expr::IsNull { path: segments(&[key, "login"]), negated: false }
            );
            assert_eq!(parse(&format!("{key}.login")), Expr::Field(segments(&[key, "login"])), "{key}.login");
            assert_eq!(parse(&format!("payload.{key} = 'x'")), cmp(&format!("payload.{key}"), CmpOp::Eq, str_lit("x")));
        }
        // Keywords that start other syntax are read as keys when quoted, and after a dot.
        assert_eq!(parse("\"interval\" = 1"), cmp("interval", CmpOp::Eq, Literal::Int(1)));
        assert_eq!(parse("\"null\" IS NULL"), Expr::IsNull { path: path("null"), negated: false });
        assert_eq!(
            parse("a.null = 1 AND a.interval = 2"),
            Expr::And(vec![cmp("a.null", CmpOp::Eq, Literal::Int(1)), cmp("a.interval", CmpOp::Eq, Literal::Int(2)),])
        );
    }

    #[test]
    fn quoted_identifiers_are_single_case_preserving_segments() {
        assert_eq!(
            parse("\"key with space\" = 1"),
            Expr::Cmp { path: segments(&["key with space"]), op: CmpOp::Eq, value: Literal::Int(1) }
        );
        assert_eq!(
            parse("payload.\"a.b\" = 'x'"),
            Expr::Cmp { path: segments(&["payload", "a.b"]), op: CmpOp::Eq, value: str_lit("x") }
        );
        assert_eq!(
            parse("\"say \"\"hi\"\"\" IS NULL"),
            Expr::IsNull { path: segments(&["say \"hi\""]), negated: false }
        );
        assert_eq!(
            parse("Actor.Login = 'x'"),
            Expr::Cmp { path: segments(&["Actor", "Login"]), op: CmpOp::Eq, value: str_lit("x") }
        );
        assert_eq!(parse("\"Actor\".\"Login\" = 'x'"), parse("Actor.Login = 'x'"));
        assert_ne!(parse("actor = 1"), parse("ACTOR = 1"));
    }

    #[test]
    fn literals_parse_to_their_types() {
        let value_of = |text: &str| match parse(&format!("a = {text}")) {
            Expr::Cmp { value, .. } => value,
            other => panic!("{other:?}"),
        };
        assert_eq!(value_of("'it''s'"), str_lit("it's"));
        assert_eq!(value_of("''"), str_lit(""));
        assert_eq!(value_of("'a\\b'"), str_lit("a\\b"), "backslash is not an escape character");
        assert_eq!(value_of("42"), Literal::Int(42));
        assert_eq!(value_of("-42"), Literal::Int(-42));
        assert_eq!(value_of("+7"), Literal::Int(7));
        assert_eq!(value_of("-9223372036854775808"), Literal::Int(i64::MIN));
        assert_eq!(value_of("9223372036854775808"), Literal::Float(9_223_372_036_854_775_808.0));
        assert_eq!(value_of("1.5"), Literal::Float(1.5));
        assert_eq!(value_of("-2.5e3"), Literal::Float(-2500.0));
        assert_eq!(value_of("1.0"), Literal::Float(1.0));
        assert_eq!(value_of("1e-7"), Literal::Float(1e-7));
        assert_eq!(value_of("TRUE"), Literal::Bool(true));
        assert_eq!(value_of("false"), Literal::Bool(false));
        assert_eq!(value_of("NULL"), Literal::Null);
    }

    #[test]
    fn literal_on_the_left_moves_right_with_the_flipped_operator() {
        assert_eq!(parse("5 < a"), cmp("a", CmpOp::Gt, Literal::Int(5)));
        assert_eq!(parse("5 <= a"), cmp("a", CmpOp::GtEq, Literal::Int(5)));
        assert_eq!(parse("'x' = a"), cmp("a", CmpOp::Eq, str_lit("x")));
        assert_eq!(parse("'x' != a"), cmp("a", CmpOp::NotEq, str_lit("x")));
        assert_eq!(parse("a <> 1"), parse("a != 1"));
    }

    #[test]
    fn in_is_null_and_bare_fields_parse() {
        assert_eq!(
            parse("actor.login IN ('alice', 'bob', NULL)"),
            Expr::In {
                path: path("actor.login"),
                list: vec![str_lit("alice"), str_lit("bob"), Literal::Null],
                negated: false
            }
        );
        assert_eq!(
            parse("a NOT IN (1, -2.5)"),
            Expr::In { path: path("a"), list: vec![Literal::Int(1), Literal::Float(-2.5)], negated: true }
        );
        assert_eq!(parse("a IS NULL"), Expr::IsNull { path: path("a"), negated: false });
        assert_eq!(parse("a.b IS NOT NULL"), Expr::IsNull { path: path("a.b"), negated: true });
        assert_eq!(parse("payload.public"), field("payload.public"));
        assert_eq!(parse("NOT payload.public"), Expr::Not(Box::new(field("payload.public"))));
        assert_eq!(parse("TRUE"), Expr::Const(true));
        assert_eq!(parse("((a = 1))"), cmp("a", CmpOp::Eq, Literal::Int(1)));
    }

    #[test]
    fn between_desugars_into_two_comparisons() {
        assert_eq!(
            parse("a BETWEEN 1 AND 5"),
            Expr::And(vec![cmp("a", CmpOp::GtEq, Literal::Int(1)), cmp("a", CmpOp::LtEq, Literal::Int(5))])
        );
        assert_eq!(
            parse("a NOT BETWEEN 'b' AND 'd' AND c"),
            Expr::And(vec![
                Expr::Or(vec![cmp("a", CmpOp::Lt, str_lit("b")), cmp("a", CmpOp::Gt, str_lit("d"))]),
                field("c"),
            ])
        );
    }

    #[test]
    fn like_accepts_prefix_patterns_and_plain_strings() {
        let like = |prefix: &str, negated| Expr::Like { path: path("a"), prefix: prefix.to_owned(), negated };
        assert_eq!(parse("a LIKE 'abc%'"), like("abc", false));
        assert_eq!(parse("a NOT LIKE 'abc%%'"), like("abc", true));
        assert_eq!(parse("a LIKE '%'"), like("", false));
        assert_eq!(parse("a LIKE 'abc'"), cmp("a", CmpOp::Eq, str_lit("abc")));
        assert_eq!(parse("a NOT LIKE 'abc'"), cmp("a", CmpOp::NotEq, str_lit("abc")));
        assert_eq!(parse("a LIKE '100!%!_x%' ESCAPE '!'"), like("100%_x", false));
        assert_eq!(parse("a LIKE 'x\\%' ESCAPE '\\'"), cmp("a", CmpOp::Eq, str_lit("x%")));
        for pattern in ["'%abc'", "'a%c'", "'a_c%'", "'_'", "'ab%' ESCAPE 'xy'"] {
            let reason = rejection(&format!("a LIKE {pattern}"));
            assert!(reason.contains("LIKE") || reason.contains("ESCAPE"), "{pattern}: {reason}");
        }
        assert_eq!(parse("a LIKE 'x%' ESCAPE '!'"), like("x", false));
    }

    // ---- normalisation ------------------------------------------------------------------

    #[test]
    fn not_is_pushed_to_the_leaves() {
        assert_eq!(parse("NOT a = 1"), cmp("a", CmpOp::NotEq, Literal::Int(1)));
        assert_eq!(parse("NOT (a < 1)"), cmp("a", CmpOp::GtEq, Literal::Int(1)));
        assert_eq!(parse("NOT NOT a > 1"), cmp("a", CmpOp::Gt, Literal::Int(1)));
        assert_eq!(parse("NOT a IN (1)"), Expr::In { path: path("a"), list: vec![Literal::Int(1)], negated: true });
        assert_eq!(parse("NOT a IS NULL"), Expr::IsNull { path: path("a"), negated: true });
        assert_eq!(parse("NOT a NOT LIKE 'x%'"), Expr::Like { path: path("a"), prefix: "x".into(), negated: false });
        assert_eq!(parse("NOT NOT a"), field("a"));
        assert_eq!(parse("NOT FALSE"), Expr::Const(true));
        assert_eq!(
            parse("NOT (a = 1 AND (b OR c IS NULL))"),
            Expr::Or(vec![
                cmp("a", CmpOp::NotEq, Literal::Int(1)),
                Expr::And(vec![Expr::Not(Box::new(field("b"))), Expr::IsNull { path: path("c"), negated: true }]),
            ])
        );
    }

    #[test]
    fn normalize_flattens_connectives_and_folds_constants() {
        assert_eq!(parse("a AND (b AND (c AND d))"), Expr::And(vec![field("a"), field("b"), field("c"), field("d")]));
        assert_eq!(parse("(a OR b) OR (c OR d)"), Expr::Or(vec![field("a"), field("b"), field("c"), field("d")]));
        assert_eq!(parse("a AND TRUE"), field("a"));
        assert_eq!(parse("a AND FALSE"), Expr::Const(false));
        assert_eq!(parse("a OR TRUE"), Expr::Const(true));
        assert_eq!(parse("a OR FALSE OR b"), Expr::Or(vec![field("a"), field("b")]));
        assert_eq!(Expr::And(vec![]).normalize(), Expr::Const(true));
        assert_eq!(Expr::Or(vec![]).normalize(), Expr::Const(false));
        assert_eq!(Expr::And(vec![field("a")]).normalize(), field("a"));
        let empty_in = |negated| Expr::In { path: path("a"), list: vec![], negated };
        assert_eq!(empty_in(false).normalize(), Expr::Const(false));
        assert_eq!(empty_in(true).normalize(), Expr::Const(true));
    }

    #[test]
    fn fields_are_distinct_in_first_seen_order() {
        let e = parse("b = 1 AND (a IS NULL OR b > 3) AND NOT c.d AND a LIKE 'x%'");
        assert_eq!(e.fields(), vec![path("b"), path("a"), path("c.d")]);
        assert_eq!(parse("TRUE").fields(), Vec::<FieldPath>::new());
    }

    #[test]
    fn conjuncts_are_the_top_level_and_terms() {
        let e = parse("type = 'IssuesEvent' AND (a OR b) AND c");
        let conjuncts = e.conjuncts();
        assert_eq!(conjuncts.len(), 3);
        assert_eq!(conjuncts[1], &Expr::Or(vec![field("a"), field("b")]));
        let single = parse("a OR b");
        assert_eq!(single.conjuncts(), vec![&single]);
    }

    #[test]
    fn bind_reuses_and_adds_field_ids() {
        let mut fields = FieldSet::new();
        fields.insert(&path("z"));
        fields.insert(&path("a"));
        let bound = parse("a = 1 AND b = 'x'").bind(&mut fields);
        assert_eq!(fields.paths(), &[path("z"), path("a"), path("b")]);
        let values = [FieldValue::Int(9), FieldValue::Int(1), s("x")];
        assert_eq!(bound.eval(&values), Some(true));
        // Ids beyond the slice read as missing.
        assert_eq!(bound.eval(&values[..2]), None);
        assert_eq!(bound.eval(&[]), None);
    }

    // ---- errors -------------------------------------------------------------------------

    #[test]
    fn unsupported_constructs_are_rejected_naming_the_construct_and_position() {
        for (text, expected) in [
            ("a % 2 = 1", "unsupported operator `%`: `a % 2` at column 1"),
            ("a + 1 > 2", "unsupported operator `+`"),
            ("-a = 1", "unsupported operator `-`"),
            ("a = b", "comparison between two fields is not supported: `a = b` at column 1"),
            ("x = 1 AND a.b < c.d", "comparison between two fields is not supported: `a.b < c.d` at column 11"),
            ("1 = 1", "comparison between two literals is not supported"),
            ("lower(a) = 'x'", "function calls are not supported: `lower(a)`"),
            ("a = (SELECT 1)", "subqueries are not supported"),
            ("a IN (SELECT b FROM t)", "subqueries are not supported"),
            ("CASE WHEN a THEN 1 END = 1", "CASE expressions are not supported"),
            ("CAST(a AS INT) = 1", "casts are not supported"),
            ("a = DATE '2020-01-01'", "typed literals are not supported"),
            ("a[0] = 1", "array subscripts are not supported"),
            ("a IS TRUE", "IS [NOT] TRUE/FALSE is not supported"),
            ("a IS DISTINCT FROM 1", "IS [NOT] DISTINCT FROM is not supported"),
            ("a ILIKE 'x%'", "ILIKE is not supported"),
            ("a LIKE '%x'", "only prefix patterns"),
            ("a LIKE b", "LIKE needs a literal here: `b`"),
            ("a LIKE 1", "the pattern of LIKE must be a string"),
            ("a IN (b)", "IN needs a literal here: `b`"),
            ("'x' IN ('y')", "IN needs a field here, not a literal"),
            ("1 IS NULL", "IS NULL needs a field here, not a literal"),
            ("a BETWEEN b AND 5", "BETWEEN needs a literal here: `b`"),
            ("a = ?", "placeholders are not supported"),
            ("a = X'1F'", "hexadecimal and byte-string literals are not supported"),
            ("5", "a literal is not a condition"),
            ("(a = 1) = TRUE", "the operands of a comparison must be a field and a literal, not a condition"),
            ("a = 1\n AND b % 2 = 0", "unsupported operator `%`: `b % 2` at line 2, column 6"),
        ] {
            let reason = rejection(text);
            assert!(reason.contains(expected), "{text:?}: {reason:?} does not contain {expected:?}");
        }
    }

    #[test]
    fn syntax_errors_and_trailing_input_are_rejected() {
        assert!(rejection("a = 1 b").contains("unexpected `b` after the end of the expression at column 7"));
        assert!(rejection("a = 1;").contains("unexpected `;`"));
        for text in ["", "a =", "(a = 1", "a = 'open", "a AND", "interval = 1", "a IN ()"] {
            assert!(rejection(text).starts_with("syntax error: "), "{text:?}");
        }
        let message = parse_expr("a = 1 b").unwrap_err().to_string();
        assert!(message.starts_with("invalid expression \"a = 1 b\": "), "{message}");
    }

    // ---- three-valued evaluation ----------------------------------------------------------

    #[test]
    fn comparison_is_unknown_on_missing_null_or_mistyped_fields() {
        let e = parse("a = 1");
        assert_eq!(eval(&e, &[("a", FieldValue::Int(1))]), Some(true));
        assert_eq!(eval(&e, &[("a", FieldValue::Float(1.0))]), Some(true));
        assert_eq!(eval(&e, &[("a", FieldValue::Int(2))]), Some(false));
        assert_eq!(eval(&e, &[]), None);
        assert_eq!(eval(&e, &[("a", FieldValue::Null)]), None);
        assert_eq!(eval(&e, &[("a", s("1"))]), None);
        assert_eq!(eval(&e, &[("a", FieldValue::Object("{}"))]), None);
        assert_eq!(eval(&parse("a <> 1"), &[]), None);
        assert_eq!(eval(&parse("NOT a = 1"), &[("a", s("1"))]), None);
        assert_eq!(eval(&parse("a = NULL"), &[("a", FieldValue::Null)]), None);
        assert_eq!(eval(&parse("a <> NULL"), &[("a", FieldValue::Int(1))]), None);
        assert_eq!(eval(&parse("a >= 'b'"), &[("a", s("c"))]), Some(true));
        assert_eq!(eval(&parse("a < 2.5"), &[("a", FieldValue::Int(2))]), Some(true));
        assert_eq!(eval(&parse("a > FALSE"), &[("a", FieldValue::Bool(true))]), Some(true));
        assert_eq!(eval(&parse("a BETWEEN 1 AND 3"), &[("a", FieldValue::Int(3))]), Some(true));
        assert_eq!(eval(&parse("a NOT BETWEEN 1 AND 3"), &[("a", FieldValue::Int(4))]), Some(true));
        assert_eq!(eval(&parse("a NOT BETWEEN 1 AND 3"), &[]), None);
    }

    #[test]
    fn in_list_is_three_valued() {
        let e = parse("a IN (1, 'x')");
        let not_in = parse("a NOT IN (1, 'x')");
        for (value, expected) in [
            (FieldValue::Int(1), Some(true)),
            (s("x"), Some(true)),
            // 2 = 'x' is unknown (mismatched types), so "none equal" is not certain.
            (FieldValue::Int(2), None),
            (FieldValue::Missing, None),
            (FieldValue::Null, None),
        ] {
            assert_eq!(eval(&e, &[("a", value.clone())]), expected, "{value:?}");
            assert_eq!(eval(&not_in, &[("a", value.clone())]), expected.map(|b| !b), "{value:?}");
        }
        assert_eq!(eval(&parse("a IN (1, 2)"), &[("a", FieldValue::Int(3))]), Some(false));
        assert_eq!(eval(&parse("a NOT IN (1, 2)"), &[("a", FieldValue::Int(3))]), Some(true));
        assert_eq!(eval(&parse("a IN (1, NULL)"), &[("a", FieldValue::Int(1))]), Some(true));
        assert_eq!(eval(&parse("a IN (1, NULL)"), &[("a", FieldValue::Int(3))]), None);
        assert_eq!(eval(&parse("a NOT IN (1, 2)"), &[]), None);
    }

    #[test]
    fn is_null_is_never_unknown() {
        let is_null = parse("a IS NULL");
        let is_not_null = parse("a IS NOT NULL");
        for (value, null) in [
            (FieldValue::Missing, true),
            (FieldValue::Null, true),
            (FieldValue::Int(0), false),
            (s(""), false),
            (FieldValue::Bool(false), false),
            (FieldValue::Array("[]"), false),
        ] {
            assert_eq!(eval(&is_null, &[("a", value.clone())]), Some(null), "{value:?}");
            assert_eq!(eval(&is_not_null, &[("a", value.clone())]), Some(!null), "{value:?}");
        }
    }

    #[test]
    fn like_matches_prefixes_of_strings_only() {
        let like = parse("a LIKE 'ab%'");
        let not_like = parse("a NOT LIKE 'ab%'");
        for (value, expected) in [
            (s("abc"), Some(true)),
            (s("ab"), Some(true)),
            (s("a"), Some(false)),
            (s("xab"), Some(false)),
            (FieldValue::Int(1), None),
            (FieldValue::Null, None),
            (FieldValue::Missing, None),
        ] {
            assert_eq!(eval(&like, &[("a", value.clone())]), expected, "{value:?}");
            assert_eq!(eval(&not_like, &[("a", value.clone())]), expected.map(|b| !b), "{value:?}");
        }
        assert_eq!(eval(&parse("a LIKE '%'"), &[("a", s(""))]), Some(true));
        assert_eq!(eval(&parse("a LIKE '%'"), &[("a", FieldValue::Int(1))]), None);
    }

    #[test]
    fn bare_field_is_its_boolean_value_else_unknown() {
        let e = parse("a");
        let not = parse("NOT a");
        for (value, expected) in [
            (FieldValue::Bool(true), Some(true)),
            (FieldValue::Bool(false), Some(false)),
            (FieldValue::Int(1), None),
            (s("true"), None),
            (FieldValue::Null, None),
            (FieldValue::Missing, None),
        ] {
            assert_eq!(eval(&e, &[("a", value.clone())]), expected, "{value:?}");
            assert_eq!(eval(&not, &[("a", value.clone())]), expected.map(|b| !b), "{value:?}");
        }
    }

    #[test]
    fn and_or_not_follow_kleene_logic() {
        let truth = [Some(true), Some(false), None];
        let value = |t: Option<bool>| t.map_or(FieldValue::Null, FieldValue::Bool);
        let kleene_and = |x: Option<bool>, y: Option<bool>| match (x, y) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        };
        let kleene_or = |x: Option<bool>, y: Option<bool>| match (x, y) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        };
        for x in truth {
            for y in truth {
                let record = [("x", value(x)), ("y", value(y))];
                assert_eq!(eval(&parse("x AND y"), &record), kleene_and(x, y), "{x:?} AND {y:?}");
                assert_eq!(eval(&parse("x OR y"), &record), kleene_or(x, y), "{x:?} OR {y:?}");
                assert_eq!(eval(&parse("NOT (x AND y)"), &record), kleene_and(x, y).map(|b| !b));
                assert_eq!(eval(&parse("NOT (x OR y)"), &record), kleene_or(x, y).map(|b| !b));
            }
        }
        assert_eq!(eval(&parse("TRUE"), &[]), Some(true));
        assert_eq!(eval(&parse("missing = 1 AND FALSE"), &[]), Some(false));
        assert_eq!(eval(&parse("missing = 1 OR TRUE"), &[]), Some(true));
    }

    // ---- Display ------------------------------------------------------------------------

    #[test]
    fn display_writes_readable_sql() {
        let text = "type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'";
        assert_eq!(parse(text).to_string(), text);
        assert_eq!(
            parse("(a OR NOT b) AND c NOT IN (1, -2.5, 'it''s', NULL) AND d IS NOT NULL AND e LIKE 'x%'").to_string(),
            "(a OR NOT b) AND c NOT IN (1, -2.5, 'it''s', NULL) AND d IS NOT NULL AND e LIKE 'x%'"
        );
        assert_eq!(
            parse("payload.\"a.b\" = 1.0 AND \"key with space\" >= 1e300").to_string(),
            "payload.\"a.b\" = 1.0 AND \"key with space\" >= 1e300"
        );
        assert_eq!(parse("\"null\".\"null\" = TRUE").to_string(), "\"null\".null = TRUE");
        assert_eq!(parse("a LIKE '5!%%' ESCAPE '!'").to_string(), "a LIKE '5\\%%' ESCAPE '\\'");
        assert_eq!(Expr::Not(Box::new(cmp("a", CmpOp::Eq, Literal::Int(1)))).to_string(), "NOT (a = 1)");
        assert_eq!(cmp("a", CmpOp::Eq, Literal::Float(f64::INFINITY)).to_string(), "a = 1e999");
        assert_eq!(parse("a = 1e999"), cmp("a", CmpOp::Eq, Literal::Float(f64::INFINITY)));
    }

    /// Every keyword sqlparser knows, as any segment of a path in every place Display
    /// writes a path, reads back as the same key (this pins [`RESERVED_LEADING_KEYWORDS`]).
    #[test]
    fn display_round_trips_keyword_named_segments() {
        for keyword in sqlparser::keywords::ALL_KEYWORDS {
            let mut capitalised = keyword.to_ascii_lowercase();
            capitalised[..1].make_ascii_uppercase();
            for key in [keyword.to_string(), keyword.to_ascii_lowercase(), capitalised] {
                for p in [segments(&[&key]), segments(&[&key, "y"]), segments(&["x", &key]), segments(&[&key, &key])] {
                    let other = Expr::Field(path("other"));
                    for e in [
                        Expr::Cmp { path: p.clone(), op: CmpOp::Eq, value: Literal::Int(1) },
                        Expr::In { path: p.clone(), list: vec![Literal::Int(1)], negated: true },
                        Expr::IsNull { path: p.clone(), negated: false },
                        Expr::Like { path: p.clone(), prefix: "a".into(), negated: true },
                        Expr::Field(p.clone()),
                        Expr::Not(Box::new(Expr::Field(p.clone()))),
                        Expr::And(vec![other.clone(), Expr::Field(p.clone())]),
                        Expr::Or(vec![Expr::And(vec![Expr::Field(p.clone()), other.clone()]), other.clone()]),
                        Expr::Not(Box::new(Expr::Or(vec![Expr::Field(p.clone()), other.clone()]))),
                    ] {
                        let text = e.to_string();
                        assert_eq!(parse_expr(&text).ok(), Some(e.clone().normalize()), "{text}");
                    }
                }
            }
        }
    }

    // ---- properties ---------------------------------------------------------------------

    /// Paths with plain, keyword, quoted, dotted and case-sensitive keys.
    const PATHS: &[&[&str]] = &[
        &["a"],
        &["b", "c"],
        &["type"],
        &["payload", "a.b"],
        &["key with space"],
        &["user", "login"],
        &["Not"],
        &["x", "select"],
        &["say \"hi\""],
        &["A"],
    ];

    fn arb_path() -> impl Strategy<Value = FieldPath> {
        prop::sample::select(PATHS).prop_map(segments)
    }

    fn arb_op() -> impl Strategy<Value = CmpOp> {
        prop::sample::select(&[CmpOp::Eq, CmpOp::NotEq, CmpOp::Lt, CmpOp::LtEq, CmpOp::Gt, CmpOp::GtEq][..])
    }

    fn arb_literal() -> impl Strategy<Value = Literal> {
        prop_oneof![
            Just(Literal::Null),
            any::<bool>().prop_map(Literal::Bool),
            (-2i64..3).prop_map(Literal::Int),
            any::<i64>().prop_map(Literal::Int),
            prop::sample::select(&[-1.5, 0.0, 1.0, 2.5][..]).prop_map(Literal::Float),
            any::<f64>().prop_filter("SQL has no NaN", |f| !f.is_nan()).prop_map(Literal::Float),
            prop::sample::select(&["", "x", "xy", "y"][..]).prop_map(str_lit),
            "[a-z'\"%_\\\\ \n\t\r\u{0}-]{0,6}".prop_map(Literal::Str),
            "\\PC{0,6}".prop_map(Literal::Str),
        ]
    }

    fn arb_prefix() -> impl Strategy<Value = String> {
        prop_oneof![prop::sample::select(&["", "x"][..]).prop_map(str::to_owned), "[a-z'%_\\\\!]{0,4}", "\\PC{0,4}"]
    }

    fn arb_expr() -> impl Strategy<Value = Expr> {
        let leaf = prop_oneof![
            (arb_path(), arb_op(), arb_literal()).prop_map(|(path, op, value)| Expr::Cmp { path, op, value }),
            (arb_path(), prop::collection::vec(arb_literal(), 0..4), any::<bool>())
                .prop_map(|(path, list, negated)| Expr::In { path, list, negated }),
            (arb_path(), any::<bool>()).prop_map(|(path, negated)| Expr::IsNull { path, negated }),
            (arb_path(), arb_prefix(), any::<bool>()).prop_map(|(path, prefix, negated)| Expr::Like {
                path,
                prefix,
                negated
            }),
            arb_path().prop_map(Expr::Field),
            any::<bool>().prop_map(Expr::Const),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Expr::And),
                prop::collection::vec(inner.clone(), 0..4).prop_map(Expr::Or),
                inner.prop_map(|e| Expr::Not(Box::new(e))),
            ]
        })
    }

    fn arb_value() -> impl Strategy<Value = FieldValue<'static>> {
        prop_oneof![
            Just(FieldValue::Missing),
            Just(FieldValue::Null),
            any::<bool>().prop_map(FieldValue::Bool),
            (-2i64..3).prop_map(FieldValue::Int),
            prop::sample::select(&[-1.5, 0.0, 1.0, 2.5][..]).prop_map(FieldValue::Float),
            prop::sample::select(&["", "x", "xy", "y"][..]).prop_map(|s| FieldValue::Str(Cow::Borrowed(s))),
            Just(FieldValue::Object("{}")),
        ]
    }

    /// One value per entry of [`PATHS`].
    fn arb_record() -> impl Strategy<Value = Vec<FieldValue<'static>>> {
        prop::collection::vec(arb_value(), PATHS.len())
    }

    fn lookup_in<'r>(record: &'r [FieldValue<'static>]) -> impl Fn(&FieldPath) -> FieldValue<'static> + 'r {
        |p: &FieldPath| {
            let index = PATHS.iter().position(|q| p.segments() == *q).unwrap();
            record[index].clone()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn display_round_trips_through_parse_expr(e in arb_expr()) {
            let text = e.to_string();
            let parsed = parse_expr(&text);
            prop_assert!(parsed.is_ok(), "{text:?}: {parsed:?}");
            prop_assert_eq!(parsed.unwrap(), e.clone().normalize(), "{}", text);
        }

        #[test]
        fn normalize_is_idempotent(e in arb_expr()) {
            let once = e.normalize();
            prop_assert_eq!(once.clone().normalize(), once);
        }

        #[test]
        fn normalize_preserves_three_valued_meaning(e in arb_expr(), record in arb_record()) {
            let lookup = lookup_in(&record);
            prop_assert_eq!(e.clone().normalize().eval_with(&lookup), e.eval_with(&lookup));
        }

        #[test]
        fn bound_eval_agrees_with_eval_with(e in arb_expr(), record in arb_record(), preset in 0..PATHS.len()) {
            let lookup = lookup_in(&record);
            // Field ids need not follow the expression's order: start from a non-empty set.
            let mut fields = FieldSet::new();
            fields.insert(&segments(PATHS[preset]));
            let bound = e.bind(&mut fields);
            let values: Vec<FieldValue<'static>> = fields.paths().iter().map(&lookup).collect();
            prop_assert_eq!(bound.eval(&values), e.eval_with(&lookup));
            for p in e.fields() {
                prop_assert!(fields.index_of(&p).is_some());
            }
        }
    }
}
