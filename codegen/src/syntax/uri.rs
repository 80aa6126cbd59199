use super::{Format, SyntaxError};

// UNFINISHED: placeholder until the syntax checks land.
pub fn check_uri(value: &str) -> Result<(), SyntaxError> {
    let _ = value;
    Err(SyntaxError::new(Format::Uri, "not implemented yet"))
}
