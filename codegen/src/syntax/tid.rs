use super::{Format, SyntaxError};

// UNFINISHED: placeholder until the syntax checks land.
pub fn check_tid(value: &str) -> Result<(), SyntaxError> {
    let _ = value;
    Err(SyntaxError::new(Format::Tid, "not implemented yet"))
}
