//! Tests of the expression language: parsing, normal form, evaluation, display.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::error::Error;
use crate::parser::FieldSet;
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

/// Regression: `" AND ".join(["id >= 0"] * 3000)` overflowed a server thread's stack.
/// Chains up to the operator limit parse on a 1 MiB stack (half a tokio worker's) in a
/// debug build; longer ones are refused by name.
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
    // Other patterns (the first hour: refused) are general ones; ILIKE lowercases.
    use super::LikePiece::{Char, Many, One};
    let pattern = |pieces: Vec<super::LikePiece>, case_insensitive, negated| Expr::Pattern { path: path("a"), pieces, case_insensitive, negated };
    assert_eq!(parse("a LIKE '%abc'"), pattern(vec![Many, Char('a'), Char('b'), Char('c')], false, false));
    assert_eq!(parse("a NOT LIKE 'a_c%'"), pattern(vec![Char('a'), One, Char('c'), Many], false, true));
    assert_eq!(parse("a ILIKE 'AB%'"), pattern(vec![Char('a'), Char('b'), Many], true, false));
    assert_eq!(parse("a LIKE '%!%%' ESCAPE '!'"), pattern(vec![Many, Char('%'), Many], false, false));
    for text in ["a LIKE '%abc'", "a NOT LIKE 'a_c%'", "a NOT ILIKE '%x\\%_'", "a LIKE '%!%%' ESCAPE '!'", "a LIKE '_'"] {
        let parsed = parse(text);
        assert_eq!(parse(&parsed.to_string()), parsed, "{text} → {parsed}");
    }
    for (text, construct) in [("a LIKE 'ab%' ESCAPE 'xy'", "ESCAPE"), ("a LIKE 'ab!' ESCAPE '!'", "escape character")] {
        let reason = rejection(text);
        assert!(reason.contains(construct), "{text}: {reason}");
    }
    assert_eq!(parse("a LIKE 'x%' ESCAPE '!'"), like("x", false));
}

