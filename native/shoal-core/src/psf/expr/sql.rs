//! Text to [`Expr`]: the filter language's SQL syntax parsed by `sqlparser` within
//! bounds on size, operators and nesting, then lowered into the tree, rejecting what shoal
//! does not evaluate with a reason that names the construct and its position.

use std::borrow::Cow;
use std::fmt;

use sqlparser::ast::{self as sql, BinaryOperator, Spanned, UnaryOperator, Value};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer};

use crate::error::{Error, Result};
use crate::path::FieldPath;

use super::{CmpOp, Expr, Literal};
use crate::timestamp::{parse_timestamp, EpochUnit};

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
    parse_expr_within(text, MAX_EXPR_BYTES)
}

/// As [`parse_expr`], for text at most `max_bytes` long: [`MAX_RENDERED_EXPR_BYTES`] for a
/// filter the daemon rendered itself (a plan's normalised filter in a ticket, the
/// condition of a SQL statement that was held to [`MAX_EXPR_BYTES`] as the client sent
/// it), whose text may be longer than what the client sent. The operator and nesting
/// limits are the same.
///
/// # Errors
/// As [`parse_expr`].
pub fn parse_expr_within(text: &str, max_bytes: usize) -> Result<Expr> {
    let lowering = Lowering { text };
    if text.len() > max_bytes {
        return Err(lowering.error(format!(
            "the expression is {} bytes long; the limit is {max_bytes} bytes",
            text.len()
        )));
    }
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| lowering.syntax_error(&ParserError::from(e)))?;
    let tokens = element_wildcards(tokens);
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

/// Lowers a condition that sqlparser parsed as part of a larger SQL statement `text` (the
/// `WHERE` clause of a Flight SQL query) into a [normalised](Expr::normalize) [`Expr`],
/// with the rules and messages of [`parse_expr`]; positions are the statement's.
///
/// The caller keeps the statement within [`MAX_EXPR_BYTES`] and [`MAX_EXPR_OPERATORS`]
/// (see [`count_operators`]) and drops the syntax tree with [`dismantle`].
///
/// # Errors
/// [`Error::InvalidExpression`] naming the construct the language does not support.
pub fn lower_condition(condition: &sql::Expr, text: &str) -> Result<Expr> {
    Ok(Lowering { text }.condition(condition)?.normalize())
}

/// The literal a SQL expression is (`NULL`, `TRUE`, `42`, `-1.5`, `'text'`), `construct`
/// naming what needs it in the error.
///
/// # Errors
/// [`Error::InvalidExpression`] when `e` is no literal (a path, an operator, a call…) or a
/// kind of literal the filter language has not, naming it and its position in `text`.
pub fn lower_literal(e: &sql::Expr, text: &str, construct: &str) -> Result<Literal> {
    Lowering { text }.literal_of(e, construct)
}

/// The dotted path that a SQL expression names (`actor.login`, `payload."a.b"`, keywords
/// such as `type` or `date` as keys), `construct` naming what needs it in the error.
///
/// # Errors
/// [`Error::InvalidExpression`] when `e` is not a field reference (a literal, an operator,
/// a function call…), naming it and its position in `text`.
pub fn lower_field(e: &sql::Expr, text: &str, construct: &str) -> Result<FieldPath> {
    Lowering { text }.field_of(e, construct)
}

/// The operators among `tokens`, as [`MAX_EXPR_OPERATORS`] counts them (`AND`, `OR`,
/// `NOT`, `IS`, `IN`, `LIKE`, `BETWEEN`, comparison and arithmetic operators).
#[must_use]
pub fn count_operators(tokens: &[sqlparser::tokenizer::TokenWithSpan]) -> usize {
    tokens.iter().filter(|t| is_operator_token(&t.token)).count()
}

/// The longest expression text [`parse_expr`] accepts, in bytes (1 MiB).
pub const MAX_EXPR_BYTES: usize = 1 << 20;

