//! Following the repository's `#commit` event log: what changed since a
//! cursor. Every state derived from the records (the server's chat index,
//! its blob index, the assistant's watcher) follows the log through one
//! [`Follower`], so they agree on when the log cannot tell and everything
//! must be looked at again: no cursor yet, events pruned, a gap, a frame
//! that does not decode, a `tooBig` commit (its event lists no ops) without
//! a hint from the writer, or a head that moved with nothing logged.

use super::{RepoError, Repository};
use crate::events::{Frame, OpAction, decode_frame};
use gelstore_model::Cid;

/// What a look at the log found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changes {
    /// Nothing after the cursor.
    None,
    /// The record ops after the cursor, in log order (`collection/rkey`).
    Ops(Vec<(OpAction, String)>),
    /// The log does not tell what changed: look at every record.
    Rebuild,
}

/// A cursor into the event log (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Follower {
    seq: Option<u64>,
}

impl Follower {
    /// A follower with no cursor: its first look is a rebuild.
    pub fn new() -> Follower {
        Follower::default()
    }

    /// A follower whose state is current as of event `seq`.
    pub fn at(seq: u64) -> Follower {
        Follower { seq: Some(seq) }
    }

    /// The last event taken in, if any.
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }

    /// What changed after the cursor up to the log's last event, and moves
    /// the cursor there. `hint` gives the ops of a `tooBig` commit by its
    /// CID when the writer kept them.
    pub fn next(
        &mut self,
        repo: &Repository,
        hint: impl Fn(&Cid) -> Option<Vec<(OpAction, String)>>,
    ) -> Result<Changes, RepoError> {
        let last = repo.last_event_seq()?.unwrap_or(0);
        let changes = self.look(repo, last, hint)?;
        self.seq = Some(last);
        Ok(changes)
    }

    fn look(
        &self,
        repo: &Repository,
        last: u64,
        hint: impl Fn(&Cid) -> Option<Vec<(OpAction, String)>>,
    ) -> Result<Changes, RepoError> {
        let Some(cursor) = self.seq else {
            return Ok(Changes::Rebuild);
        };
        if cursor >= last {
            return Ok(if cursor == last {
                Changes::None
            } else {
                // The log went backwards (a store replaced under us).
                Changes::Rebuild
            });
        }
        if repo.is_outdated_cursor(cursor)? {
            return Ok(Changes::Rebuild);
        }
        let mut ops = Vec::new();
        let mut expected = cursor + 1;
        for event in repo.events_since(Some(cursor))? {
            let event = match event {
                Ok(e) => e,
                Err(RepoError::EventsPruned { .. }) => return Ok(Changes::Rebuild),
                Err(e) => return Err(e),
            };
            if event.seq != expected {
                return Ok(Changes::Rebuild);
            }
            expected += 1;
            match decode_frame(&event.frame) {
                Ok(Frame::Commit(c)) if !c.too_big => {
                    ops.extend(c.ops.into_iter().map(|op| (op.action, op.path)));
                }
                Ok(Frame::Commit(c)) => match hint(&c.commit) {
                    Some(hinted) => ops.extend(hinted),
                    None => return Ok(Changes::Rebuild),
                },
                Ok(_) => {}
                Err(_) => return Ok(Changes::Rebuild),
            }
        }
        // The head moved but the log holds nothing after the cursor.
        if expected == cursor + 1 {
            return Ok(Changes::Rebuild);
        }
        Ok(Changes::Ops(ops))
    }
}

/// The ops of the last few commits, kept by the writer for the followers:
/// a `tooBig` commit's event lists none.
#[derive(Clone, Debug, Default)]
pub struct WriteHints {
    /// Oldest first.
    recent: std::collections::VecDeque<(Cid, Vec<(OpAction, String)>)>,
}

impl WriteHints {
    /// Commits remembered; older ones are forgotten (a follower that falls
    /// that far behind a `tooBig` commit rebuilds).
    pub const KEPT: usize = 64;

