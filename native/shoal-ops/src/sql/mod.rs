//! SQL queries (Arrow Flight SQL's `CommandStatementQuery` and prepared statements) onto
//! shoal's query command: `SELECT <paths | * | count/min/max> FROM <table> [WHERE <filter>]
//! [ORDER BY …] [LIMIT n [OFFSET m]]` and `EXPLAIN <that>` (`docs/sql.md`).
//!
//! The `WHERE` clause is the filter language (`docs/protocol.md`, "Filters"), lowered by the
//! engine's own rules, so the planner maps it onto PSFs, columnar and full scans exactly as
//! for a JSON command. What the scan does not do itself — `ORDER BY`, `OFFSET`, column
//! aliases — is done on its result by a [`Shaper`]; anything else (`GROUP BY`, joins,
//! `DISTINCT`, `sum`, expressions in the select list…) is `INVALID_ARGUMENT` naming the
//! construct: never a wrong answer.
//!
//! Bounds: the statement is held to the filter language's limits ([`MAX_EXPR_BYTES`],
//! [`MAX_EXPR_OPERATORS`], sqlparser's nesting limit) before it is parsed, and its syntax
//! tree is taken apart without deep recursion, so no statement can exhaust a thread's stack.

use serde::{Deserialize, Serialize};
use shoal_core::psf::expr::{count_operators, dismantle, echo, lower_condition, lower_field, MAX_EXPR_BYTES, MAX_EXPR_OPERATORS};
use shoal_core::psf::Literal;
use sqlparser::ast::{self as sql, Statement};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use crate::error::OpsError;
use crate::protocol::{AggregateSpec, QueryCommand};

/// The one catalog Flight SQL clients see (`GetCatalogs`); a query may name a table
/// `shoal.public.events`, `public.events` or `events`.
pub const CATALOG_NAME: &str = "shoal";

/// The one schema (namespace) of [`CATALOG_NAME`] (`GetDbSchemas`).
pub const SCHEMA_NAME: &str = "public";

/// The most bytes an `ORDER BY` without `LIMIT` holds in memory to sort a result (512
/// MiB); beyond it the query is `RESOURCE_EXHAUSTED`, naming the remedy.
pub const MAX_SORT_BYTES: usize = 512 << 20;

/// The most parameters a statement takes (the highest placeholder number: `$4096`).
pub const MAX_PARAMETERS: usize = MAX_EXPR_OPERATORS;

/// A parsed SQL statement: the query command it runs and what is done on its result.
#[derive(Debug, Clone)]
pub struct SqlStatement {
    /// `EXPLAIN <query>`: answer with the plan instead of the rows.
    pub explain: bool,
    /// The query command (table, filter, columns or aggregates, limit) the scan runs.
    pub command: QueryCommand,
    /// What is done on the scan's result: sort, offset, limit, projection and names.
    pub shape: ResultShape,
}

/// What a [`Shaper`] does on a scan's result, in this order: group by `group_by`, sort by `order_by`, skip
/// `offset` rows, keep at most `limit`, then keep (and rename) the `projection`'s columns.
/// Serialised into Flight SQL tickets, so the endpoint that runs the scan shapes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultShape {
    /// `GROUP BY` (or `SELECT DISTINCT`): the scan's rows are grouped first, and the other
    /// steps apply to the groups. (Aggregates without `GROUP BY` are the scan's own.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<Grouping>,
    /// The output columns: (name of the scan's column, output name), in order. `None`:
    /// every column of the scan, as named (`SELECT *`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Vec<(String, String)>>,
    /// Sort keys over the scan's columns (by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order_by: Vec<SortKey>,
    /// Rows skipped (after sorting).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: usize,
    /// At most this many rows (after the offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// `HAVING`: the groups kept (after grouping, before the sort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub having: Option<Having>,
}

/// `HAVING`'s condition over the groups: the filter language's text, and for each path it
/// names, the grouping's column it reads (a group key, an aggregate, or a select-list alias
/// of either).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Having {
    /// The condition (filter language), over the paths of `columns`.
    pub filter: String,
    /// (a path as the filter names it, the grouping's column).
    pub columns: Vec<(String, String)>,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl ResultShape {
    /// Whether the shape needs the whole result in one place (a sort or an offset): the
    /// query is then planned as one endpoint.
    #[must_use]
    pub fn needs_whole_result(&self) -> bool {
        !self.order_by.is_empty() || self.offset > 0 || self.group_by.is_some()
    }
}

/// One `ORDER BY` key: a column of the scan's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SortKey {
    /// The scan's column (its name: the dotted path, or the aggregate's name).
    pub column: String,
    /// `DESC`.
    pub descending: bool,
    /// `NULLS FIRST` (SQL's default: nulls last ascending, first descending).
    pub nulls_first: bool,
}

/// How the `?` (or `$n`) placeholders of a statement are filled.
#[derive(Debug, Clone, Copy)]
pub enum Parameters<'a> {
    /// With these values, in order (`$n` is the n-th); a placeholder without one is an error.
    Bound(&'a [Literal]),
    /// With `NULL` each (to check a prepared statement and find its result schema before
    /// values are bound).
    Unbound,
}

/// The placeholders (`?`, `?n`, `$n`) in a statement: how many values it needs.
///
/// # Errors
/// `INVALID_ARGUMENT` when the text does not tokenize or passes the size limit.
pub fn count_placeholders(text: &str) -> Result<usize, OpsError> {
    let tokens = tokenize(text)?;
    let numbers = placeholder_numbers(text, &tokens)?;
    Ok(numbers.into_iter().max().unwrap_or(0))
}

