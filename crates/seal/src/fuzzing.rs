//! The property the `seal_open` fuzz target checks, shared with the test
//! that runs its seeds (`tests/seal/seal_records.rs`). Not an API.

use std::convert::Infallible;
use std::io::Read;

use rand_core::{TryCryptoRng, TryRng};

use super::blob::{BlobReader, BlobSeal, into_seal_error, open_blob};
use super::envelope::Envelope;
use super::keys::{BlobKey, ChatKey};
use super::record::{SealOptions, open_record, seal_record};
use super::wrap::KeyWrap;
use super::{Place, frame};
use gelstore_model::{cid_for_blob, decode_dag_cbor};

/// The key every fuzz input is opened with.
pub const FUZZ_KEY: [u8; 32] = [0x42; 32];
/// Its keyId.
pub const FUZZ_KEY_ID: &str = "chat:3lbqzdq7qzk22:0:00112233aabbccdd";
/// The place every fuzz record is opened at.
pub const FUZZ_PLACE: Place<'static> = Place {
    did: "did:plc:ewvi7nxzyoun6zhxrhs64oiz",
    collection: "chat.gel.assistant.message",
    rkey: "3lbqzdw5pzk22",
};

/// A fixed byte stream (never for real keys).
struct CountingRng(u8);

impl TryRng for CountingRng {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0u8; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0u8; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for d in dst {
            self.0 = self.0.wrapping_add(1);
            *d = self.0;
        }
        Ok(())
    }
}

impl TryCryptoRng for CountingRng {}

/// Runs `data` through the envelope parser and the open paths. Failing is
/// fine; panicking is not; and whatever opens must seal and open again to
/// the same content, with the in-memory and streaming blob readers agreeing.
/// Returns whether the record or the blob opened.
pub fn seal_open_property(data: &[u8]) -> bool {
    let key = ChatKey::new(FUZZ_KEY_ID, FUZZ_KEY);
    let mut opened_any = false;
    if let Ok(value) = decode_dag_cbor(data) {
        let _ = Envelope::from_ipld(&value);
        let _ = KeyWrap::from_ipld(&value).map(|w| w.check());
        if let Ok(opened) = open_record(&value, &FUZZ_PLACE, &key) {
            opened_any = true;
            let resealed = seal_record(
                &value,
                &FUZZ_PLACE,
                &opened.content,
                &opened.blobs,
                &key,
                &SealOptions::default(),
                &mut CountingRng(0),
            )
            .expect("what opened must seal again");
            let again = open_record(&resealed, &FUZZ_PLACE, &key).expect("and open again");
            assert_eq!(again, opened, "reseal changed the content");
        }
    }
    for blobs in 0..3 {
        let _ = frame::decode(data, blobs);
    }
    let seal = BlobSeal {
        cid: cid_for_blob(data),
        size: data.len() as u64,
        key: BlobKey::from_bytes(FUZZ_KEY),
    };
    let whole = open_blob(data, &seal);
    let mut streamed = Vec::new();
    let stream = BlobReader::new(data, &seal)
        .read_to_end(&mut streamed)
        .map_err(into_seal_error);
    match (&whole, &stream) {
        (Ok(a), Ok(_)) => {
            assert_eq!(a, &streamed, "blob readers disagree");
            opened_any = true;
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "blob readers fail differently"),
        _ => panic!("blob readers disagree: {whole:?} vs {stream:?}"),
    }
    opened_any
}
