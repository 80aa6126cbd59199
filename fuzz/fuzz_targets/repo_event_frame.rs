//! Arbitrary bytes as a `subscribeRepos` binary message through
//! `repo::events::decode_frame`. Decoding may fail, but must not panic; a
//! decoded `#commit` re-encodes to a frame that decodes to the same event,
//! and the inductive verifier gives an answer (not a panic) for it, both
//! against its own `prevData` and as a first commit. Info and error frames
//! rebuilt by `info_frame` / `error_frame` decode back to themselves.

#![no_main]

use gelstore::repo::events::{Frame, decode_frame, error_frame, info_frame, verify_commit};
use gelstore::crypto::{KeyAlgorithm, SigningKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = decode_frame(data) else {
        return;
    };
    match &frame {
        Frame::Commit(commit) => {
            let again = commit.to_frame().expect("a decoded event re-encodes");
            assert_eq!(
                decode_frame(&again).expect("a re-encoded event decodes"),
                frame
            );
            let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[0x11; 32])
                .expect("a fixed valid key")
                .public_key();
            let _ = verify_commit(commit, commit.prev_data, &key);
            let _ = verify_commit(commit, None, &key);
        }
        Frame::Info { name, message } => {
            let again = info_frame(name, message.as_deref().unwrap_or(""));
            assert!(matches!(decode_frame(&again), Ok(Frame::Info { .. })));
        }
        Frame::Error { error, message } => {
            let again = error_frame(error, message.as_deref().unwrap_or(""));
            assert!(matches!(decode_frame(&again), Ok(Frame::Error { .. })));
        }
        Frame::Other { .. } => {}
    }
});