/// The value number of each placeholder among `tokens`, in order: bare `?`s count 1, 2, …;
/// `?n` and `$n` name the n-th. A statement uses one style or the other.
fn placeholder_numbers(text: &str, tokens: &[TokenWithSpan]) -> Result<Vec<usize>, OpsError> {
    let mut numbers = Vec::new();
    let (mut bare, mut numbered) = (0usize, false);
    for token in tokens {
        if let Token::Placeholder(p) = &token.token {
            if p == "?" {
                bare += 1;
                numbers.push(bare);
                continue;
            }
            match p.get(1..).and_then(|n| n.parse::<usize>().ok()) {
                Some(n) if (1..=MAX_PARAMETERS).contains(&n) => {
                    numbered = true;
                    numbers.push(n);
                }
                _ => {
                    return Err(invalid(
                        text,
                        format!("placeholder `{}`: use `?`, or `$1` … `${MAX_PARAMETERS}` (values are numbered from 1)", echo(p)),
                    ))
                }
            }
        }
    }
    if numbered && bare > 0 {
        return Err(invalid(text, "the statement mixes `?` with numbered placeholders (`$1`, `?1`): use one style"));
    }
    Ok(numbers)
}

fn tokenize(text: &str) -> Result<Vec<TokenWithSpan>, OpsError> {
    if text.len() > MAX_EXPR_BYTES {
        return Err(OpsError::invalid_argument(format!(
            "SQL statement: it is {} bytes long; the limit is {MAX_EXPR_BYTES} bytes",
            text.len()
        )));
    }
    Tokenizer::new(&GenericDialect {}, text)
        .tokenize_with_location()
        .map(shoal_core::psf::expr::element_wildcards)
        .map_err(|e| syntax_error(text, &ParserError::from(e)))
}

fn invalid(text: &str, reason: impl std::fmt::Display) -> OpsError {
    OpsError::invalid_argument(crate::protocol::bounded(format!("SQL statement {:?}: {reason}", echo(text))))
}

fn syntax_error(text: &str, error: &ParserError) -> OpsError {
    let message = match error {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m.clone(),
        ParserError::RecursionLimitExceeded => "the statement is nested too deeply".to_owned(),
    };
    invalid(text, format!("syntax error: {message}"))
}

/// The tokens of a literal value, in place of a placeholder.
fn literal_tokens(value: &Literal, span: sqlparser::tokenizer::Span) -> Vec<TokenWithSpan> {
    let at = |token: Token| TokenWithSpan { token, span };
    match value {
        Literal::Null => vec![at(Token::make_keyword("NULL"))],
        Literal::Bool(b) => vec![at(Token::make_keyword(if *b { "TRUE" } else { "FALSE" }))],
        Literal::Int(i) if *i < 0 => vec![at(Token::Minus), at(Token::Number(i.unsigned_abs().to_string(), false))],
        Literal::Int(i) => vec![at(Token::Number(i.to_string(), false))],
        Literal::Float(f) if *f < 0.0 => vec![at(Token::Minus), at(Token::Number(format!("{:?}", -f), false))],
        Literal::Float(f) => vec![at(Token::Number(format!("{f:?}"), false))],
        Literal::Str(s) => vec![at(Token::SingleQuotedString(s.clone()))],
        Literal::Timestamp(t) => vec![
            at(Token::make_keyword("TIMESTAMP")),
            at(Token::Whitespace(sqlparser::tokenizer::Whitespace::Space)),
            at(Token::SingleQuotedString(shoal_core::timestamp::format_timestamp(*t))),
        ],
    }
}

/// Parses a SQL statement into the query command it runs and the shape of its result.
///
/// Accepted: `[EXPLAIN] SELECT <items> FROM <table> [WHERE <condition>] [ORDER BY <key>
/// [ASC|DESC] [NULLS FIRST|LAST], …] [LIMIT n] [OFFSET m]`, where an item is `*`, a dotted
/// path (`actor.login`, `"actor"."login"`, `payload."a.b"`), or `count(*)`, `count(path)`,
/// `min(path)`, `max(path)`, each with an optional `AS alias` (aggregates and paths cannot
/// be mixed: there is no `GROUP BY` yet). The table may be qualified with
/// [`CATALOG_NAME`]`.`[`SCHEMA_NAME`]. A trailing `;` is allowed.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the construct for a syntax error, any other statement, an
/// unsupported clause or expression, a filter the language does not evaluate, a
/// placeholder without a value, or a statement past the size or operator limits.
pub fn parse_sql(text: &str, parameters: Parameters<'_>) -> Result<SqlStatement, OpsError> {
    let statement = parse_statement(text, parameters)?;
    let lowered = lower_statement(text, &statement);
    dismantle_statement(statement);
    lowered
}

/// True when `text` is a data-changing statement (its first word is `DELETE` or `INSERT`),
/// which a client may send as a query (DB-API's `cursor.execute`): it runs as an update then
/// ([`parse_sql_delete`], [`parse_sql_insert`]) and answers the rows it changed.
#[must_use]
pub fn is_update(text: &str) -> bool {
    starts_with_keyword(text, "delete") || is_insert(text)
}

/// True when `text` is an `INSERT` (see [`is_update`]).
#[must_use]
pub fn is_insert(text: &str) -> bool {
    starts_with_keyword(text, "insert")
}

/// True when the first word of `text` is `keyword` (any case), followed by whitespace.
fn starts_with_keyword(text: &str, keyword: &str) -> bool {
    let text = text.trim_start();
    text.get(..keyword.len()).is_some_and(|w| w.eq_ignore_ascii_case(keyword)) && text[keyword.len()..].starts_with(char::is_whitespace)
}

