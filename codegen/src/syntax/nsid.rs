use super::{Format, SyntaxError};

// UNFINISHED: placeholder until the syntax checks land.
pub fn check_nsid(value: &str) -> Result<(), SyntaxError> {
    let _ = value;
    Err(SyntaxError::new(Format::Nsid, "not implemented yet"))
}
