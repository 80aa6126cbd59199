// The one error type, with the same categories as the Rust `SealError`
// (crates/seal/src/error.rs), so both sides can be compared by `kind`.

/** The name of the Rust `SealError` variant an error corresponds to. */
export type SealErrorKind =
  | "UnsupportedAlg"
  | "MalformedNonce"
  | "Oversize"
  | "Truncated"
  | "UnknownKey"
  | "AuthenticationFailed"
  | "NotRecipient"
  | "InvalidPlaintext"
  | "BlobCidMismatch"
  | "BlobSizeMismatch"
  | "Malformed"
  | "NotSealable"
  | "InvalidPairingCode"
  | "MembershipFork"
  | "MembershipLog"
  | "NotAdmitted"
  | "AccountKeyPending"
  | "Keyring";

/**
 * Why sealing or opening failed. Structure is checked before any
 * cryptography, so a malformed input is reported as what it is; no message
 * ever carries plaintext.
 */
export class SealError extends Error {
  readonly kind: SealErrorKind;

  constructor(kind: SealErrorKind, message: string) {
    super(`${kind}: ${message}`);
    this.name = "SealError";
    this.kind = kind;
  }
}

/** Shorthand for `new SealError("Malformed", ...)`. */
export function malformed(what: string, reason: string): SealError {
  return new SealError("Malformed", `malformed ${what}: ${reason}`);
}

/** Shorthand for `new SealError("InvalidPlaintext", ...)`. */
export function invalidPlaintext(reason: string): SealError {
  return new SealError("InvalidPlaintext", reason);
}