#[test]
fn like_patterns_match_as_sql_does() {
    let matches = |pattern: &str, text: &str| {
        let Expr::Pattern { pieces, .. } = parse(&format!("a LIKE '{pattern}'")) else { panic!("{pattern} is a pattern") };
        super::like_matches(&pieces, text)
    };
    for (pattern, text, expected) in [
        ("%bot%", "dependabot[bot]", true),
        ("%bot", "robots", false),
        ("a_c", "abc", true),
        ("a_c", "abbc", false),
        ("%a%b%c%", "xaxbxcx", true),
        ("%a%b%c%", "xaxcxbx", false),
        ("_%_", "a", false),
        ("_%_", "ab", true),
        ("%_%", "", false),
        ("ü_%", "üñé", true),
    ] {
        assert_eq!(matches(pattern, text), expected, "{pattern} on {text}");
    }
    fn record(p: &FieldPath) -> FieldValue<'static> {
        if p.to_string() == "a" { FieldValue::Str("Dependabot".into()) } else { FieldValue::Missing }
    }
    assert_eq!(parse("a ILIKE '%BOT%'").eval_with(&record), Some(true));
    assert_eq!(parse("a NOT ILIKE '%BOT%'").eval_with(&record), Some(false));
    assert_eq!(parse("b LIKE '%x%'").eval_with(&record), None);
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
        ("soundex(a) = 'x'", "function `soundex` is not supported (lower, upper, length, substr, starts_with, date_trunc, array_contains are)"),
        ("substr(a) = 'x'", "substr() takes a field, a start and an optional length"),
        ("substr(a, 'b') = 'x'", "substr() takes whole numbers for its start and length"),
        ("starts_with(a, 1)", "starts_with() takes a string prefix"),
        ("lower(a, b) = 'x'", "lower() takes one field"),
        ("lower('x') = 'x'", "lower() needs a field here, not a literal"),
        ("tags[*] > 1", "`[*]` compares with `=` only"),
        ("array_contains(tags)", "array_contains() takes an array field and a literal"),
        ("array_contains(tags, b)", "array_contains() needs a literal here"),
        ("a = (SELECT 1)", "subqueries are not supported"),
        ("a IN (SELECT b FROM t)", "subqueries are not supported"),
        ("CASE WHEN a THEN 1 END = 1", "CASE expressions are not supported"),
        ("CAST(a AS INT) = 1", "casts are not supported"),
        ("a = INTERVAL '1' DAY", "intervals are not supported"),
        ("a = TIME '10:00:00'", "typed literals are not supported, but for TIMESTAMP and DATE"),
        ("a > TIMESTAMP 'yesterday'", "'yesterday' is not a timestamp (RFC 3339"),
        ("CAST(a AS TIMESTAMP) > 'soon'", "'soon' is not a timestamp"),
        ("CAST(a AS TIMESTAMP) > 5", "a timestamp compares with a TIMESTAMP literal or a string"),
        ("CAST(a AS DATE) = DATE '2020-01-01'", "CAST(… AS DATE) is not supported"),
        ("a[0] = 1", "array subscripts are not supported"),
        ("a IS TRUE", "IS [NOT] TRUE/FALSE is not supported"),
        ("a IS DISTINCT FROM 1", "IS [NOT] DISTINCT FROM is not supported"),
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
fn timestamps_parse_display_and_compare_as_instants() {
    const TEN: i64 = 1_626_861_600_000_000; // 2021-07-21T10:00:00Z
    let ten = Literal::Timestamp(TEN);
    for text in [
        "created_at >= TIMESTAMP '2021-07-21T10:00:00Z'",
        "created_at >= TIMESTAMP '2021-07-21 12:00:00+02:00'",
        "created_at >= CAST('2021-07-21T10:00:00' AS TIMESTAMP)",
        "CAST(created_at AS TIMESTAMP) >= '2021-07-21T10:00:00Z'",
        "created_at::timestamp >= '2021-07-21 10:00:00'",
        "TIMESTAMP '2021-07-21T10:00:00Z' <= created_at",
        "created_at >= CAST(1626861600 AS TIMESTAMP)",
    ] {
        assert_eq!(parse(text), cmp("created_at", CmpOp::GtEq, ten.clone()), "{text}");
    }
    assert_eq!(parse("d = DATE '2021-07-21'"), cmp("d", CmpOp::Eq, Literal::Timestamp(TEN - 36_000_000_000)));
    let between = parse("CAST(t AS TIMESTAMP) BETWEEN '2021-07-21T10:00:00Z' AND TIMESTAMP '2021-07-21T11:00:00Z'");
    assert_eq!(between, Expr::And(vec![cmp("t", CmpOp::GtEq, ten.clone()), cmp("t", CmpOp::LtEq, Literal::Timestamp(TEN + 3_600_000_000))]));
    assert_eq!(parse("CAST(t AS TIMESTAMP) IN ('2021-07-21T10:00:00Z', NULL)"), Expr::In { path: path("t"), list: vec![ten.clone(), Literal::Null], negated: false });
    // A string compared without a cast stays a string comparison (byte order).
    assert_eq!(parse("t >= '2021-07-21T10:00:00Z'"), cmp("t", CmpOp::GtEq, str_lit("2021-07-21T10:00:00Z")));
    // Display reads back.
    let e = parse("t > TIMESTAMP '2021-07-21T10:00:00.25Z' AND t < TIMESTAMP '2021-07-21 11:00:00'");
    assert_eq!(e.to_string(), "t > TIMESTAMP '2021-07-21T10:00:00.250Z' AND t < TIMESTAMP '2021-07-21T11:00:00Z'");
    assert_eq!(parse(&e.to_string()), e);
    // Any spelling of the same instant compares equal; other types are unknown.
    let at_ten = parse("t = TIMESTAMP '2021-07-21T10:00:00Z'");
    for same in ["2021-07-21T10:00:00Z", "2021-07-21T12:00:00+02:00", "2021-07-21 10:00:00", "2021-07-21T10:00:00.000000Z"] {
        assert_eq!(eval(&at_ten, &[("t", FieldValue::Str(Cow::Owned(same.to_owned())))]), Some(true), "{same}");
    }
    let after = parse("t > TIMESTAMP '2021-07-21T10:00:00Z'");
    // Byte order says "2021-07-21T09:30:00-01:00" < "2021-07-21T10…"; time order says after.
    assert_eq!(eval(&after, &[("t", s("2021-07-21T09:30:00-01:00"))]), Some(true));
    assert_eq!(eval(&after, &[("t", s("2021-07-21T10:30:00+01:00"))]), Some(false));
    for unknown in [s("not a time"), FieldValue::Int(1_626_861_601), FieldValue::Null, FieldValue::Missing, FieldValue::Bool(true)] {
        assert_eq!(eval(&after, &[("t", unknown.clone())]), None, "{unknown:?}");
    }
    assert_eq!(eval(&parse("NOT t > TIMESTAMP '2021-07-21T10:00:00Z'"), &[("t", s("2021-07-21T09:00:00Z"))]), Some(true));
}

