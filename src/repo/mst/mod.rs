//! The Merkle Search Tree of an atproto repository (v3).
mod codec;
mod error;
mod key;
mod node;

pub use self::error::MstError;
pub use self::key::{MAX_KEY_LEN, check_key, common_prefix_len, key_height};
