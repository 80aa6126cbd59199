//! Decodes arbitrary bytes as DAG-CBOR. Decoding may fail, but must not panic,
//! and whatever it accepts must be canonical and survive the JSON round trip:
//! bytes -> value -> bytes is the identity, and
//! value -> atproto JSON -> value -> bytes gives the same value and bytes.

#![no_main]

use gelstore::model::{decode_dag_cbor, encode_dag_cbor, ipld_to_json, json_to_ipld};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = decode_dag_cbor(data) else {
        return;
    };
    let bytes = encode_dag_cbor(&value).expect("an accepted value must re-encode");
    assert_eq!(bytes, data, "re-encoding changed the bytes");

    let json = ipld_to_json(&value).expect("an accepted value must convert to JSON");
    let back = json_to_ipld(&json).expect("JSON from an accepted value must convert back");
    assert_eq!(back, value, "JSON round trip changed the value");
    let again = encode_dag_cbor(&back).expect("the JSON round-trip value must encode");
    assert_eq!(again, data, "JSON round trip changed the bytes");
});
