//! A full check of a store against its invariants: what a restart after a
//! crash, or a suspicious user, runs.

use std::collections::{BTreeMap, HashMap};

use cid::Cid;

use super::refs::{Kind, Loc, RefRow, row_cid};
use super::{RepoError, Repository};
use crate::blocks::MemoryBlocks;
use crate::mst::{Mst, Visit};
use crate::verify::{SignatureCheck, VerifyOptions, verify_repo};
use gelstore_crypto::PublicKey;
use gelstore_store::Table;

/// What [`Repository::check`] found (it returns an error on any problem).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// The account DID.
    pub did: String,
    /// The head commit's rev.
    pub rev: String,
    /// The head commit's CID.
    pub commit: Cid,
    /// The MST root.
    pub data: Cid,
    /// Number of records.
    pub records: u64,
    /// Number of MST nodes.
    pub nodes: u64,
    /// Number of blocks in the store.
    pub blocks: u64,
    /// Whether the commit signature was checked (it can be when the DID is
    /// a did:key or the store holds the signing key).
    pub signature_checked: bool,
}

impl Repository {
    /// Checks everything: the repository verifies as an untrusted one would
    /// ([`verify_repo`]: the commit is by the store's DID and its signature
    /// is valid when a key is known; every MST node is present and
    /// well-formed; every record block is present, hashes to its CID and is
    /// a valid record); the tree rebuilt from its entries has the same
    /// root; the store holds no other block; reference counts, block places
    /// and the record count match; the kept events are consecutive and the
    /// newest is the head commit's.
    pub fn check(&self) -> Result<CheckReport, RepoError> {
        let bad = |what: String| Err(RepoError::Corrupt(what));
        let commit = self.commit()?;
        if commit.data() != self.head.data || commit.rev() != self.head.rev {
            return bad("head commit does not match the loaded head".into());
        }
        let key = match (&self.key, self.did.starts_with("did:key:")) {
            (Some(k), _) => Some(k.public_key()),
            (None, true) => Some(PublicKey::from_did_key(&self.did).map_err(|e| {
                RepoError::Corrupt(format!("the store's DID is not a valid did:key: {e}"))
            })?),
            (None, false) => None,
        };
        let signature = match &key {
            Some(k) => SignatureCheck::Key(k),
            None => SignatureCheck::Skip,
        };
        // Commit, signature, every node (the MST loader's checks), every
        // repo path and every record block.
        let options = VerifyOptions::new(signature).expect_did(&self.did);
        let blocks = self.reader_blocks()?;
        let verified = verify_repo(&blocks, self.head.commit, &options)
            .map_err(|e| RepoError::Corrupt(e.to_string()))?;
        let entries = verified.records;
        let rebuilt = Mst::from_entries(MemoryBlocks::new(), entries.iter().cloned())?;
        if rebuilt.root() != self.head.data {
            return bad(format!(
                "the MST rebuilt from its {} entries has root {}, not {}",
                entries.len(),
                rebuilt.root(),
                self.head.data
            ));
        }
        if entries.len() as u64 != self.records {
            return bad(format!(
                "record count is {}, the tree holds {}",
                self.records,
                entries.len()
            ));
        }

        // Expected reference counts: the commit, each node, each key's record.
        let mut expected: HashMap<Cid, u64> = HashMap::new();
        expected.insert(self.head.commit, 1);
        let mut nodes = 0u64;
        for visit in Mst::load(&blocks, self.head.data)?.walk_once() {
            match visit? {
                Visit::Node { cid, .. } => {
                    nodes += 1;
                    *expected.entry(cid).or_default() += 1;
                }
                Visit::Leaf { value, .. } => *expected.entry(value).or_default() += 1,
            }
        }

        // The tables hold exactly the reachable blocks, counted right, each
        // where its count row says and created no later than the head.
        let mut rows: BTreeMap<Cid, RefRow> = BTreeMap::new();
        for item in self.engine.scan(Table::Refs, b"") {
            let (key, value) = item?;
            let cid = Cid::try_from(key.as_slice())
                .map_err(|_| RepoError::Corrupt("a refs key is not a CID".into()))?;
            rows.insert(cid, RefRow::decode(&cid, &value)?);
        }
        let mut blocks = 0u64;
        let rows_of = |kind: Kind| {
            self.engine
                .scan(kind.table(), b"")
                .map(move |item| item.map(|(key, value)| (kind, key, value)))
        };
        for item in rows_of(Kind::Record).chain(rows_of(Kind::Structure)) {
            let (kind, key, value) = item?;
            let loc = Loc::from_key(kind, &key)?;
            // A block whose bytes do not give its CID is not reachable.
            let cid = row_cid(value)?;
            if !expected.contains_key(&cid) {
                return bad(format!("unreachable block {cid} was not collected"));
            }
            if rows.get(&cid).map(|row| row.loc) != Some(loc) {
                return bad(format!("block {cid} is not where its count row says"));
            }
            if loc.rev > self.head.rev {
                return bad(format!("block {cid} was created after the head rev"));
            }
            blocks += 1;
        }
        if blocks != expected.len() as u64 {
            return bad(format!(
                "{} blocks are reachable, the store holds {blocks}",
                expected.len()
            ));
        }
        for (cid, count) in &expected {
            match rows.get(cid) {
                Some(row) if u64::from(row.count) == *count => {}
                Some(row) => {
                    return bad(format!(
                        "block {cid} is referenced {count} times, counted {}",
                        row.count
                    ));
                }
                None => return bad(format!("block {cid} has no reference count")),
            }
        }
        if rows.len() != expected.len() {
            return bad("reference counts of collected blocks remain".into());
        }
        if self.engine.scan(Table::RevLog, b"").next().is_some() {
            return bad("format-1 rev log rows remain".into());
        }
        // Issue 8: the newest event is the head commit's.
        self.check_events()?;

        Ok(CheckReport {
            did: self.did.clone(),
            rev: self.head.rev.to_string(),
            commit: self.head.commit,
            data: self.head.data,
            records: self.records,
            nodes,
            blocks,
            signature_checked: key.is_some(),
        })
    }
}
