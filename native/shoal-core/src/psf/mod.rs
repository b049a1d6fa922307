//! Predicated subset functions (FishStore §3).
pub mod expr;
