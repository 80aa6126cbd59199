//! CAR export: the whole repository, or the blocks created after a rev.

use std::collections::HashSet;
use std::io::Write;

use cid::Cid;

use super::refs::{Loc, row_cid};
use super::walk::{Visit, walk};
use super::{RepoError, Repository};
use crate::blocks::BlockSource;
use crate::car::CarWriter;
use crate::export::export_repo;
use crate::tid::Tid;
use gelstore_store::Table;

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportStats {
    /// Blocks written (the commit included).
    pub blocks: usize,
    /// Bytes written (the whole CAR).
    pub bytes: u64,
}

impl Repository {
    /// Writes the repository as a CAR v1 with the head commit as its only
    /// root: the commit block first, then the MST nodes and records in
    /// streamable order (each node before its subtrees, records in key
    /// order; a record shared by several keys appears once), as
    /// [`export_repo`] does.
    ///
    /// With `since`, only the blocks created by commits after that rev are
    /// written (plus the commit), in the same order: a diff that brings a
    /// copy at `since` up to the head. The walk skips every subtree whose
    /// root node is older than `since`, so its cost follows the size of the
    /// diff. Returns the writer, and what was written.
    pub fn export<W: Write>(
        &self,
        out: W,
        since: Option<Tid>,
    ) -> Result<(W, ExportStats), RepoError> {
        let blocks = self.reader_blocks()?;
        let Some(since) = since else {
            let (out, stats) = export_repo(&blocks, self.head.commit, out)?;
            let blocks = 1 + stats.mst_nodes + stats.record_blocks;
            let bytes = stats.bytes;
            return Ok((out, ExportStats { blocks, bytes }));
        };
        let newer = Some(self.created_after(since)?);
        let is_new = |cid: &Cid| newer.as_ref().is_none_or(|set| set.contains(cid));

        let mut car = CarWriter::new(out, &[self.head.commit])?;
        let commit = required(&blocks, &self.head.commit)?;
        car.write_block(&self.head.commit, &commit)?;
        let mut count = 1;
        let mut seen_records: HashSet<Cid> = HashSet::new();
        walk(
            &blocks,
            self.head.data,
            // A node older than `since` has only older nodes and records
            // below it (any change below a node replaces the node).
            &mut |cid| is_new(cid),
            &mut |visit| {
                match visit {
                    Visit::Node(cid, bytes) => {
                        car.write_block(cid, bytes)?;
                        count += 1;
                    }
                    Visit::Record(cid) => {
                        if is_new(cid) && seen_records.insert(*cid) {
                            let bytes = required(&blocks, cid)?;
                            car.write_block(cid, &bytes)?;
                            count += 1;
                        }
                    }
                }
                Ok(())
            },
        )?;
        let bytes = car.bytes_written();
        let out = car.finish()?;
        Ok((
            out,
            ExportStats {
                blocks: count,
                bytes,
            },
        ))
    }

    /// The CIDs of the live blocks created by commits with a rev after `rev`.
    fn created_after(&self, rev: Tid) -> Result<HashSet<Cid>, RepoError> {
        let mut out = HashSet::new();
        let Some(start) = Loc::after(rev) else {
            return Ok(out);
        };
        for table in [Table::Blocks, Table::Nodes] {
            for item in self.engine.scan(table, &start) {
                let (_, row) = item?;
                out.insert(row_cid(row)?);
            }
        }
        Ok(out)
    }
}

/// A block that must be in the store.
fn required(blocks: &impl BlockSource, cid: &Cid) -> Result<Vec<u8>, RepoError> {
    blocks
        .get(cid)
        .map_err(|e| RepoError::Corrupt(e.to_string()))?
        .ok_or_else(|| RepoError::Corrupt(format!("block {cid} is missing")))
}