/// An `INSERT` statement: the table, and the records it writes as JSON texts or the query
/// whose rows it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlInsert {
    /// The table.
    pub table: String,
    /// One JSON object per row of `VALUES` (empty for `INSERT … SELECT`).
    pub records: Vec<String>,
    /// `INSERT INTO <table> SELECT …`: the `SELECT`, as SQL text (a statement [`parse_sql`]
    /// takes); each row it answers is written as a JSON object of its columns (nulls left out).
    pub select: Option<String>,
}

/// Parses `INSERT INTO <table> (<column>, …) VALUES (<literal>, …), …` — each row a record
/// of those keys (a `NULL` leaves its key out) — or `INSERT INTO <table> VALUES ('<JSON
/// object>'), …` — each row's one string the record itself. Literals are those of the
/// filter language (`NULL`, `TRUE`/`FALSE`, numbers, `'strings'`) — or `INSERT INTO <table>
/// SELECT …`, whose query is returned as text in [`SqlInsert::select`] (the caller runs it:
/// its columns name the keys; `AS` renames them). A trailing `;` is allowed.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the construct: a column list with `SELECT`, `ON CONFLICT`, `RETURNING`,
/// a row of another length than the column list, a value that is no literal, a string that
/// is not a JSON object (without a column list), or a statement past the size limits.
pub fn parse_sql_insert(text: &str) -> Result<SqlInsert, OpsError> {
    let statement = parse_statement(text, Parameters::Bound(&[]))?;
    let Statement::Insert(insert) = &statement else {
        return Err(invalid(text, "not an INSERT statement"));
    };
    if insert.or.is_some() || insert.ignore || insert.overwrite || insert.replace_into || insert.on.is_some() || insert.returning.is_some()
        || insert.output.is_some() || !insert.assignments.is_empty() || insert.partitioned.is_some() || insert.settings.is_some()
        || insert.format_clause.is_some() || insert.insert_alias.is_some()
    {
        return Err(invalid(text, "INSERT takes INTO <table> [(<columns>)] VALUES (…), … only (no ON CONFLICT, RETURNING, SET, OVERWRITE)"));
    }
    let sql::TableObject::TableName(name) = &insert.table else {
        return Err(invalid(text, "INSERT INTO takes a table name"));
    };
    let table = lower_table_name(text, name)?;
    let columns: Vec<String> = insert
        .columns
        .iter()
        .map(|c| match c.0.as_slice() {
            [part] => part.as_ident().map(|i| i.value.clone()).ok_or_else(|| invalid(text, format!("`{c}` is not a column name"))),
            _ => Err(invalid(text, format!("`{c}`: a column is one name (a key of the record)"))),
        })
        .collect::<Result<_, _>>()?;
    let Some(source) = &insert.source else { return Err(invalid(text, "INSERT needs VALUES (…)")) };
    let values = match source.body.as_ref() {
        sql::SetExpr::Values(values) => values,
        sql::SetExpr::Select(_) | sql::SetExpr::Query(_) => {
            if !columns.is_empty() {
                return Err(invalid(text, "INSERT … SELECT takes no column list: name the keys in the SELECT (SELECT a AS x, …)"));
            }
            let select = source.to_string();
            dismantle_statement(statement);
            return Ok(SqlInsert { table, records: Vec::new(), select: Some(select) });
        }
        _ => return Err(invalid(text, "INSERT takes VALUES (…), … or a SELECT")),
    };
    let mut records = Vec::with_capacity(values.rows.len());
    for (number, row) in values.rows.iter().enumerate() {
        let literals = row
            .iter()
            .map(|e| shoal_core::psf::expr::lower_literal(e, text, "VALUES").map_err(|err| engine_error(text, &err)))
            .collect::<Result<Vec<_>, _>>()?;
        if columns.is_empty() {
            let [Literal::Str(json)] = literals.as_slice() else {
                return Err(invalid(
                    text,
                    format!("row {}: without a column list a row is one string, the record's JSON (or name the columns: INSERT INTO t (a, b) VALUES (1, 'x'))", number + 1),
                ));
            };
            match serde_json::from_str::<serde_json::Value>(json) {
                Ok(serde_json::Value::Object(_)) => records.push(json.clone()),
                Ok(_) => return Err(invalid(text, format!("row {}: the string is JSON but not an object", number + 1))),
                Err(e) => return Err(invalid(text, format!("row {}: the string is not JSON ({e})", number + 1))),
            }
            continue;
        }
        if literals.len() != columns.len() {
            return Err(invalid(text, format!("row {} has {} values for {} columns", number + 1, literals.len(), columns.len())));
        }
        let mut record = serde_json::Map::new();
        for (column, literal) in columns.iter().zip(literals) {
            let value = match literal {
                Literal::Null => continue,
                Literal::Bool(b) => serde_json::Value::Bool(b),
                Literal::Int(i) => serde_json::Value::from(i),
                Literal::Float(f) => serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number),
                Literal::Str(s) => serde_json::Value::String(s),
                // JSON has no timestamp: the instant as RFC 3339 text, which compares as it.
                Literal::Timestamp(t) => serde_json::Value::String(shoal_core::timestamp::format_timestamp(t)),
            };
            record.insert(column.clone(), value);
        }
        records.push(serde_json::Value::Object(record).to_string());
    }
    dismantle_statement(statement);
    Ok(SqlInsert { table, records, select: None })
}

/// A `DELETE` statement (Flight SQL's `CommandStatementUpdate`): the `delete` action's
/// table and filter (SQL's `DELETE FROM t WHERE …` on a keyed table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlDelete {
    /// The table.
    pub table: String,
    /// The `WHERE` condition in the filter language (`None`: every row).
    pub filter: Option<String>,
}

