use super::{Format, SyntaxError};

// UNFINISHED: placeholder until the syntax checks land.
pub fn check_record_key(value: &str) -> Result<(), SyntaxError> {
    let _ = value;
    Err(SyntaxError::new(Format::RecordKey, "not implemented yet"))
}
