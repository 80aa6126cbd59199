//! Record keys of `chat.gel.assistant.message` (see docs/chat.md).
//!
//! A user message's key is a TID. A reply's key is the user message's key,
//! `.r`, and the attempt number in decimal without zero padding:
//! `3lbqzdw5pzk22.r0`, `3lbqzdw5pzk22.r10`. The attempt is the
//! `generationRequest.attempt` of the lexicon, `0..=1000`.
//!
//! Replies are ordered by attempt number, never by key string (`.r10` sorts
//! before `.r2` as a string): [`ReplyKey`]'s `Ord` is (message TID, attempt)
//! as numbers, and [`sort_by_attempt`] sorts keys given as strings.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::lexicon_runtime::RecordKey;
use crate::repo::tid::Tid;

/// Largest attempt number (`generationRequest.attempt` maximum).
pub const MAX_ATTEMPT: u16 = 1000;

/// Why a string is not a message key of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The user-message part is not a TID.
    #[error("message key {key:?} is not a TID: {reason}")]
    NotATid { key: String, reason: String },
    /// The key has no `.r{attempt}` suffix (it is not a reply key).
    #[error("key {key:?} is not a reply key ('{{messageKey}}.r{{attempt}}')")]
    NotAReply { key: String },
    /// The attempt is not plain decimal digits without zero padding.
    #[error("reply key {key:?}: attempt {attempt:?} must be decimal digits without zero padding")]
    BadAttempt { key: String, attempt: String },
    /// The attempt is above [`MAX_ATTEMPT`] (or negative).
    #[error("attempt {attempt} is outside 0..={MAX_ATTEMPT}")]
    AttemptOutOfRange { attempt: i64 },
}

fn cut(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A reply attempt number, `0..=1000`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Attempt(u16);

impl Attempt {
    /// The first attempt.
    pub const FIRST: Attempt = Attempt(0);

    /// Checks the range (`generationRequest.attempt` is an `i64` on the wire).
    pub fn new(attempt: i64) -> Result<Attempt, KeyError> {
        match u16::try_from(attempt) {
            Ok(a) if a <= MAX_ATTEMPT => Ok(Attempt(a)),
            _ => Err(KeyError::AttemptOutOfRange { attempt }),
        }
    }

    pub fn get(self) -> u16 {
        self.0
    }

    /// The next attempt (a regeneration), if there is one.
    pub fn next(self) -> Result<Attempt, KeyError> {
        Attempt::new(i64::from(self.0) + 1)
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Parses a user message's key (a TID).
pub fn parse_message_key(key: &str) -> Result<Tid, KeyError> {
    Tid::parse(key).map_err(|e| KeyError::NotATid {
        key: cut(key),
        reason: e.to_string(),
    })
}

/// The key of one reply: `{message}.r{attempt}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReplyKey {
    message: Tid,
    attempt: Attempt,
}

impl ReplyKey {
    pub fn new(message: Tid, attempt: Attempt) -> ReplyKey {
        ReplyKey { message, attempt }
    }

    /// The first reply (`.r0`) to `message`.
    pub fn first(message: Tid) -> ReplyKey {
        ReplyKey::new(message, Attempt::FIRST)
    }

    /// Parses `{tid}.r{attempt}`: a TID, `.r`, and `0`, or digits not
    /// starting with `0`, at most [`MAX_ATTEMPT`].
    pub fn parse(key: &str) -> Result<ReplyKey, KeyError> {
        let Some((message, attempt)) = key.split_once(".r") else {
            return Err(KeyError::NotAReply { key: cut(key) });
        };
        let message = parse_message_key(message)?;
        let bad = || KeyError::BadAttempt {
            key: cut(key),
            attempt: cut(attempt),
        };
        let digits = attempt.bytes().all(|b| b.is_ascii_digit());
        if attempt.is_empty() || !digits || (attempt.len() > 1 && attempt.starts_with('0')) {
            return Err(bad());
        }
        // At most 4 digits can be in range; longer strings would overflow.
        if attempt.len() > 4 {
            return Err(KeyError::AttemptOutOfRange {
                attempt: attempt.parse().unwrap_or(i64::MAX),
            });
        }
        let n: i64 = attempt.parse().map_err(|_| bad())?;
        Ok(ReplyKey::new(message, Attempt::new(n)?))
    }

    /// The user message this replies to.
    pub fn message(&self) -> Tid {
        self.message
    }

    pub fn attempt(&self) -> Attempt {
        self.attempt
    }

    /// The key of the next attempt (a regeneration).
    pub fn next_attempt(&self) -> Result<ReplyKey, KeyError> {
        Ok(ReplyKey::new(self.message, self.attempt.next()?))
    }

    /// The key as a lexicon `record-key` value.
    pub fn record_key(&self) -> RecordKey {
        RecordKey::new(self.to_string()).expect("a TID, '.r' and digits form a valid record key")
    }
}

impl Ord for ReplyKey {
    /// Numeric: by message TID, then by attempt number.
    fn cmp(&self, other: &Self) -> Ordering {
        (self.message, self.attempt).cmp(&(other.message, other.attempt))
    }
}

impl PartialOrd for ReplyKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for ReplyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.r{}", self.message, self.attempt)
    }
}

