//! Lexicons on the network, as the Lexicon spec resolves them: an NSID's
//! authority names a DID in a DNS TXT record (`_lexicon.<authority>`,
//! `did=…`); that account's repository holds the schema as a
//! `com.atproto.lexicon.schema` record keyed by the NSID.
//!
//! | module | job |
//! |---|---|
//! | `resolve` | [`Resolver`]: TXT → DID → DID document → PDS and key → the schema record, verified by its commit and proof |
//! | `publish` | [`publish`]: a folder's lexicons as schema records on the account's PDS, only those that changed, a breaking change refused |
//! | `unpublish` | [`unpublish`]: schema records deleted in one commit pinned to the head the plan was made on, a still-referenced one refused |
//! | `pull` | [`pull`]: the lexicons a folder references, transitively, into a folder, with a lock file of NSID → record CID |
//! | `error` | [`LexNetError`] |

mod error;
pub mod publish;
pub mod pull;
pub mod resolve;
pub mod unpublish;

pub use error::LexNetError;
pub use publish::{PublishOptions, PublishReport, publish};
pub use pull::{LOCK_FILE, PullReport, pull};
pub use resolve::{Resolution, Resolver, ResolverOptions, SCHEMA_COLLECTION, txt_name};
pub use unpublish::{UnpublishPlan, UnpublishReport, unpublish};
