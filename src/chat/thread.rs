//! The thread view (see docs/chat.md): a chat's message records, opened, as
//! the tree readers show.
//!
//! - A user message (TID key) holds its replies (`{key}.r{n}`), ordered by
//!   attempt number (never by key).
//! - A reply holds the user messages that continue from it (`parent`),
//!   ordered by key (TIDs: time order). A thread is a tree: one reply may
//!   have several continuations.
//! - A waiting reply's answer is the first user message continuing from it
//!   (the same rule `approval::check_answer` enforces). In the waiting
//!   reply's [`ReplyNode::view`] each pending call is replaced by the
//!   resolved copy the answer's reply repeats (the call marked
//!   `approved`/`denied`, then its result), taken from the answer's newest
//!   reply that has content; until that reply exists, the pending copy is
//!   marked with the answer's decision (unmentioned calls: `denied`). The
//!   answer's replies show their content without those repeated parts, so
//!   nothing is shown twice.
//!
//! Records that do not fit (a key that is neither a TID nor a reply key, a
//! role that does not match its key, a duplicate key) are in
//! [`Thread::unplaced`]; replies whose user message is missing, and user
//! messages whose parent is missing (or that form a cycle), are kept in
//! the arenas and listed in [`Thread::orphan_replies`] /
//! [`Thread::orphan_users`]. Building is iterative (no recursion over the
//! tree's depth) and `O(n log n)`.

use std::collections::{HashMap, HashSet};

use super::keys::{MessageKey, ReplyKey};
use super::record::ChatRecord;
use crate::lexicon::chat::gel::assistant::defs::{
    PlainContent, PlainContentPartsItem, ToolApprovalPartDecision, ToolCallPartApproval,
};
use crate::lexicon::chat::gel::assistant::message::{MessageRole, MessageStatus};
use crate::repo::tid::Tid;

/// A user message in the tree.
#[derive(Clone, Debug, PartialEq)]
pub struct UserNode {
    pub key: Tid,
    pub record: ChatRecord,
    /// Its replies (indexes into [`Thread::replies`]) by attempt number.
    pub replies: Vec<usize>,
    /// The waiting reply this message answers, if it is an answer.
    pub answers: Option<ReplyKey>,
}

/// A reply in the tree.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplyNode {
    pub key: ReplyKey,
    pub record: ChatRecord,
    /// What readers show: the opened content, with waiting copies replaced
    /// by the resolved ones and repeated parts left out (see the module).
    pub view: Option<PlainContent>,
    /// The user messages continuing from it (indexes into
    /// [`Thread::users`]) by key.
    pub children: Vec<usize>,
    /// For a waiting reply, the user message that answered it.
    pub answer: Option<usize>,
}

/// A chat's messages as a tree.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Thread {
    pub users: Vec<UserNode>,
    pub replies: Vec<ReplyNode>,
    /// User messages with no parent, by key.
    pub roots: Vec<usize>,
    /// User messages not reachable from a root (missing parent, cycle).
    pub orphan_users: Vec<usize>,
    /// Replies whose user message is missing.
    pub orphan_replies: Vec<usize>,
    /// Records that are not messages of this tree.
    pub unplaced: Vec<ChatRecord>,
}

impl Thread {
    /// Builds the tree from a chat's message records, in any order.
    pub fn build(records: impl IntoIterator<Item = ChatRecord>) -> Thread {
        let mut t = Thread::default();
        let mut seen = HashSet::new();
        let mut records: Vec<ChatRecord> = records.into_iter().collect();
        records.sort_by(|a, b| a.key.cmp(&b.key));
        for r in records {
            if !seen.insert(r.key.clone()) {
                t.unplaced.push(r);
                continue;
            }
            match (r.parsed_key(), &r.message.role) {
                (Some(MessageKey::User(key)), MessageRole::User) => t.users.push(UserNode {
                    key,
                    record: r,
                    replies: Vec::new(),
                    answers: None,
                }),
                (Some(MessageKey::Reply(key)), MessageRole::Assistant) => {
                    t.replies.push(ReplyNode {
                        key,
                        view: r.content.clone(),
                        record: r,
                        children: Vec::new(),
                        answer: None,
                    })
                }
                _ => t.unplaced.push(r),
            }
        }
        let user_at: HashMap<Tid, usize> = t
            .users
            .iter()
            .enumerate()
            .map(|(i, u)| (u.key, i))
            .collect();
        let reply_at: HashMap<ReplyKey, usize> = t
            .replies
            .iter()
            .enumerate()
            .map(|(i, r)| (r.key, i))
            .collect();
        for (i, r) in t.replies.iter().enumerate() {
            match user_at.get(&r.key.message()) {
                Some(&u) => t.users[u].replies.push(i),
                None => t.orphan_replies.push(i),
            }
        }
        for (i, u) in t.users.iter().enumerate() {
            match &u.record.message.parent {
                None => t.roots.push(i),
                Some(p) => {
                    if let Some(&r) = ReplyKey::parse(p.as_str())
                        .ok()
                        .and_then(|k| reply_at.get(&k))
                    {
                        t.replies[r].children.push(i);
                    }
                }
            }
        }
        let replies = &t.replies;
        for u in &mut t.users {
            u.replies.sort_by_key(|&r| replies[r].key.attempt());
        }
        // Reachability from the roots (iterative).
        let mut reachable = vec![false; t.users.len()];
        let mut stack = t.roots.clone();
        while let Some(u) = stack.pop() {
            if std::mem::replace(&mut reachable[u], true) {
                continue;
            }
            for &r in &t.users[u].replies {
                stack.extend(&t.replies[r].children);
            }
        }
        t.orphan_users = (0..t.users.len()).filter(|&u| !reachable[u]).collect();
        t.resolve_approvals();
        t
    }

