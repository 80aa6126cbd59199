//! Feeds arbitrary bytes to the sealed-envelope parser and open paths: as
//! DAG-CBOR (an `encryptedContent`, a `keyWrap`, a whole record opened with a
//! fixed key), as a plaintext frame, and as a sealed blob (in-memory and
//! streaming readers). Nothing may panic; what opens must reseal and open to
//! the same content (see `gelstore::seal::fuzzing`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gelstore::seal::fuzzing::seal_open_property(data);
});
