// @gelstore/seal: gelstore's sealed-record format (docs/sealing.md,
// fixtures/seal/README.md), byte-compatible with the Rust code in crates/seal/.

export * from "./errors.js";
export * from "./bytes.js";
export * from "./model.js";
export * from "./padme.js";
export * from "./aad.js";
export * from "./envelope.js";
export * from "./frame.js";
export * from "./keys.js";
export * from "./record.js";
export * from "./blob.js";
export * from "./wrap.js";
export * from "./signing.js";
export * from "./pairing.js";
export * from "./membership.js";
export * from "./keyring.js";