    /// The replies of user message `user`, by attempt number.
    pub fn replies_of(&self, user: usize) -> impl Iterator<Item = &ReplyNode> {
        self.users[user].replies.iter().map(|&r| &self.replies[r])
    }

    fn resolve_approvals(&mut self) {
        for w in 0..self.replies.len() {
            if self.replies[w].record.message.status != MessageStatus::Waiting {
                continue;
            }
            let Some(&answer) = self.replies[w].children.first() else {
                continue;
            };
            let Some(content) = self.replies[w].record.content.clone() else {
                continue;
            };
            let pending: HashSet<String> = super::approval::waiting_calls(&content)
                .map(|c| c.call_id.clone())
                .collect();
            if pending.is_empty() {
                continue;
            }
            self.replies[w].answer = Some(answer);
            self.users[answer].answers = Some(self.replies[w].key);
            // The answer's decisions (unmentioned calls are denied).
            let decisions: HashMap<String, ToolCallPartApproval> = self.users[answer]
                .record
                .content
                .iter()
                .flat_map(|c| c.parts.iter())
                .filter_map(|p| match p {
                    PlainContentPartsItem::ToolApprovalPart(a) => Some((
                        a.call_id.clone(),
                        if a.decision == ToolApprovalPartDecision::Approved {
                            ToolCallPartApproval::Approved
                        } else {
                            ToolCallPartApproval::Denied
                        },
                    )),
                    _ => None,
                })
                .collect();
            // The resolved copies, from the answer's newest reply with content.
            let resolving = self.users[answer].replies.iter().rev().copied().find(|&r| {
                let m = &self.replies[r].record;
                m.content.is_some() && m.message.status != MessageStatus::Pending
            });
            let resolved = resolving
                .and_then(|r| self.replies[r].record.content.as_ref())
                .map(|c| resolved_copies(c, &pending))
                .unwrap_or_default();
            let mut view = Vec::with_capacity(content.parts.len());
            for p in &content.parts {
                match p {
                    PlainContentPartsItem::ToolCallPart(c) if pending.contains(&c.call_id) => {
                        if let Some(parts) = resolved.get(&c.call_id) {
                            view.extend(parts.iter().cloned());
                        } else {
                            let mut c = c.clone();
                            c.approval = Some(
                                decisions
                                    .get(&c.call_id)
                                    .cloned()
                                    .unwrap_or(ToolCallPartApproval::Denied),
                            );
                            view.push(PlainContentPartsItem::ToolCallPart(c));
                        }
                    }
                    other => view.push(other.clone()),
                }
            }
            self.replies[w].view = Some(PlainContent {
                parts: view,
                error: None,
                extra: content.extra.clone(),
            });
            // The answer's replies: leave the repeated parts out.
            for &r in &self.users[answer].replies.clone() {
                if let Some(v) = self.replies[r].view.as_mut() {
                    v.parts.retain(|p| !is_repeat(p, &pending));
                }
            }
        }
    }
}

fn is_repeat(p: &PlainContentPartsItem, pending: &HashSet<String>) -> bool {
    match p {
        PlainContentPartsItem::ToolCallPart(c) => {
            pending.contains(&c.call_id)
                && matches!(
                    c.approval,
                    Some(ToolCallPartApproval::Approved | ToolCallPartApproval::Denied)
                )
        }
        PlainContentPartsItem::ToolResultPart(r) => pending.contains(&r.call_id),
        _ => false,
    }
}

/// For each pending call id repeated in `content`: the decided call and
/// its first result.
fn resolved_copies(
    content: &PlainContent,
    pending: &HashSet<String>,
) -> HashMap<String, Vec<PlainContentPartsItem>> {
    let mut out: HashMap<String, Vec<PlainContentPartsItem>> = HashMap::new();
    for p in &content.parts {
        match p {
            PlainContentPartsItem::ToolCallPart(c) if is_repeat(p, pending) => {
                out.entry(c.call_id.clone())
                    .or_insert_with(|| vec![p.clone()]);
            }
            PlainContentPartsItem::ToolResultPart(r) => {
                if let Some(v) = out.get_mut(&r.call_id)
                    && v.len() == 1
                {
                    v.push(p.clone());
                }
            }
            _ => {}
        }
    }
    out
}