/// Parses and checks a data-changing statement. Accepted: `DELETE FROM <table> [WHERE
/// <condition>]`, the condition as in [`parse_sql`] (the `delete` action then deletes the
/// matching rows of a keyed table). A trailing `;` is allowed.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the construct: a syntax error, any other statement (`UPDATE`
/// and `INSERT` name what to use instead), `USING`, `RETURNING`, `ORDER BY`, `LIMIT`, a
/// multi-table delete, or a condition the filter language does not evaluate.
pub fn parse_sql_delete(text: &str, parameters: Parameters<'_>) -> Result<SqlDelete, OpsError> {
    let statement = parse_statement(text, parameters)?;
    let lowered = lower_delete(text, &statement);
    dismantle_statement(statement);
    lowered
}

fn lower_delete(text: &str, statement: &Statement) -> Result<SqlDelete, OpsError> {
    let delete = match statement {
        Statement::Delete(delete) => delete,
        Statement::Insert(_) => {
            return Err(invalid(text, "INSERT is not supported: write records with DoPut or bulk ingest (adbc_ingest); in a keyed table they are upserts"))
        }
        Statement::Update(_) => {
            return Err(invalid(
                text,
                "UPDATE is not supported: write the new version of each row (an upsert by key), or a JSON merge patch with the op column",
            ))
        }
        other => return Err(invalid(text, format!("only DELETE changes data here, not `{}`", statement_kind(other)))),
    };
    if !delete.tables.is_empty() || delete.using.is_some() {
        return Err(invalid(text, "DELETE reads one table (no multi-table delete, no USING)"));
    }
    if delete.returning.is_some() || delete.output.is_some() || !delete.order_by.is_empty() || delete.limit.is_some() {
        return Err(invalid(text, "RETURNING, OUTPUT, ORDER BY and LIMIT are not supported in DELETE"));
    }
    let (sql::FromTable::WithFromKeyword(from) | sql::FromTable::WithoutKeyword(from)) = &delete.from;
    let table = lower_table(text, from)?;
    let filter = delete.selection.as_ref().map(|condition| lower_condition(condition, text)).transpose().map_err(|e| engine_error(text, &e))?;
    Ok(SqlDelete { table, filter: filter.map(|f| f.to_string()) })
}

/// Tokenizes, checks the limits, binds the placeholders and parses one statement.
fn parse_statement(text: &str, parameters: Parameters<'_>) -> Result<Statement, OpsError> {
    let tokens = tokenize(text)?;
    let operators = count_operators(&tokens);
    if operators > MAX_EXPR_OPERATORS {
        return Err(invalid(
            text,
            format!(
                "the statement has {operators} operators (AND, OR, NOT, comparisons, arithmetic); the limit is \
                 {MAX_EXPR_OPERATORS} (a list of values to match is one `IN (...)`, which has no such limit)"
            ),
        ));
    }
    let tokens = bind_placeholders(text, tokens, parameters)?;
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(tokens);
    let statement = parser.parse_statement().map_err(|e| syntax_error(text, &e))?;
    let _ = parser.consume_token(&Token::SemiColon);
    let next = parser.peek_token();
    if next.token != Token::EOF {
        dismantle_statement(statement);
        return Err(invalid(text, format!("unexpected `{}` after the end of the statement", next.token)));
    }
    Ok(statement)
}

fn bind_placeholders(text: &str, tokens: Vec<TokenWithSpan>, parameters: Parameters<'_>) -> Result<Vec<TokenWithSpan>, OpsError> {
    let mut numbers = placeholder_numbers(text, &tokens)?.into_iter();
    let mut bound = Vec::with_capacity(tokens.len());
    for token in tokens {
        let Token::Placeholder(placeholder) = &token.token else {
            bound.push(token);
            continue;
        };
        let number = numbers.next().unwrap_or(0);
        let value = match parameters {
            Parameters::Unbound => &Literal::Null,
            Parameters::Bound(values) => values.get(number.wrapping_sub(1)).ok_or_else(|| {
                invalid(text, format!("parameter {number} (`{placeholder}`) has no value: {} were bound", values.len()))
            })?,
        };
        bound.extend(literal_tokens(value, token.span));
    }
    Ok(bound)
}

/// Drops a statement's syntax tree without deep recursion (its `WHERE` clause may be a
/// chain of thousands of operators).
fn dismantle_statement(statement: Statement) {
    let query = match statement {
        Statement::Query(query) => query,
        Statement::Explain { statement, .. } => return dismantle_statement(*statement),
        Statement::Delete(mut delete) => {
            if let Some(selection) = delete.selection.take() {
                dismantle(selection);
            }
            return;
        }
        _ => return,
    };
    let mut query = *query;
    if let sql::SetExpr::Select(select) = query.body.as_mut() {
        if let Some(selection) = select.selection.take() {
            dismantle(selection);
        }
    }
}

fn lower_statement(text: &str, statement: &Statement) -> Result<SqlStatement, OpsError> {
    match statement {
        Statement::Query(query) => lower_query(text, query, false),
        Statement::Explain { statement, analyze, .. } => match statement.as_ref() {
            Statement::Query(query) if !analyze => lower_query(text, query, true),
            Statement::Query(_) => Err(invalid(text, "EXPLAIN ANALYZE is not supported (EXPLAIN shows the plan)")),
            _ => Err(invalid(text, "EXPLAIN takes a SELECT query")),
        },
        Statement::Delete(_) => Err(invalid(
            text,
            "only SELECT queries (and EXPLAIN SELECT) are supported as queries; DELETE runs as an update statement \
             (Flight SQL's CommandStatementUpdate: JDBC's executeUpdate, ADBC's execute_update)",
        )),
        other => Err(invalid(
            text,
            format!(
                "only SELECT queries (and EXPLAIN SELECT) are supported, not `{}`; write records with DoPut or \
                 bulk ingest (adbc_ingest)",
                statement_kind(other)
            ),
        )),
    }
}