/// The longest filter text the daemon re-parses when it rendered that text itself
/// ([`parse_expr_within`]), in bytes (8 MiB). Normalised text can be longer than what a
/// client sent within [`MAX_EXPR_BYTES`] (`IN (1,2)` renders as `IN (1, 2)`; a number
/// renders in full): the client's limit applies to the client's bytes, this one bounds the
/// work a forged ticket can ask for.
pub const MAX_RENDERED_EXPR_BYTES: usize = 8 << 20;

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
pub fn dismantle(mut e: sql::Expr) {
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

// ---------------------------------------------------------------------------------------
// Lowering: sqlparser's AST to Expr
// ---------------------------------------------------------------------------------------

/// One side of a comparison.
enum Operand {
    Field(FieldPath),
    /// `CAST(field AS TIMESTAMP)`: the field compared as an instant, so a string literal on
    /// the other side is read as a timestamp.
    TimeField(FieldPath),
    /// `lower(field)`, `upper(field)`, `length(field)`.
    Applied(super::Function, FieldPath),
    /// `path[*].element`: each element of an array (only `=` compares it).
    Elements(FieldPath, Option<FieldPath>),
    /// `date_trunc('hour', field)`: the field's instant truncated to a unit.
    Truncated(crate::timestamp::TruncUnit, FieldPath),
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
                if let Operand::Applied(function, path) = self.operand(expr)? {
                    // `f(a) IN (l1, l2)` is `f(a) = l1 OR f(a) = l2` (NOT IN: its negation).
                    let terms = list
                        .iter()
                        .map(|item| {
                            let value = self.literal_of(item, construct)?;
                            Ok(Expr::Function { function, path: path.clone(), op: CmpOp::Eq, value })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let any = Expr::Or(terms);
                    return Ok(if *negated { Expr::Not(Box::new(any)) } else { any });
                }
                let (path, as_time) = self.compared_field(expr, construct)?;
                let list = list
                    .iter()
                    .map(|item| self.literal_of(item, construct).and_then(|l| if as_time { self.instant(l, item) } else { Ok(l) }))
                    .collect::<Result<_>>()?;
                Ok(Expr::In { path, list, negated: *negated })
            }
            sql::Expr::Between { expr, negated, low, high } => {
                let construct = if *negated { "NOT BETWEEN" } else { "BETWEEN" };
                let (path, as_time) = self.compared_field(expr, construct)?;
                let (mut low_value, mut high_value) = (self.literal_of(low, construct)?, self.literal_of(high, construct)?);
                if as_time {
                    (low_value, high_value) = (self.instant(low_value, low)?, self.instant(high_value, high)?);
                }
                let (low, high) = (low_value, high_value);
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
                self.like(*negated, false, expr, pattern, escape_char.as_deref())
            }
            sql::Expr::ILike { negated, any, expr, pattern, escape_char } => {
                if *any {
                    return Err(self.unsupported("ILIKE ANY is not supported", e));
                }
                self.like(*negated, true, expr, pattern, escape_char.as_deref())
            }
            sql::Expr::Value(v) => match &v.value {
                Value::Boolean(b) => Ok(Expr::Const(*b)),
                _ => Err(self.unsupported("a literal is not a condition (compare a field with it)", e)),
            },
            sql::Expr::Function(_) if call(e).is_some_and(|(name, _)| name == "array_contains") => self.array_contains(e),
            sql::Expr::Function(_) if call(e).is_some_and(|(name, _)| name == "starts_with" || name == "startswith") => {
                self.starts_with(e)
            }
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
            (Operand::TimeField(path), Operand::Literal(value)) => {
                Ok(Expr::Cmp { path, op, value: self.instant(value, right)? })
            }
            (Operand::Literal(value), Operand::TimeField(path)) => {
                Ok(Expr::Cmp { path, op: op.flipped(), value: self.instant(value, left)? })
            }
            (Operand::Applied(function, path), Operand::Literal(value)) => Ok(Expr::Function { function, path, op, value }),
            (Operand::Literal(value), Operand::Applied(function, path)) => {
                Ok(Expr::Function { function, path, op: op.flipped(), value })
            }
            (Operand::Elements(path, element), Operand::Literal(value)) | (Operand::Literal(value), Operand::Elements(path, element)) => {
                if op == CmpOp::Eq {
                    Ok(Expr::Contains { path, element, value, negated: false })
                } else {
                    Err(self.unsupported("`[*]` compares with `=` only (some element equals the literal)", whole))
                }
            }
            (Operand::Truncated(unit, path), Operand::Literal(value)) => self.truncated(unit, path, op, value, right),
            (Operand::Literal(value), Operand::Truncated(unit, path)) => self.truncated(unit, path, op.flipped(), value, left),
            (Operand::Field(_) | Operand::TimeField(_) | Operand::Applied(..) | Operand::Elements(..) | Operand::Truncated(..), _) => {
                Err(self.unsupported("comparison between two fields is not supported", whole))
            }
            (Operand::Literal(_), Operand::Literal(_)) => {
                Err(self.unsupported("comparison between two literals is not supported", whole))
            }
        }
    }

    /// `expr [NOT] LIKE|ILIKE pattern [ESCAPE c]`, the pattern a string literal: a prefix
    /// pattern (`'abc%'`) is [`Expr::Like`] (PSFs and columnar statistics use it), one without
    /// wildcards an equality, any other [`Expr::Pattern`]; `ILIKE` is always a pattern, its
    /// pattern lowercased.
    fn like(&self, negated: bool, case_insensitive: bool, expr: &sql::Expr, pattern: &sql::Expr, escape: Option<&sql::Expr>) -> Result<Expr> {
        let construct = match (negated, case_insensitive) {
            (false, false) => "LIKE",
            (true, false) => "NOT LIKE",
            (false, true) => "ILIKE",
            (true, true) => "NOT ILIKE",
        };
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
        let general = |text: &str| {
            like_pieces(text, escape)
                .ok_or_else(|| self.unsupported(&format!("the pattern of {construct} ends with its escape character"), pattern))
        };
        if case_insensitive {
            let pieces = general(&text.to_lowercase())?;
            return Ok(Expr::Pattern { path, pieces, case_insensitive, negated });
        }
        let Some((prefix, wildcard)) = like_prefix(&text, escape) else {
            return Ok(Expr::Pattern { path, pieces: general(&text)?, case_insensitive, negated });
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
        if let Some(field) = timestamp_cast(e) {
            return self.field_of(field, "CAST(… AS TIMESTAMP)").map(Operand::TimeField);
        }
        if let Some((name, args)) = call(e).filter(|(name, _)| name == "date_trunc") {
            let [unit, field] = args.as_slice() else {
                return Err(self.unsupported(&format!("{name}() takes a unit and a field: date_trunc('hour', created_at)"), e));
            };
            let unit = match self.literal_of(unit, "date_trunc()")? {
                Literal::Str(name) => crate::timestamp::TruncUnit::named(&name).ok_or_else(|| {
                    self.unsupported(
                        "date_trunc() takes 'microsecond', 'millisecond', 'second', 'minute', 'hour', 'day', 'week', 'month', 'quarter' or 'year' (UTC)",
                        unit,
                    )
                })?,
                _ => return Err(self.unsupported("date_trunc() takes its unit as a string", unit)),
            };
            return self.field_of(field, "date_trunc()").map(|path| Operand::Truncated(unit, path));
        }
        // `substr(f, 2, 3)`, `substring(f, 2)`, `SUBSTRING(f FROM 2 FOR 3)`: sqlparser reads
        // every spelling as one node.
        if let sql::Expr::Substring { expr, substring_from, substring_for, .. } = e {
            let path = self.field_of(expr, "substr()")?;
            let Some(start) = substring_from else {
                return Err(self.unsupported("substr() takes a field, a start and an optional length: substr(repo.name, 1, 6)", e));
            };
            let start = self.position(start, "substr()")?;
            let length = substring_for.as_deref().map(|l| self.position(l, "substr()")).transpose()?;
            return Ok(Operand::Applied(super::Function::Substr { start, length }, path));
        }
        if let Some((name, args)) = call(e) {
            let Some(function) = super::Function::named(&name) else {
                return Err(self.unsupported(
                    &format!("function `{name}` is not supported (lower, upper, length, substr, starts_with, date_trunc, array_contains are)"),
                    e,
                ));
            };
            let [arg] = args.as_slice() else {
                return Err(self.unsupported(&format!("{name}() takes one field"), e));
            };
            return self.field_of(arg, &format!("{name}()")).map(|path| Operand::Applied(function, path));
        }
        if let Some((path, element)) = self.elements(e)? {
            return Ok(Operand::Elements(path, element));
        }
        match e {
            sql::Expr::Nested(inner) => self.operand(inner),
            sql::Expr::Value(_) | sql::Expr::UnaryOp { .. } | sql::Expr::TypedString(_) | sql::Expr::Cast { .. }
                if is_literal_syntax(e) =>
            {
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

    /// A whole-number argument of `construct` (a position or a length).
    fn position(&self, e: &sql::Expr, construct: &str) -> Result<i64> {
        match self.literal_of(e, construct)? {
            Literal::Int(n) => Ok(n),
            _ => Err(self.unsupported(&format!("{construct} takes whole numbers for its start and length"), e)),
        }
    }

    /// A dotted path; `construct` names what needs it, for the error message.
    fn field_of(&self, e: &sql::Expr, construct: &str) -> Result<FieldPath> {
        let segments: Vec<String> = match e {
            sql::Expr::Nested(inner) => return self.field_of(inner, construct),
            sql::Expr::Identifier(ident) => vec![ident.value.clone()],
            sql::Expr::CompoundIdentifier(idents) if idents.iter().any(|i| i.value == ELEMENTS) => {
                return Err(self.unsupported(
                    &format!("{construct} cannot take `[*]` (use array_contains(path[*].field, literal) or path[*].field = literal)"),
                    e,
                ))
            }
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

    /// `date_trunc(unit, path) op T` as comparisons of the field's instant itself: with
    /// `⌊T⌋` the unit's boundary at or below T, `next(b)` the boundary after `b`, and `⌈T⌉`
    /// T when aligned else `next(⌊T⌋)`: `trunc >= T` is `f >= ⌈T⌉`, `trunc < T` is
    /// `f < ⌈T⌉`, `trunc > T` is `f >= next(⌊T⌋)`, `trunc <= T` is `f < next(⌊T⌋)`,
    /// `trunc = T` is `T <= f < next(T)` for an aligned T (else never true), `<>` its
    /// negation — exact for fixed widths and calendar units alike (truncation is a
    /// non-decreasing step function), and served by timestamp PSFs and the columnar tier's
    /// instants like any timestamp range. Unknown as before for values naming no instant.
    fn truncated(&self, unit: crate::timestamp::TruncUnit, path: FieldPath, op: CmpOp, value: Literal, e: &sql::Expr) -> Result<Expr> {
        let Literal::Timestamp(t) = self.instant(value, e)? else {
            // NULL: unknown whatever the field holds.
            return Ok(Expr::Cmp { path, op, value: Literal::Null });
        };
        let floor = unit.floor(t);
        let after = unit.next(floor);
        let ceil = if floor == t { t } else { after };
        let at = |op: CmpOp, instant: i64| Expr::Cmp { path: path.clone(), op, value: Literal::Timestamp(instant) };
        Ok(match op {
            CmpOp::GtEq => at(CmpOp::GtEq, ceil),
            CmpOp::Lt => at(CmpOp::Lt, ceil),
            CmpOp::Gt => at(CmpOp::GtEq, after),
            CmpOp::LtEq => at(CmpOp::Lt, after),
            // Unaligned: no truncated instant equals T; `f >= T AND f < T` is false for every
            // instant and unknown for the rest, as the equality is.
            CmpOp::Eq if floor != t => Expr::And(vec![at(CmpOp::GtEq, t), at(CmpOp::Lt, t)]),
            CmpOp::Eq => Expr::And(vec![at(CmpOp::GtEq, t), at(CmpOp::Lt, after)]),
            CmpOp::NotEq if floor != t => Expr::Or(vec![at(CmpOp::GtEq, t), at(CmpOp::Lt, t)]),
            CmpOp::NotEq => Expr::Or(vec![at(CmpOp::Lt, t), at(CmpOp::GtEq, after)]),
        })
    }

    /// `starts_with(path, 'prefix')`: `path LIKE 'prefix%'` with the prefix taken literally.
    fn starts_with(&self, e: &sql::Expr) -> Result<Expr> {
        let Some((_, args)) = call(e) else { return Err(self.unsupported_construct(e)) };
        let [field, prefix] = args.as_slice() else {
            return Err(self.unsupported("starts_with() takes a field and a string", e));
        };
        let path = self.field_of(field, "starts_with()")?;
        match self.literal_of(prefix, "starts_with()")? {
            Literal::Str(prefix) => Ok(Expr::Like { path, prefix, negated: false }),
            _ => Err(self.unsupported("starts_with() takes a string prefix", prefix)),
        }
    }

    /// `array_contains(path, literal)` (`path` may be `array[*].element`).
    fn array_contains(&self, e: &sql::Expr) -> Result<Expr> {
        let Some((_, args)) = call(e) else { return Err(self.unsupported_construct(e)) };
        let [array, value] = args.as_slice() else {
            return Err(self.unsupported("array_contains() takes an array field and a literal", e));
        };
        let (path, element) = match self.elements(array)? {
            Some(found) => found,
            None => (self.field_of(array, "array_contains()")?, None),
        };
        Ok(Expr::Contains { path, element, value: self.literal_of(value, "array_contains()")?, negated: false })
    }

    /// `path[*]` or `path[*].element.path` (tokens rewritten by [`element_wildcards`]): the
    /// array's path and the element's, if `e` is one.
    fn elements(&self, e: &sql::Expr) -> Result<Option<(FieldPath, Option<FieldPath>)>> {
        let sql::Expr::CompoundIdentifier(idents) = e else { return Ok(None) };
        let Some(star) = idents.iter().position(|i| i.value == ELEMENTS) else { return Ok(None) };
        if idents.iter().filter(|i| i.value == ELEMENTS).count() > 1 || star == 0 {
            return Err(self.unsupported("one `[*]` is supported, after a field", e));
        }
        let at = |segments: &[sql::Ident]| {
            FieldPath::from_segments(segments.iter().map(|i| i.value.clone()))
                .map_err(|err| self.error(format!("{err}{}", self.at(e.span()))))
        };
        let element = if star + 1 < idents.len() { Some(at(&idents[star + 1..])?) } else { None };
        Ok(Some((at(&idents[..star])?, element)))
    }

    /// The field of `IN`/`BETWEEN`, and whether it is `CAST(field AS TIMESTAMP)` (its
    /// literals then read as timestamps).
    fn compared_field(&self, e: &sql::Expr, construct: &str) -> Result<(FieldPath, bool)> {
        match timestamp_cast(e) {
            Some(field) => Ok((self.field_of(field, construct)?, true)),
            None => Ok((self.field_of(e, construct)?, false)),
        }
    }

    /// A literal compared with `CAST(field AS TIMESTAMP)`: a timestamp as it is, a string
    /// read as one ([`parse_timestamp`]), `NULL` as it is; anything else is refused.
    fn instant(&self, value: Literal, e: &sql::Expr) -> Result<Literal> {
        match value {
            Literal::Str(text) => parse_timestamp(&text).map(Literal::Timestamp).ok_or_else(|| self.not_a_timestamp(&text, e)),
            Literal::Timestamp(_) | Literal::Null => Ok(value),
            _ => Err(self.unsupported("a timestamp compares with a TIMESTAMP literal or a string naming an instant", e)),
        }
    }

    fn not_a_timestamp(&self, text: &str, e: &sql::Expr) -> Error {
        self.unsupported(
            &format!("'{}' is not a timestamp (RFC 3339, e.g. '2021-07-21T10:00:00Z', '2021-07-21 10:00:00', '2021-07-21')", echo(text)),
            e,
        )
    }

    /// A literal; `construct` names what needs it, for the error message.
    fn literal_of(&self, e: &sql::Expr, construct: &str) -> Result<Literal> {
        match e {
            sql::Expr::Nested(inner) => self.literal_of(inner, construct),
            sql::Expr::TypedString(typed) if is_timestamp_type(&typed.data_type) => {
                let text = match &typed.value.value {
                    Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.as_str(),
                    _ => return Err(self.unsupported("a TIMESTAMP literal takes a quoted string", e)),
                };
                parse_timestamp(text).map(Literal::Timestamp).ok_or_else(|| self.not_a_timestamp(text, e))
            }
            sql::Expr::Cast { expr, data_type, format: None, .. } if is_timestamp_type(data_type) && is_literal_syntax(expr) => {
                match self.literal_of(expr, construct)? {
                    Literal::Int(seconds) => Ok(EpochUnit::S.at(seconds as f64).map_or(Literal::Null, Literal::Timestamp)),
                    Literal::Float(seconds) => Ok(EpochUnit::S.at(seconds).map_or(Literal::Null, Literal::Timestamp)),
                    other => self.instant(other, expr),
                }
            }
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
            sql::Expr::TypedString(_) | sql::Expr::Cast { .. } => Err(self.unsupported_construct(e)),
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
            sql::Expr::Cast { data_type: sql::DataType::Date, .. } => {
                "CAST(… AS DATE) is not supported (compare with TIMESTAMPs: `f >= TIMESTAMP '2021-07-21' AND f < TIMESTAMP '2021-07-22'`)"
            }
            sql::Expr::Cast { .. } | sql::Expr::Convert { .. } => {
                "casts are not supported, but for CAST(field AS TIMESTAMP) compared with a literal"
            }
            sql::Expr::TypedString(_) => "typed literals are not supported, but for TIMESTAMP and DATE '…'",
            sql::Expr::Interval(_) => "intervals are not supported",
            sql::Expr::IsTrue(_) | sql::Expr::IsNotTrue(_) | sql::Expr::IsFalse(_) | sql::Expr::IsNotFalse(_) => {
                "IS [NOT] TRUE/FALSE is not supported (use the field or `field = TRUE`)"
            }
            sql::Expr::IsUnknown(_) | sql::Expr::IsNotUnknown(_) => "IS [NOT] UNKNOWN is not supported",
            sql::Expr::IsDistinctFrom(..) | sql::Expr::IsNotDistinctFrom(..) => {
                "IS [NOT] DISTINCT FROM is not supported"
            }
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

/// The path segment that stands for `[*]` between the tokenizer and the parser (sqlparser
/// has no `[*]`): a quoted identifier no JSON key of a filter can spell (a control character).
const ELEMENTS: &str = "\u{1}[*]";

/// `a[*].b` rewritten as `a."\u{1}[*]".b` in a token stream, so that sqlparser reads it as
/// a compound identifier whose marked segment [`Lowering::elements`] finds. Apply to the
/// tokens of any text whose conditions are lowered ([`parse_expr`] does).
#[must_use]
pub fn element_wildcards(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let star = matches!(
            (&tokens[i].token, tokens.get(i + 1).map(|t| &t.token), tokens.get(i + 2).map(|t| &t.token)),
            (Token::LBracket, Some(Token::Mul), Some(Token::RBracket))
        );
        if star && out.last().is_some_and(|t| matches!(t.token, Token::Word(_) | Token::RBracket)) {
            let span = tokens[i].span;
            out.push(TokenWithSpan { token: Token::Period, span });
            out.push(TokenWithSpan { token: Token::make_word(ELEMENTS, Some('"')), span });
            i += 3;
        } else {
            out.push(tokens[i].clone());
            i += 1;
        }
    }
    out
}

/// The lowercased name and the plain arguments of a function call `name(a, b)` (no
/// `DISTINCT`, `FILTER`, `OVER`, named arguments or wildcards), if `e` is one.
fn call(e: &sql::Expr) -> Option<(String, Vec<&sql::Expr>)> {
    let sql::Expr::Function(function) = e else { return None };
    let sql::FunctionArguments::List(list) = &function.args else { return None };
    if list.duplicate_treatment.is_some()
        || !list.clauses.is_empty()
        || function.filter.is_some()
        || function.over.is_some()
        || !function.within_group.is_empty()
        || !matches!(function.parameters, sql::FunctionArguments::None)
    {
        return None;
    }
    let [name] = function.name.0.as_slice() else { return None };
    let name = name.as_ident()?.value.to_ascii_lowercase();
    let args = list
        .args
        .iter()
        .map(|arg| match arg {
            sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(expr)) => Some(expr),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((name, args))
}

/// `DATE`, `TIMESTAMP` (with or without a time zone), `DATETIME`: the types whose literals
/// and casts read as [`Literal::Timestamp`].
fn is_timestamp_type(data_type: &sql::DataType) -> bool {
    matches!(
        data_type,
        sql::DataType::Date | sql::DataType::Timestamp(..) | sql::DataType::TimestampNtz(_) | sql::DataType::Datetime(_)
    )
}

/// The field `e` casts to a timestamp (`CAST(created_at AS TIMESTAMP)`, `created_at::timestamp`),
/// if it is such a cast of something that is not a literal.
fn timestamp_cast(e: &sql::Expr) -> Option<&sql::Expr> {
    match e {
        sql::Expr::Nested(inner) => timestamp_cast(inner),
        sql::Expr::Cast { expr, data_type: sql::DataType::Timestamp(..) | sql::DataType::TimestampNtz(_) | sql::DataType::Datetime(_), format: None, .. }
            if !is_literal_syntax(expr) =>
        {
            Some(expr)
        }
        _ => None,
    }
}

fn is_literal_syntax(e: &sql::Expr) -> bool {
    match e {
        sql::Expr::Value(_) => true,
        sql::Expr::Nested(inner) => is_literal_syntax(inner),
        sql::Expr::TypedString(_) => true,
        sql::Expr::Cast { expr, .. } => is_literal_syntax(expr),
        sql::Expr::UnaryOp { op: UnaryOperator::Minus | UnaryOperator::Plus, expr } => {
            matches!(expr.as_ref(), sql::Expr::Value(sql::ValueWithSpan { value: Value::Number(..), .. }))
        }
        _ => false,
    }
}

/// Splits a `LIKE` pattern into its literal prefix and whether it ended in `%`
/// (`'ab%'` → `("ab", true)`, `'ab'` → `("ab", false)`; trailing `%%` count as one).
/// `None` when a `%` is followed by anything but `%`, or when `_` is used unescaped.
/// The pieces of a LIKE pattern: `%`, `_`, and characters (an escaped `%` or `_` is a
/// character). `None` when the pattern ends with the escape character.
fn like_pieces(pattern: &str, escape: Option<char>) -> Option<Vec<super::LikePiece>> {
    let mut pieces = Vec::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        pieces.push(match c {
            c if Some(c) == escape => super::LikePiece::Char(chars.next()?),
            '%' => super::LikePiece::Many,
            '_' => super::LikePiece::One,
            c => super::LikePiece::Char(c),
        });
    }
    Some(pieces)
}

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
