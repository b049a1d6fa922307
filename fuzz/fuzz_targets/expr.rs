//! The filter / PSF expression language: any text either parses or is refused with an
//! error; a parsed expression prints as text that parses back to itself (when it has no
//! NaN, which has no SQL spelling), and binds and evaluates on an empty record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_core::parser::FieldSet;
use shoal_core::psf::expr::{parse_expr, Expr};

fn has_nan(e: &Expr) -> bool {
    e.to_string().contains("NaN")
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(expr) = parse_expr(text) else { return };
    if !has_nan(&expr) {
        let printed = expr.to_string();
        let again = parse_expr(&printed).unwrap_or_else(|e| panic!("{printed:?} does not parse back: {e}"));
        assert_eq!(again, expr, "{text:?} printed as {printed:?}");
    }
    let mut fields = FieldSet::new();
    let bound = expr.bind(&mut fields);
    let _ = bound.eval(&[]);
});