/// The first words of a statement, to name it in an error.
fn statement_kind(statement: &Statement) -> String {
    let printed = statement.to_string();
    printed.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

fn lower_query(text: &str, query: &sql::Query, explain: bool) -> Result<SqlStatement, OpsError> {
    let refuse = |construct: &str| Err(invalid(text, format!("{construct} is not supported")));
    if query.with.is_some() {
        return refuse("WITH");
    }
    if query.fetch.is_some() {
        return refuse("FETCH (use LIMIT)");
    }
    if !query.locks.is_empty() || query.for_clause.is_some() || query.settings.is_some() || query.format_clause.is_some() {
        return refuse("a locking, FOR, SETTINGS or FORMAT clause");
    }
    if !query.pipe_operators.is_empty() {
        return refuse("a pipe operator");
    }
    let select = match query.body.as_ref() {
        sql::SetExpr::Select(select) => select,
        sql::SetExpr::Query(_) => return refuse("a parenthesised query"),
        sql::SetExpr::SetOperation { op, .. } => return refuse(&format!("{op}")),
        _ => return refuse("this kind of query (SELECT … FROM <table> is)"),
    };
    let table = lower_from(text, select)?;
    let distinct = match &select.distinct {
        None | Some(sql::Distinct::All) => false,
        Some(sql::Distinct::Distinct) => true,
        Some(sql::Distinct::On(_)) => return refuse("DISTINCT ON"),
    };
    if select.top.is_some() {
        return refuse("TOP (use LIMIT)");
    }
    if select.into.is_some() {
        return refuse("SELECT INTO");
    }
    let group_keys = lower_group_by(text, &select.group_by)?;
    if distinct && !group_keys.is_empty() {
        return refuse("SELECT DISTINCT with GROUP BY");
    }
    if select.prewhere.is_some()
        || select.qualify.is_some()
        || !select.named_window.is_empty()
        || !select.lateral_views.is_empty()
        || !select.connect_by.is_empty()
        || !select.cluster_by.is_empty()
        || !select.distribute_by.is_empty()
        || !select.sort_by.is_empty()
        || select.exclude.is_some()
    {
        return refuse("this clause");
    }
    let filter = select.selection.as_ref().map(|condition| lower_condition(condition, text)).transpose().map_err(|e| engine_error(text, &e))?;
    let mut command = QueryCommand { table, filter: filter.map(|f| f.to_string()), ..QueryCommand::default() };
    let mut shape = ResultShape::default();
    lower_projection(text, &select.projection, group_keys, distinct, &mut command, &mut shape)?;
    if let Some(condition) = &select.having {
        lower_having(text, condition, &mut command, &mut shape)?;
    }
    if let Some(order_by) = &query.order_by {
        lower_order_by(text, order_by, &mut command, &mut shape)?;
    }
    if let Some(limit) = &query.limit_clause {
        lower_limit(text, limit, &mut shape)?;
    }
    // The scan stops at the limit unless the result must be whole first (sorted, or
    // aggregated: one row anyway).
    if shape.order_by.is_empty() && command.aggregates.is_empty() && shape.group_by.is_none() {
        command.limit = shape.limit.map(|l| l.saturating_add(shape.offset));
    }
    if shape.needs_whole_result() || !command.aggregates.is_empty() {
        command.max_endpoints = Some(1);
    }
    Ok(SqlStatement { explain, command, shape })
}

fn engine_error(text: &str, error: &shoal_core::Error) -> OpsError {
    match error {
        shoal_core::Error::InvalidExpression { reason, .. } => invalid(text, reason),
        other => OpsError::from_engine(other),
    }
}

/// The table of `FROM`: one table, optionally qualified by the catalog and schema.
fn lower_from(text: &str, select: &sql::Select) -> Result<String, OpsError> {
    lower_table(text, &select.from)
}

/// The one table of a `FROM` list, optionally qualified by the catalog and schema.
fn lower_table(text: &str, tables: &[sql::TableWithJoins]) -> Result<String, OpsError> {
    let [from] = tables else {
        return Err(invalid(text, if tables.is_empty() { "a query needs FROM <table>" } else { "a query reads one table (no joins)" }));
    };
    if !from.joins.is_empty() {
        return Err(invalid(text, "JOIN is not supported: a query reads one table"));
    }
    let sql::TableFactor::Table { name, args: None, with_hints, version: None, partitions, json_path: None, sample: None, index_hints, .. } =
        &from.relation
    else {
        return Err(invalid(text, format!("FROM takes a table name, not `{}`", echo(&from.relation.to_string()))));
    };
    if !with_hints.is_empty() || !partitions.is_empty() || !index_hints.is_empty() {
        return Err(invalid(text, "table hints and partitions are not supported"));
    }
    lower_table_name(text, name)
}

/// A table's name, optionally qualified by the catalog and schema.
fn lower_table_name(text: &str, name: &sql::ObjectName) -> Result<String, OpsError> {
    let parts = name.0.iter().map(|part| part.as_ident().map(|i| i.value.clone())).collect::<Option<Vec<_>>>();
    let Some(parts) = parts else { return Err(invalid(text, format!("`{name}` is not a table name"))) };
    match parts.as_slice() {
        [table] => Ok(table.clone()),
        [schema, table] if schema == SCHEMA_NAME => Ok(table.clone()),
        [catalog, schema, table] if catalog == CATALOG_NAME && schema == SCHEMA_NAME => Ok(table.clone()),
        _ => Err(invalid(
            text,
            format!("unknown table `{name}`: tables are `<name>`, `{SCHEMA_NAME}.<name>` or `{CATALOG_NAME}.{SCHEMA_NAME}.<name>`"),
        )),
    }
}

/// An aggregate call of the select list, or `None` when `e` is not a function call with
/// arguments (a path such as `date` may parse as a call without arguments).
fn lower_aggregate(text: &str, e: &sql::Expr) -> Result<Option<AggregateCall>, OpsError> {
    let sql::Expr::Function(function) = e else { return Ok(None) };
    let sql::FunctionArguments::List(list) = &function.args else { return Ok(None) };
    let name = function.name.to_string().to_ascii_lowercase();
    let function_kind = match name.as_str() {
        "count" => SqlAggregate::Count,
        "min" => SqlAggregate::Min,
        "max" => SqlAggregate::Max,
        "sum" => SqlAggregate::Sum,
        "avg" => SqlAggregate::Avg,
        _ => return Err(invalid(text, format!("unknown or unsupported function `{}`", echo(&e.to_string())))),
    };
    let distinct = matches!(list.duplicate_treatment, Some(sql::DuplicateTreatment::Distinct));
    if distinct && function_kind != SqlAggregate::Count {
        return Err(invalid(text, format!("`{}`: DISTINCT is supported in count(DISTINCT path) only", echo(&e.to_string()))));
    }
    let function_kind = if distinct { SqlAggregate::CountDistinct } else { function_kind };
    if matches!(list.duplicate_treatment, Some(sql::DuplicateTreatment::All))
        || !list.clauses.is_empty()
        || function.filter.is_some()
        || function.over.is_some()
        || !function.within_group.is_empty()
    {
        return Err(invalid(text, format!("`{}`: ALL, FILTER, OVER and other clauses are not supported", echo(&e.to_string()))));
    }
    let column = match list.args.as_slice() {
        [sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Wildcard)] if function_kind == SqlAggregate::Count => None,
        [sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Wildcard)] if function_kind == SqlAggregate::CountDistinct => {
            return Err(invalid(text, "count(DISTINCT *) is not supported: count(DISTINCT path)"))
        }
        [sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(arg))] => {
            Some(lower_field(arg, text, &format!("{name}()")).map_err(|e| engine_error(text, &e))?.to_string())
        }
        _ => return Err(invalid(text, format!("`{}` takes one column (count also `*`)", echo(&e.to_string())))),
    };
    Ok(Some(AggregateCall { function: function_kind, column }))
}

