//! The `gelstore` command line.
