//! The envelope as the generated `chat.gel.assistant.defs#encryptedContent`
//! type, so records built from generated types carry it directly.
//!
//! Both directions go through the data-model value the envelope already
//! parses, so the structural checks (alg allow-list, nonce length, blob refs)
//! are the same whichever form a caller holds.

use super::envelope::Envelope;
use super::error::{Result, SealError};
use gelstore_model::decode_dag_cbor;
use gelstore_types::lexicon::chat::gel::assistant::defs::EncryptedContent;
use gelstore_types::lexicon_runtime as support;

impl Envelope {
    /// This envelope as the lexicon type a message or chat record holds.
    pub fn to_lexicon(&self) -> Result<EncryptedContent> {
        support::from_ipld(self.to_ipld())
            .map_err(|e| SealError::malformed("encryptedContent", e.0))
    }

    /// Parses the lexicon type with the same checks as [`Envelope::from_ipld`].
    pub fn from_lexicon(content: &EncryptedContent) -> Result<Envelope> {
        let bytes = serde_ipld_dagcbor::to_vec(content)
            .map_err(|e| SealError::malformed("encryptedContent", e.to_string()))?;
        let value = decode_dag_cbor(&bytes)
            .map_err(|e| SealError::malformed("encryptedContent", e.to_string()))?;
        Envelope::from_ipld(&value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlobBinding, SEAL_ALG_V1};
    use gelstore_types::lexicon_runtime::Validate;

    fn envelope(blobs: Vec<BlobBinding>) -> Envelope {
        Envelope {
            alg: SEAL_ALG_V1.to_string(),
            key_id: "ck-3lbqyb6tcmk22-e1".into(),
            nonce: [7; 24],
            ciphertext: vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17],
            blobs,
            typed: false,
        }
    }

    #[test]
    fn round_trips_through_the_generated_type() {
        let blob = BlobBinding {
            cid: gelstore_model::cid_for_blob(b"sealed bytes"),
            size: 12,
            mime_type: "application/octet-stream".into(),
        };
        for env in [envelope(vec![]), envelope(vec![blob])] {
            let typed = env.to_lexicon().unwrap();
            assert!(typed.validate().is_ok());
            assert_eq!(Envelope::from_lexicon(&typed).unwrap(), env);
        }
    }

    #[test]
    fn from_lexicon_applies_the_envelope_checks() {
        let mut typed = envelope(vec![]).to_lexicon().unwrap();
        typed.nonce = support::Bytes(vec![0; 12]);
        assert!(matches!(
            Envelope::from_lexicon(&typed),
            Err(SealError::MalformedNonce { .. }) | Err(SealError::Malformed { .. })
        ));
    }
}
