//! UNFINISHED: atproto data model (JSON ⇄ DAG-CBOR ⇄ CID), being written.
