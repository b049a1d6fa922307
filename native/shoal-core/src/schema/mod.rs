//! Inferred schema. (being written)