#[test]
fn functions_and_array_membership_parse_display_and_evaluate() {
    let lower = parse("lower(actor.login) = 'bob'");
    assert_eq!(lower, Expr::Function { function: Function::Lower, path: path("actor.login"), op: CmpOp::Eq, value: str_lit("bob") });
    assert_eq!(parse("'bob' = LOWER(actor.login)"), lower);
    assert_eq!(parse(&lower.to_string()), lower);
    for (text, record, expected) in [
        ("lower(a) = 'bob'", s("BoB"), Some(true)),
        ("upper(a) = 'ÉTÉ'", s("été"), Some(true)),
        ("length(a) > 3", s("four"), Some(true)),
        ("char_length(a) = 3", s("été"), Some(true)),
        ("length(a) = 3", FieldValue::Int(123), None),
        ("lower(a) = 'x'", FieldValue::Missing, None),
        ("NOT lower(a) = 'bob'", s("BOB"), Some(false)),
        ("lower(a) IN ('x', 'bob')", s("Bob"), Some(true)),
        ("lower(a) NOT IN ('x', 'bob')", s("Bob"), Some(false)),
        // substr as Spark's substring: 1-based, 0 as 1, negative from the end, characters.
        ("substr(a, 2, 3) = 'par'", s("Spark SQL"), Some(true)),
        ("substring(a, 0, 2) = 'Sp'", s("Spark SQL"), Some(true)),
        ("substr(a, -3) = 'SQL'", s("Spark SQL"), Some(true)),
        ("substr(a, -12, 5) = 'Sp'", s("Spark SQL"), Some(true)),
        ("substr(a, 20) = ''", s("Spark SQL"), Some(true)),
        ("substr(a, 2, -1) = ''", s("Spark SQL"), Some(true)),
        ("SUBSTRING(a FROM 2 FOR 2) = 'té'", s("été"), Some(true)),
        ("SUBSTRING(a FROM 3) = 'é'", s("été"), Some(true)),
        ("substr(a, 1, 2) IN ('ab', 'xy')", s("xyz"), Some(true)),
        ("substr(a, 1, 2) = '12'", FieldValue::Int(123), None),
    ] {
        let e = parse(text);
        assert_eq!(eval(&e, &[("a", record.clone())]), expected, "{text} on {record:?}");
        assert_eq!(parse(&e.to_string()), e, "{text} reads back from {e}");
    }
    assert_eq!(parse("starts_with(repo.name, 'a%b')"), Expr::Like { path: path("repo.name"), prefix: "a%b".into(), negated: false });
    assert_eq!(parse("NOT starts_with(repo.name, 'a')"), Expr::Like { path: path("repo.name"), prefix: "a".into(), negated: true });
    let contains = parse("array_contains(tags, 'x')");
    assert_eq!(contains, Expr::Contains { path: path("tags"), element: None, value: str_lit("x"), negated: false });
    let authors = parse("payload.commits[*].author.name = 'ann'");
    assert_eq!(authors, Expr::Contains { path: path("payload.commits"), element: Some(path("author.name")), value: str_lit("ann"), negated: false });
    assert_eq!(parse("array_contains(payload.commits[*].author.name, 'ann')"), authors);
    for e in [&contains, &authors, &parse("NOT array_contains(tags, 2)")] {
        assert_eq!(&parse(&e.to_string()), e, "{e}");
    }
    let array = |text: &'static str| FieldValue::Array(text);
    for (e, record, expected) in [
        (&contains, array(r#"["a", "x"]"#), Some(true)),
        (&contains, array(r#"["a", "b"]"#), Some(false)),
        (&contains, array(r#"["a", null]"#), None),
        (&contains, array(r#"["a", 1]"#), None),
        (&contains, array("[]"), Some(false)),
        (&contains, s("x"), None),
        (&contains, FieldValue::Missing, None),
        (&parse("NOT array_contains(tags, 'x')"), array(r#"["a"]"#), Some(true)),
        (&parse("array_contains(tags, 2)"), array("[1, 2.0]"), Some(true)),
    ] {
        assert_eq!(eval(e, &[("tags", record.clone())]), expected, "{e} on {record:?}");
    }
    let commits = array(r#"[{"author": {"name": "bo"}}, {"author": {"name": "ann"}}, {"sha": 1}]"#);
    assert_eq!(eval(&authors, &[("payload.commits", commits)]), Some(true));
    let others = array(r#"[{"author": {"name": "bo"}}, {"sha": 1}]"#);
    assert_eq!(eval(&authors, &[("payload.commits", others)]), None, "a missing name is unknown");
}

#[test]
fn date_trunc_comparisons_are_ranges_of_the_instant() {
    let ts = |text: &str| Literal::Timestamp(crate::timestamp::parse_timestamp(text).unwrap());
    assert_eq!(
        parse("date_trunc('hour', t) = TIMESTAMP '2021-07-21T10:00:00Z'"),
        Expr::And(vec![cmp("t", CmpOp::GtEq, ts("2021-07-21T10:00:00Z")), cmp("t", CmpOp::Lt, ts("2021-07-21T11:00:00Z"))])
    );
    assert_eq!(parse("date_trunc('day', t) >= '2021-07-21 10:00:00'"), cmp("t", CmpOp::GtEq, ts("2021-07-22T00:00:00Z")));
    assert_eq!(parse("TIMESTAMP '2021-07-21T10:30:00Z' < date_trunc('HOUR', t)"), cmp("t", CmpOp::GtEq, ts("2021-07-21T11:00:00Z")));
    // Against every instant of a day in 7-minute steps, each form agrees with truncating by hand.
    let hour = 3_600_000_000i64;
    let base = crate::timestamp::parse_timestamp("2021-07-21T00:00:00Z").unwrap();
    for literal in ["2021-07-21T10:00:00Z", "2021-07-21T10:20:00Z"] {
        let t = crate::timestamp::parse_timestamp(literal).unwrap();
        for (op, sql) in [(CmpOp::Eq, "="), (CmpOp::NotEq, "<>"), (CmpOp::Lt, "<"), (CmpOp::LtEq, "<="), (CmpOp::Gt, ">"), (CmpOp::GtEq, ">=")] {
            let e = parse(&format!("date_trunc('hour', t) {sql} TIMESTAMP '{literal}'"));
            for step in 0..(24 * 60 / 7) {
                let v = base + i64::from(step) * 7 * 60_000_000;
                let truncated = v - v.rem_euclid(hour);
                let text = crate::timestamp::format_timestamp(v);
                assert_eq!(eval(&e, &[("t", FieldValue::Str(Cow::Owned(text.clone())))]), Some(op.holds(truncated.cmp(&t))), "{e} on {text}");
            }
            assert_eq!(eval(&e, &[("t", s("soon"))]), None, "{e}");
        }
    }
    // Calendar units: against every 5 h 11 min of two years, each form agrees with the unit's
    // own truncation (itself tested against the calendar in `timestamp`).
    let start = crate::timestamp::parse_timestamp("2020-01-01T00:00:00Z").unwrap();
    for (unit, literal) in [("week", "2020-03-02T00:00:00Z"), ("week", "2020-03-04T12:00:00Z"), ("month", "2020-02-01T00:00:00Z"),
        ("month", "2020-02-29T23:00:00Z"), ("quarter", "2020-10-01T00:00:00Z"), ("year", "2021-01-01T00:00:00Z"), ("year", "2020-06-01T00:00:00Z")]
    {
        let truncation = crate::timestamp::TruncUnit::named(unit).unwrap();
        let t = crate::timestamp::parse_timestamp(literal).unwrap();
        for (op, sql) in [(CmpOp::Eq, "="), (CmpOp::NotEq, "<>"), (CmpOp::Lt, "<"), (CmpOp::LtEq, "<="), (CmpOp::Gt, ">"), (CmpOp::GtEq, ">=")] {
            let e = parse(&format!("date_trunc('{unit}', t) {sql} TIMESTAMP '{literal}'"));
            for step in 0..(2 * 366 * 24 / 5) {
                let v = start + i64::from(step) * (5 * 60 + 11) * 60_000_000;
                let text = crate::timestamp::format_timestamp(v);
                let expected = Some(op.holds(truncation.floor(v).cmp(&t)));
                assert_eq!(eval(&e, &[("t", FieldValue::Str(Cow::Owned(text.clone())))]), expected, "{e} on {text}");
            }
        }
    }
    assert_eq!(
        parse("date_trunc('month', t) = TIMESTAMP '2021-07-01'"),
        Expr::And(vec![cmp("t", CmpOp::GtEq, ts("2021-07-01T00:00:00Z")), cmp("t", CmpOp::Lt, ts("2021-08-01T00:00:00Z"))])
    );
    assert!(rejection("date_trunc('fortnight', t) = TIMESTAMP '2021-07-01'").contains("'quarter' or 'year'"));
    assert!(rejection("date_trunc(t) = TIMESTAMP '2021-07-01'").contains("takes a unit and a field"));
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