impl FromStr for ReplyKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<ReplyKey, KeyError> {
        ReplyKey::parse(s)
    }
}

/// A `chat.gel.assistant.message` key of either kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageKey {
    /// A user message: a TID.
    User(Tid),
    /// A reply: `{tid}.r{attempt}`.
    Reply(ReplyKey),
}

impl MessageKey {
    pub fn parse(key: &str) -> Result<MessageKey, KeyError> {
        if key.contains('.') {
            ReplyKey::parse(key).map(MessageKey::Reply)
        } else {
            parse_message_key(key).map(MessageKey::User)
        }
    }
}

impl fmt::Display for MessageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageKey::User(t) => t.fmt(f),
            MessageKey::Reply(r) => r.fmt(f),
        }
    }
}

/// Sorts reply keys given as strings by (message, attempt number); keys
/// that do not parse go last, in string order.
pub fn sort_by_attempt<S: AsRef<str>>(keys: &mut [S]) {
    keys.sort_by_cached_key(|k| {
        let k = k.as_ref();
        match ReplyKey::parse(k) {
            Ok(r) => (0u8, Some(r), String::new()),
            Err(_) => (1, None, k.to_string()),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "3lbqzdw5pzk22";

    #[test]
    fn format_and_parse() {
        let m = parse_message_key(T).unwrap();
        for n in [0i64, 1, 9, 10, 99, 100, 1000] {
            let k = ReplyKey::new(m, Attempt::new(n).unwrap());
            let s = k.to_string();
            assert_eq!(s, format!("{T}.r{n}"));
            assert_eq!(ReplyKey::parse(&s).unwrap(), k);
            assert_eq!(MessageKey::parse(&s).unwrap(), MessageKey::Reply(k));
            assert_eq!(k.record_key().as_str(), s);
        }
        assert_eq!(MessageKey::parse(T).unwrap(), MessageKey::User(m));
    }

    #[test]
    fn refuses_bad_keys() {
        let bad_attempt = |s: &str| {
            matches!(
                ReplyKey::parse(&format!("{T}.r{s}")),
                Err(KeyError::BadAttempt { .. })
            )
        };
        for s in ["", "01", "00", "+1", "-1", "1a", " 1", "1.0", "١"] {
            assert!(bad_attempt(s), "{s:?}");
        }
        for s in ["1001", "9999", "10000", "99999999999999999999999"] {
            assert!(
                matches!(
                    ReplyKey::parse(&format!("{T}.r{s}")),
                    Err(KeyError::AttemptOutOfRange { .. })
                ),
                "{s}"
            );
        }
        assert!(matches!(
            ReplyKey::parse(T),
            Err(KeyError::NotAReply { .. })
        ));
        assert!(matches!(
            ReplyKey::parse("notatid.r1"),
            Err(KeyError::NotATid { .. })
        ));
        assert!(matches!(
            ReplyKey::parse(&format!("{T}.x1")),
            Err(KeyError::NotAReply { .. })
        ));
        assert!(Attempt::new(-1).is_err());
        assert!(Attempt::new(1001).is_err());
        assert!(Attempt::new(1000).unwrap().next().is_err());
    }

    #[test]
    fn orders_by_attempt_not_by_string() {
        let mut keys: Vec<String> = (0..12).rev().map(|n| format!("{T}.r{n}")).collect();
        keys.push("junk".into());
        sort_by_attempt(&mut keys);
        let want: Vec<String> = (0..12)
            .map(|n| format!("{T}.r{n}"))
            .chain(["junk".to_string()])
            .collect();
        assert_eq!(keys, want);
        let r2 = ReplyKey::parse(&format!("{T}.r2")).unwrap();
        let r10 = ReplyKey::parse(&format!("{T}.r10")).unwrap();
        assert!(r2 < r10);
        assert!(r2.to_string() > r10.to_string());
        assert_eq!(r2.next_attempt().unwrap().attempt().get(), 3);
    }
}