/// The name a `HAVING` condition gives the grouping's aggregate number `index`.
fn having_column(index: usize) -> String {
    format!("having_aggregate_{index}")
}

/// `HAVING <condition>` of a grouped query: each aggregate call in it becomes the grouping's
/// column of that aggregate (one the select list does not have is computed too), and the
/// condition is lowered like a `WHERE` over the group keys, the aggregates and the select
/// list's aliases.
///
/// # Errors
/// `INVALID_ARGUMENT`: no `GROUP BY`, a condition the filter language does not evaluate, or a
/// path that is none of those.
fn lower_having(text: &str, condition: &sql::Expr, command: &mut QueryCommand, shape: &mut ResultShape) -> Result<(), OpsError> {
    let Some(grouping) = shape.group_by.as_mut() else {
        return Err(invalid(text, "HAVING needs GROUP BY (a WHERE filters the records before any aggregate)"));
    };
    let rewritten = rewrite_having(text, condition, &mut grouping.aggregates)?;
    let expr = lower_condition(&rewritten, text).map_err(|e| engine_error(text, &e))?;
    for column in grouping.aggregates.iter().filter_map(|c| c.column.clone()) {
        if !command.columns.contains(&column) {
            command.columns.push(column);
        }
    }
    let path = |name: &str| shoal_core::FieldPath::parse(name).map(|p| p.to_string()).ok();
    let mut columns: Vec<(String, String)> = Vec::new();
    for (i, call) in grouping.aggregates.iter().enumerate() {
        columns.extend(path(&having_column(i)).map(|p| (p, call.name())));
    }
    for key in &grouping.keys {
        columns.extend(path(key).map(|p| (p, key.clone())));
    }
    for (column, output) in shape.projection.iter().flatten() {
        if let Some(alias) = path(output).filter(|a| !columns.iter().any(|(p, _)| p == a)) {
            columns.push((alias, column.clone()));
        }
    }
    if let Some(unknown) = expr.fields().iter().map(ToString::to_string).find(|f| !columns.iter().any(|(p, _)| p == f)) {
        return Err(invalid(text, format!("HAVING names `{unknown}`, which is not a GROUP BY key, an aggregate or a select-list alias")));
    }
    shape.having = Some(Having { filter: expr.to_string(), columns });
    Ok(())
}

/// `condition` with each aggregate call replaced by the name of its column in the grouping
/// ([`having_column`]), `aggregates` extended with calls it did not have.
fn rewrite_having(text: &str, condition: &sql::Expr, aggregates: &mut Vec<AggregateCall>) -> Result<sql::Expr, OpsError> {
    use sql::Expr as E;
    let mut again = |e: &sql::Expr| rewrite_having(text, e, aggregates).map(Box::new);
    Ok(match condition {
        E::Function(_) => match lower_aggregate(text, condition)? {
            Some(call) => {
                let index = match aggregates.iter().position(|c| *c == call) {
                    Some(index) => index,
                    None => {
                        aggregates.push(call);
                        aggregates.len() - 1
                    }
                };
                E::Identifier(sql::Ident::new(having_column(index)))
            }
            None => condition.clone(),
        },
        E::BinaryOp { left, op, right } => E::BinaryOp { left: again(left)?, op: op.clone(), right: again(right)? },
        E::UnaryOp { op, expr } => E::UnaryOp { op: *op, expr: again(expr)? },
        E::Nested(inner) => E::Nested(again(inner)?),
        E::IsNull(inner) => E::IsNull(again(inner)?),
        E::IsNotNull(inner) => E::IsNotNull(again(inner)?),
        E::Between { expr, negated, low, high } => E::Between { expr: again(expr)?, negated: *negated, low: low.clone(), high: high.clone() },
        E::InList { expr, list, negated } => E::InList { expr: again(expr)?, list: list.clone(), negated: *negated },
        other => other.clone(),
    })
}

