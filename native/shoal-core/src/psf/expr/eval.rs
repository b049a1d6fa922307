//! Evaluation of expressions in SQL's three-valued logic: by path ([`Expr::eval_with`],
//! for tests and oracles) and bound to a [`FieldSet`]'s field ids ([`BoundExpr::eval`],
//! the ingest and scan hot path).

use crate::parser::FieldSet;
use crate::path::FieldPath;
use crate::value::FieldValue;

use super::{CmpOp, Expr, Literal};

impl Expr {
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
            Expr::Pattern { path, pieces, case_insensitive, negated } => eval_pattern(&lookup(path), pieces, *case_insensitive, *negated),
            Expr::Function { function, path, op, value } => eval_cmp(&function.apply(&lookup(path)), *op, value),
            Expr::Contains { path, element, value, negated } => eval_contains(&lookup(path), element.as_ref(), value, *negated),
            Expr::Field(path) => eval_field(&lookup(path)),
            Expr::Const(b) => Some(*b),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Three-valued evaluation of the leaves and connectives (shared by both evaluators)
// ---------------------------------------------------------------------------------------

fn eval_cmp(field: &FieldValue<'_>, op: CmpOp, value: &Literal) -> Option<bool> {
    value.compare(field).map(|ordering| op.holds(ordering))
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

pub(crate) fn eval_pattern(field: &FieldValue<'_>, pieces: &[super::LikePiece], case_insensitive: bool, negated: bool) -> Option<bool> {
    match field {
        FieldValue::Str(s) if case_insensitive => Some(super::like_matches(pieces, &s.to_lowercase()) != negated),
        FieldValue::Str(s) => Some(super::like_matches(pieces, s) != negated),
        _ => None,
    }
}

/// `array_contains` over the raw text of a JSON array (parsed here: arrays are not the
/// hot path); `element` picks a field of each element.
fn eval_contains(field: &FieldValue<'_>, element: Option<&FieldPath>, value: &Literal, negated: bool) -> Option<bool> {
    let FieldValue::Array(text) = field else { return None };
    let items: Vec<serde_json::Value> = serde_json::from_str(text).ok()?;
    let pick = |item: &serde_json::Value| -> FieldValue<'static> {
        let picked = match element {
            None => Some(item),
            Some(path) => path.segments().iter().try_fold(item, |v, key| v.as_object()?.get(key)),
        };
        match picked {
            None => FieldValue::Missing,
            Some(serde_json::Value::Null) => FieldValue::Null,
            Some(serde_json::Value::Bool(b)) => FieldValue::Bool(*b),
            Some(serde_json::Value::Number(n)) => n.as_i64().map_or_else(|| FieldValue::Float(n.as_f64().unwrap_or(f64::NAN)), FieldValue::Int),
            Some(serde_json::Value::String(s)) => FieldValue::Str(std::borrow::Cow::Owned(s.clone())),
            // Containers compare with no literal.
            Some(_) => FieldValue::Missing,
        }
    };
    kleene_or(&items, |item| eval_cmp(&pick(item), CmpOp::Eq, value)).map(|found| found != negated)
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
    Pattern { field: usize, pieces: Box<[super::LikePiece]>, case_insensitive: bool, negated: bool },
    Function { function: super::Function, field: usize, op: CmpOp, value: Literal },
    Contains { field: usize, element: Option<FieldPath>, value: Literal, negated: bool },
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
            Expr::Pattern { path, pieces, case_insensitive, negated } => Node::Pattern {
                field: fields.insert(path),
                pieces: pieces.clone().into_boxed_slice(),
                case_insensitive: *case_insensitive,
                negated: *negated,
            },
            Expr::Function { function, path, op, value } => {
                Node::Function { function: *function, field: fields.insert(path), op: *op, value: value.clone() }
            }
            Expr::Contains { path, element, value, negated } => {
                Node::Contains { field: fields.insert(path), element: element.clone(), value: value.clone(), negated: *negated }
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
            Node::Pattern { field, pieces, case_insensitive, negated } => eval_pattern(value(*field), pieces, *case_insensitive, *negated),
            Node::Function { function, field, op, value: literal } => eval_cmp(&function.apply(value(*field)), *op, literal),
            Node::Contains { field, element, value: literal, negated } => eval_contains(value(*field), element.as_ref(), literal, *negated),
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
