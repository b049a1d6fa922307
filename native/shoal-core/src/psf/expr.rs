//! Expression language. (being written)