    /// Remembers the ops of `commit`.
    pub fn record(&mut self, commit: Cid, ops: &[crate::mst::RecordOp]) {
        let ops = ops
            .iter()
            .map(|op| {
                let action = match (op.prev, op.cid) {
                    (None, _) => OpAction::Create,
                    (_, None) => OpAction::Delete,
                    _ => OpAction::Update,
                };
                (action, op.key.clone())
            })
            .collect();
        self.recent.push_back((commit, ops));
        while self.recent.len() > Self::KEPT {
            self.recent.pop_front();
        }
    }

    /// The ops of `commit`, if remembered.
    pub fn get(&self, commit: &Cid) -> Option<Vec<(OpAction, String)>> {
        self.recent
            .iter()
            .rev()
            .find(|(c, _)| c == commit)
            .map(|(_, ops)| ops.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::repository::Write;
    use gelstore_crypto::{KeyAlgorithm, SigningKey};
    use gelstore_store::MemoryEngine;

    const NOTE: &str = "com.example.note";

    fn note(i: usize) -> serde_json::Value {
        serde_json::json!({"$type": NOTE, "n": i})
    }

    #[test]
    fn ops_in_order_and_rebuild_when_the_log_cannot_tell() {
        let key = SigningKey::generate(KeyAlgorithm::K256).unwrap();
        let mut repo = Repository::init_engine(Arc::new(MemoryEngine::new()), key).unwrap();
        let mut f = Follower::new();
        let no_hints = |_: &Cid| None;
        assert_eq!(f.next(&repo, no_hints).unwrap(), Changes::Rebuild);
        assert_eq!(f.next(&repo, no_hints).unwrap(), Changes::None);
        repo.apply(&[Write::create(NOTE, "a", note(1))]).unwrap();
        repo.apply(&[
            Write::update(NOTE, "a", note(2)),
            Write::create(NOTE, "b", note(3)),
        ])
        .unwrap();
        assert_eq!(
            f.next(&repo, no_hints).unwrap(),
            Changes::Ops(vec![
                (OpAction::Create, format!("{NOTE}/a")),
                (OpAction::Update, format!("{NOTE}/a")),
                (OpAction::Create, format!("{NOTE}/b")),
            ])
        );
        // A commit too big for its event: its hint, or else a rebuild.
        let many: Vec<Write> = (0..=crate::events::MAX_OPS)
            .map(|i| Write::create(NOTE, format!("m{i:04}"), note(i)))
            .collect();
        let info = repo.apply(&many).unwrap();
        let mut hints = WriteHints::default();
        let mut g = f.clone();
        assert_eq!(f.next(&repo, no_hints).unwrap(), Changes::Rebuild);
        hints.record(info.head.commit, &info.ops);
        let Changes::Ops(ops) = g.next(&repo, |c| hints.get(c)).unwrap() else {
            panic!("the hint gives the ops")
        };
        assert_eq!(ops.len(), crate::events::MAX_OPS + 1);
        assert!(ops.iter().all(|(a, _)| *a == OpAction::Create));
        // A cursor ahead of the log (a store replaced under it).
        let mut ahead = Follower::at(repo.last_event_seq().unwrap().unwrap() + 5);
        assert_eq!(ahead.next(&repo, no_hints).unwrap(), Changes::Rebuild);
    }

    #[test]
    fn hints_keep_only_the_latest_commits() {
        let key = SigningKey::generate(KeyAlgorithm::K256).unwrap();
        let mut repo = Repository::init_engine(Arc::new(MemoryEngine::new()), key).unwrap();
        let mut hints = WriteHints::default();
        let mut first = None;
        for i in 0..=WriteHints::KEPT {
            let info = repo
                .apply(&[Write::create(NOTE, format!("k{i}"), note(i))])
                .unwrap();
            first.get_or_insert(info.head.commit);
            hints.record(info.head.commit, &info.ops);
        }
        assert!(hints.get(&first.unwrap()).is_none());
        assert_eq!(hints.recent.len(), WriteHints::KEPT);
    }
}