/// The scan's own aggregate for a call: without `GROUP BY` every one (`count`, `min`,
/// `max`, `sum`, `avg`) is computed next to the data.
fn pushed_aggregate(call: &AggregateCall) -> Option<AggregateSpec> {
    Some(AggregateSpec { function: call.function.pushed()?, column: call.column.clone() })
}

/// The keys of `GROUP BY`: dotted paths.
fn lower_group_by(text: &str, group_by: &sql::GroupByExpr) -> Result<Vec<String>, OpsError> {
    match group_by {
        sql::GroupByExpr::All(_) => Err(invalid(text, "GROUP BY ALL is not supported: name the columns")),
        sql::GroupByExpr::Expressions(_, modifiers) if !modifiers.is_empty() => {
            Err(invalid(text, "GROUP BY modifiers (ROLLUP, CUBE, TOTALS) are not supported"))
        }
        sql::GroupByExpr::Expressions(keys, _) => {
            let mut paths: Vec<String> = Vec::new();
            for key in keys {
                let path = lower_field(key, text, "GROUP BY").map_err(|e| engine_error(text, &e))?.to_string();
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
            Ok(paths)
        }
    }
}

fn lower_projection(
    text: &str,
    items: &[sql::SelectItem],
    group_keys: Vec<String>,
    distinct: bool,
    command: &mut QueryCommand,
    shape: &mut ResultShape,
) -> Result<(), OpsError> {
    let mut projection = Vec::new();
    let mut wildcard = false;
    let mut calls: Vec<AggregateCall> = Vec::new();
    let mut paths: Vec<String> = Vec::new();
    for item in items {
        let (expr, alias) = match item {
            sql::SelectItem::Wildcard(options) => {
                if options.opt_exclude.is_some() || options.opt_except.is_some() || options.opt_replace.is_some() || options.opt_rename.is_some() || options.opt_ilike.is_some() {
                    return Err(invalid(text, "options of `*` (EXCLUDE, EXCEPT, REPLACE, RENAME) are not supported"));
                }
                wildcard = true;
                continue;
            }
            sql::SelectItem::QualifiedWildcard(..) => return Err(invalid(text, "a qualified `*` is not supported (use `*`)")),
            sql::SelectItem::UnnamedExpr(e) => (e, None),
            sql::SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            sql::SelectItem::ExprWithAliases { .. } => return Err(invalid(text, "several aliases for one item are not supported")),
        };
        let column = if let Some(call) = lower_aggregate(text, expr)? {
            let name = call.name();
            if !calls.contains(&call) {
                calls.push(call);
            }
            name
        } else {
            let path = lower_field(expr, text, "the select list").map_err(|e| engine_error(text, &e))?.to_string();
            if !paths.contains(&path) {
                paths.push(path.clone());
            }
            path
        };
        let output = alias.unwrap_or_else(|| column.clone());
        projection.push((column, output));
    }
    if wildcard && !projection.is_empty() {
        return Err(invalid(text, "`*` cannot be combined with other items in the select list"));
    }
    // SELECT DISTINCT <paths> is GROUP BY <paths> without aggregates.
    let group_keys = if distinct {
        if wildcard || !calls.is_empty() {
            return Err(invalid(text, "DISTINCT takes paths (not `*` or aggregates): SELECT DISTINCT type, actor.login FROM …"));
        }
        paths.clone()
    } else {
        group_keys
    };
    // count(DISTINCT …) is the grouping's (the scan does not compute it): without GROUP BY,
    // one group of every row.
    let distinct_count = calls.iter().any(|c| c.function == SqlAggregate::CountDistinct);
    let grouped = !group_keys.is_empty() || (distinct_count && paths.is_empty() && !wildcard);
    if grouped {
        if wildcard {
            return Err(invalid(text, "SELECT * with GROUP BY: name the group keys and aggregates"));
        }
        if let Some(path) = paths.iter().find(|p| !group_keys.contains(p)) {
            return Err(invalid(text, format!("`{path}` must be a GROUP BY key or inside an aggregate")));
        }
        // The scan returns the keys and the aggregates' columns; the shaper groups them.
        command.columns = group_keys.clone();
        for column in calls.iter().filter_map(|c| c.column.clone()) {
            if !command.columns.contains(&column) {
                command.columns.push(column);
            }
        }
        shape.group_by = Some(Grouping { keys: group_keys, aggregates: calls });
    } else if !calls.is_empty() {
        if !paths.is_empty() {
            return Err(invalid(text, "aggregates and columns cannot be mixed without GROUP BY: add GROUP BY <the columns>"));
        }
        command.aggregates = calls.iter().filter_map(pushed_aggregate).collect();
    } else {
        command.columns = paths;
    }
    if !wildcard {
        let mut seen = std::collections::HashSet::new();
        if let Some((_, name)) = projection.iter().find(|(_, name)| !seen.insert(name.clone())) {
            return Err(invalid(text, format!("two output columns are named {name:?}: give one an alias (AS)")));
        }
        shape.projection = Some(projection);
    }
    Ok(())
}

fn lower_order_by(text: &str, order_by: &sql::OrderBy, command: &mut QueryCommand, shape: &mut ResultShape) -> Result<(), OpsError> {
    if order_by.interpolate.is_some() {
        return Err(invalid(text, "INTERPOLATE is not supported"));
    }
    let sql::OrderByKind::Expressions(keys) = &order_by.kind else {
        return Err(invalid(text, "ORDER BY ALL is not supported: name the columns"));
    };
    for key in keys {
        if key.with_fill.is_some() {
            return Err(invalid(text, "WITH FILL is not supported"));
        }
        let descending = match key.options.sort {
            None | Some(sql::OrderBySort::Asc) => false,
            Some(sql::OrderBySort::Desc) => true,
            Some(_) => return Err(invalid(text, "ORDER BY … USING is not supported")),
        };
        let nulls_first = key.options.nulls_first.unwrap_or(descending);
        let column = order_column(text, &key.expr, command, shape)?;
        shape.order_by.push(SortKey { column, descending, nulls_first });
    }
    Ok(())
}

/// The scan's column an `ORDER BY` key sorts by: an output name (alias or path), an
/// aggregate, or a path, which is fetched for the sort if the select list lacks it.
fn order_column(text: &str, e: &sql::Expr, command: &mut QueryCommand, shape: &ResultShape) -> Result<String, OpsError> {
    if let sql::Expr::Value(value) = e {
        if let sql::Value::Number(n, _) = &value.value {
            // ORDER BY 2: the second output column.
            let position: usize = n.parse().map_err(|_| invalid(text, format!("ORDER BY {n}: not a column position")))?;
            let projection = shape.projection.as_ref().ok_or_else(|| invalid(text, "ORDER BY <position> needs named columns, not `*`"))?;
            return projection
                .get(position.wrapping_sub(1))
                .map(|(column, _)| column.clone())
                .ok_or_else(|| invalid(text, format!("ORDER BY {position}: the select list has {} columns", projection.len())));
        }
    }
    if let sql::Expr::Identifier(ident) = e {
        if let Some((column, _)) = shape.projection.iter().flatten().find(|(_, output)| *output == ident.value) {
            return Ok(column.clone());
        }
    }
    if let Some(call) = lower_aggregate(text, e)? {
        let name = call.name();
        let pushed = pushed_aggregate(&call).is_some_and(|spec| command.aggregates.iter().any(|a| a.function == spec.function && a.column == spec.column));
        let grouped = shape.group_by.as_ref().is_some_and(|g| g.aggregates.contains(&call));
        if pushed || grouped {
            return Ok(name);
        }
        return Err(invalid(text, format!("ORDER BY {name}: the aggregate must be in the select list")));
    }
    let path = lower_field(e, text, "ORDER BY").map_err(|err| engine_error(text, &err))?;
    if let Some(grouping) = &shape.group_by {
        let name = path.to_string();
        if grouping.keys.contains(&name) {
            return Ok(name);
        }
        return Err(invalid(text, format!("ORDER BY {name}: with GROUP BY, order by a key or an aggregate of the select list")));
    }
    if !command.aggregates.is_empty() {
        return Err(invalid(text, format!("ORDER BY {path}: a query of aggregates returns one row; order by an aggregate")));
    }
    let name = path.to_string();
    if shape.projection.is_none() {
        // SELECT *: the scan returns the top-level fields, named by their keys.
        if path.segments().len() != 1 {
            return Err(invalid(text, format!("ORDER BY {name} with SELECT *: name the columns to sort by a nested path")));
        }
        return Ok(path.segments()[0].clone());
    }
    if !command.columns.contains(&name) {
        command.columns.push(name.clone());
    }
    Ok(name)
}

fn lower_limit(text: &str, limit: &sql::LimitClause, shape: &mut ResultShape) -> Result<(), OpsError> {
    let count = |e: &sql::Expr, what: &str| -> Result<usize, OpsError> {
        match e {
            sql::Expr::Value(v) => match &v.value {
                sql::Value::Number(n, _) => n.parse().map_err(|_| invalid(text, format!("{what} must be a whole number ≥ 0, got {n}"))),
                sql::Value::Null if what == "LIMIT" => Ok(usize::MAX),
                other => Err(invalid(text, format!("{what} must be a whole number ≥ 0, got {}", echo(&other.to_string())))),
            },
            other => Err(invalid(text, format!("{what} must be a whole number ≥ 0, got `{}`", echo(&other.to_string())))),
        }
    };
    let (limit, offset) = match limit {
        sql::LimitClause::LimitOffset { limit, offset, limit_by } => {
            if !limit_by.is_empty() {
                return Err(invalid(text, "LIMIT … BY is not supported"));
            }
            (limit.as_ref().map(|l| count(l, "LIMIT")).transpose()?, offset.as_ref().map(|o| count(&o.value, "OFFSET")).transpose()?)
        }
        sql::LimitClause::OffsetCommaLimit { offset, limit } => (Some(count(limit, "LIMIT")?), Some(count(offset, "OFFSET")?)),
    };
    shape.limit = limit.filter(|l| *l != usize::MAX);
    shape.offset = offset.unwrap_or(0);
    Ok(())
}

mod group;
mod parameters;
mod shape;

pub use group::{AggregateCall, Grouping, SqlAggregate, MAX_GROUPS};
pub(crate) use group::Grouper;

pub use parameters::{parameter_fields, parameter_literal, parameter_schema, parameter_types, parse_unbound, ParameterFields};
pub use shape::Shaper;

#[cfg(test)]
mod tests;
