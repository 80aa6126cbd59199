use super::{Format, SyntaxError};

// UNFINISHED: placeholder until the syntax checks land.
pub fn check_datetime(value: &str) -> Result<(), SyntaxError> {
    let _ = value;
    Err(SyntaxError::new(Format::Datetime, "not implemented yet"))
}
