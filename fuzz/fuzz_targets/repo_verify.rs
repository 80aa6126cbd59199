//! Feeds arbitrary bytes to the repository verifier, the record-proof
//! verifier and the MST node loader. Each may fail, but must not panic,
//! and what they accept must hold up:
//!
//! - a verified repository CAR re-exports (in streamable order) to a CAR
//!   that verifies to the same repository, and a record proof built from
//!   it proves each sampled key's CID;
//! - a proof the verifier accepts names a CID that its own blocks show;
//! - a single node block that loads and walks completely is canonical:
//!   building a tree from its entries gives back the same CID.

#![no_main]

use gelstore::model::cid_for_cbor;
use gelstore::repo::blocks::MemoryBlocks;
use gelstore::repo::export::export_repo_to_vec;
use gelstore::repo::mst::{Mst, MstError};
use gelstore::repo::proof::{record_proof, verify_record_proof};
use gelstore::repo::verify::{SignatureCheck, SignatureStatus, VerifyOptions, verify_repo_car};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    repo_car(data);
    proof(data);
    node(data);
});

fn repo_car(data: &[u8]) {
    let skip = VerifyOptions::new(SignatureCheck::Skip);
    let Ok(verified) = verify_repo_car(data, &skip) else {
        return;
    };
    let summary = &verified.repo.summary;
    assert_eq!(summary.signature, SignatureStatus::NotChecked);
    assert_eq!(summary.record_count, verified.repo.records.len());
    let commit = summary.commit_cid;
    let exported = export_repo_to_vec(&verified.car, commit).expect("a verified repo exports");
    let again = verify_repo_car(&exported, &skip).expect("a re-export verifies");
    assert_eq!(
        again.repo, verified.repo,
        "re-export changed the repository"
    );
    assert_eq!(
        again.unreachable_blocks, 0,
        "an export holds only reachable blocks"
    );
    for (key, cid) in verified.repo.records.iter().step_by(7).take(8) {
        let proof = record_proof(&verified.car, commit, key).expect("a proof builds");
        let proven = verify_record_proof(&proof, key, &skip).expect("a built proof verifies");
        assert_eq!(proven.cid, Some(*cid));
        assert!(proven.record.is_some());
    }
}

fn proof(data: &[u8]) {
    let skip = VerifyOptions::new(SignatureCheck::Skip);
    for key in ["com.example.record/3jqfcqzm3fo2j", "app.bsky.feed.post/a"] {
        let Ok(proven) = verify_record_proof(data, key, &skip) else {
            continue;
        };
        if let (Some(cid), Some(record)) = (proven.cid, &proven.record) {
            assert_eq!(cid_for_cbor(record), cid);
        }
    }
}

fn node(data: &[u8]) {
    let cid = cid_for_cbor(data);
    let mut blocks = MemoryBlocks::new();
    blocks.insert(cid, data.to_vec());
    let Ok(tree) = Mst::load(&blocks, cid) else {
        return;
    };
    let entries: Result<Vec<(String, _)>, MstError> = tree.entries().collect();
    let Ok(entries) = entries else {
        // A node with subtrees: the children are not here.
        return;
    };
    let rebuilt = Mst::from_entries(MemoryBlocks::new(), entries).expect("loaded keys are valid");
    assert_eq!(
        rebuilt.root(),
        cid,
        "an accepted single node is not canonical"
    );
}
