//! Who an account is: its DID, the DID document that names its signing key
//! and PDS, and how that document is found or published.
//!
//! - [`resolve`]: reading someone's document ([`DidResolver`], with
//!   [`HttpResolver`] for did:plc and did:web), and its `#atproto` key and
//!   PDS. Sync checks the account's commits with that key; the lexicon
//!   resolver finds an authority's PDS and key through it.
//! - [`web`]: the did:web `gelstore serve` is, and the document it serves.
//! - [`plc`]: a did:plc of our own: the signed genesis and update
//!   operations sent to a PLC directory.
//!
//! The local signing key file is not here: it belongs to the repository
//! (`repo::key_file`).

pub mod plc;
pub mod resolve;
pub mod web;

pub use plc::PlcError;
pub use resolve::{DidDocument, DidResolver, HttpResolver, IdentityError, document_url};
