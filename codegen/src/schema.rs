//! UNFINISHED: being written.
