//! TIDs (timestamp identifiers) and a clock that hands out strictly
//! increasing ones, used for commit `rev`s (<https://atproto.com/specs/tid>).
//!
//! A TID is a 64-bit integer written as 13 characters of "base32-sortable"
//! (`234567abcdefghijklmnopqrstuvwxyz`, most significant first), so string
//! order is numeric order. The layout of a generated TID is: top bit 0,
//! 53 bits of microseconds since the UNIX epoch, 10 bits of clock id.
//!
//! Parsing follows the syntax rule: 13 characters, the first in `2`-`7`,
//! `a`-`j` (anything above would need a 65th bit). That admits every `u64`,
//! including values with the top bit set, which a generator never produces.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use thiserror::Error;

/// Number of characters in a TID.
pub const TID_LEN: usize = 13;

/// Largest timestamp a generated TID can carry: 2^53 - 1 microseconds
/// (around the year 2255).
pub const MAX_TID_MICROS: u64 = (1 << 53) - 1;

/// Largest clock id: 10 bits.
pub const MAX_CLOCK_ID: u16 = (1 << 10) - 1;

const ALPHABET: &[u8; 32] = b"234567abcdefghijklmnopqrstuvwxyz";

/// Why a TID could not be parsed or made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TidError {
    /// The string is not 13 characters of base32-sortable with a valid
    /// first character.
    #[error("invalid TID {value:?}: {reason}")]
    Syntax {
        /// The input (cut to 32 characters).
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A timestamp or clock id too large for a TID.
    #[error("TID part out of range: {what} {value} (max {max})")]
    OutOfRange {
        /// Which part.
        what: &'static str,
        /// The value given.
        value: u64,
        /// Its maximum.
        max: u64,
    },

    /// No TID after the requested one fits in 53 bits of microseconds.
    #[error("no TID after {after}: timestamp space exhausted")]
    Exhausted {
        /// The TID that had to be exceeded.
        after: Tid,
    },
}

/// A timestamp identifier. Ordering (`Ord`) is the numeric order, which is
/// also the order of the string forms.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tid(u64);

impl Tid {
    /// Builds a TID from microseconds since the epoch and a clock id.
    pub fn from_parts(micros: u64, clock_id: u16) -> Result<Tid, TidError> {
        if micros > MAX_TID_MICROS {
            return Err(TidError::OutOfRange {
                what: "timestamp (µs)",
                value: micros,
                max: MAX_TID_MICROS,
            });
        }
        if clock_id > MAX_CLOCK_ID {
            return Err(TidError::OutOfRange {
                what: "clock id",
                value: clock_id.into(),
                max: MAX_CLOCK_ID.into(),
            });
        }
        Ok(Tid((micros << 10) | u64::from(clock_id)))
    }

    /// The TID with this integer value (every `u64` is a valid TID string).
    pub fn from_u64(value: u64) -> Tid {
        Tid(value)
    }

    /// The integer value.
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The timestamp part: microseconds since the UNIX epoch.
    pub fn micros(self) -> u64 {
        self.0 >> 10
    }

    /// The 10-bit clock id part.
    pub fn clock_id(self) -> u16 {
        (self.0 & u64::from(MAX_CLOCK_ID)) as u16
    }

    /// Parses the 13-character string form.
    pub fn parse(s: &str) -> Result<Tid, TidError> {
        let syntax = |reason| TidError::Syntax {
            value: s.chars().take(32).collect(),
            reason,
        };
        let bytes = s.as_bytes();
        if bytes.len() != TID_LEN {
            return Err(syntax("must be exactly 13 characters"));
        }
        let mut value: u64 = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let digit = match b {
                b'2'..=b'7' => b - b'2',
                b'a'..=b'z' => b - b'a' + 6,
                _ => return Err(syntax("only '2'-'7' and 'a'-'z' are allowed")),
            };
            if i == 0 && digit > 15 {
                return Err(syntax("the first character must be '2'-'7' or 'a'-'j'"));
            }
            // 4 bits from the first character, then 12 × 5 = 64 bits in all.
            value = (value << 5) | u64::from(digit);
        }
        Ok(Tid(value))
    }

    /// The smallest generated TID strictly after `self` whose timestamp is
    /// at least `micros` (using `clock_id`).
    fn next_after_at(self, micros: u64, clock_id: u16) -> Result<Tid, TidError> {
        let candidate = micros.max(self.micros().saturating_add(1));
        Tid::from_parts(candidate, clock_id).map_err(|_| TidError::Exhausted { after: self })
    }
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = [0u8; TID_LEN];
        for (i, slot) in out.iter_mut().enumerate() {
            let shift = 5 * (TID_LEN - 1 - i);
            *slot = ALPHABET[((self.0 >> shift) & 0x1f) as usize];
        }
        // Every byte comes from ALPHABET, which is ASCII.
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tid({self})")
    }
}

impl FromStr for Tid {
    type Err = TidError;

    fn from_str(s: &str) -> Result<Tid, TidError> {
        Tid::parse(s)
    }
}

/// Microseconds since the UNIX epoch by the wall clock (0 if the clock is
/// before 1970).
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Hands out strictly increasing TIDs, even when the wall clock stands still
/// or goes backwards: each TID's timestamp is the wall clock's, or one
/// microsecond past the previous TID's, whichever is later.
#[derive(Debug, Clone)]
pub struct TidClock {
    clock_id: u16,
    last: Option<Tid>,
}

impl TidClock {
    /// A clock with a random clock id (from the OS; if that fails, from the
    /// wall clock's sub-second nanoseconds).
    pub fn new() -> TidClock {
        let mut buf = [0u8; 2];
        let id = match getrandom::fill(&mut buf) {
            Ok(()) => u16::from_le_bytes(buf),
            Err(_) => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos() as u16)
                .unwrap_or(0),
        };
        TidClock {
            clock_id: id & MAX_CLOCK_ID,
            last: None,
        }
    }

    /// A clock with a fixed clock id (0..=1023).
    pub fn with_clock_id(clock_id: u16) -> Result<TidClock, TidError> {
        if clock_id > MAX_CLOCK_ID {
            return Err(TidError::OutOfRange {
                what: "clock id",
                value: clock_id.into(),
                max: MAX_CLOCK_ID.into(),
            });
        }
        Ok(TidClock {
            clock_id,
            last: None,
        })
    }

    /// This clock's id.
    pub fn clock_id(&self) -> u16 {
        self.clock_id
    }

    /// The last TID handed out, if any.
    pub fn last(&self) -> Option<Tid> {
        self.last
    }

    /// The next TID: later than every TID this clock handed out before.
    ///
    /// Fails only if the timestamp space (53 bits of µs) is exhausted.
    pub fn next_tid(&mut self) -> Result<Tid, TidError> {
        self.next_tid_at(now_micros())
    }

    /// The next TID that is also strictly after `prev` (for example the
    /// `rev` of the current head commit, which another clock may have made).
    pub fn next_after(&mut self, prev: Tid) -> Result<Tid, TidError> {
        self.next_after_at(prev, now_micros())
    }

    /// [`next_tid`](Self::next_tid) with the wall clock reading given (in µs).
    pub fn next_tid_at(&mut self, now_micros: u64) -> Result<Tid, TidError> {
        let tid = match self.last {
            None => Tid::from_parts(now_micros.min(MAX_TID_MICROS), self.clock_id)?,
            Some(last) => last.next_after_at(now_micros, self.clock_id)?,
        };
        self.last = Some(tid);
        Ok(tid)
    }

    /// [`next_after`](Self::next_after) with the wall clock reading given (in µs).
    pub fn next_after_at(&mut self, prev: Tid, now_micros: u64) -> Result<Tid, TidError> {
        let floor = match self.last {
            Some(last) if last > prev => last,
            _ => prev,
        };
        let tid = floor.next_after_at(now_micros, self.clock_id)?;
        self.last = Some(tid);
        Ok(tid)
    }
}

impl Default for TidClock {
    fn default() -> Self {
        TidClock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_form_round_trips() {
        for s in [
            "3jzfcijpj2z2a",
            "7777777777777",
            "3zzzzzzzzzzzz",
            "2222222222222",
            "jzzzzzzzzzzzz",
        ] {
            let tid = Tid::parse(s).unwrap();
            assert_eq!(tid.to_string(), s);
        }
        assert_eq!(Tid::from_u64(0).to_string(), "2222222222222");
        assert_eq!(Tid::from_u64(u64::MAX).to_string(), "jzzzzzzzzzzzz");
        assert_eq!(Tid::from_u64(1).to_string(), "2222222222223");
        assert_eq!(Tid::from_u64(32).to_string(), "2222222222232");
    }

    #[test]
    fn rejects_bad_strings() {
        for s in [
            "3jzfcijpj2z21",
            "0000000000000",
            "3JZFCIJPJ2Z2A",
            "3jzfcijpj2z2aa",
            "3jzfcijpj2z2",
            "222",
            "3jzf-cij-pj2z-2a",
            "zzzzzzzzzzzzz",
            "kjzfcijpj2z2a",
            "",
            "3jzfcijpj2z2é",
        ] {
            assert!(
                matches!(Tid::parse(s), Err(TidError::Syntax { .. })),
                "{s:?} accepted"
            );
        }
    }

    #[test]
    fn parts() {
        let tid = Tid::from_parts(1_700_000_000_000_000, 1023).unwrap();
        assert_eq!(tid.micros(), 1_700_000_000_000_000);
        assert_eq!(tid.clock_id(), 1023);
        assert!(Tid::from_parts(MAX_TID_MICROS + 1, 0).is_err());
        assert!(Tid::from_parts(0, 1024).is_err());
        // Generated TIDs keep the top bit clear, so start with '2'-'b'.
        let max = Tid::from_parts(MAX_TID_MICROS, MAX_CLOCK_ID).unwrap();
        assert_eq!(max.to_string(), "bzzzzzzzzzzzz");
    }

    #[test]
    fn string_order_is_numeric_order() {
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        let mut tids = Vec::new();
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            tids.push(Tid::from_u64(x >> (x % 40)));
        }
        for a in &tids {
            for b in &tids {
                assert_eq!(a.cmp(b), a.to_string().cmp(&b.to_string()));
            }
        }
    }

    #[test]
    fn clock_is_monotonic_when_time_goes_backwards() {
        let mut clock = TidClock::with_clock_id(5).unwrap();
        let times = [1000, 1000, 999, 5, 2000, 2000, 1500, 2001];
        let mut prev = None;
        for t in times {
            let tid = clock.next_tid_at(t).unwrap();
            assert_eq!(tid.clock_id(), 5);
            if let Some(p) = prev {
                assert!(tid > p, "{tid} not after {p} at t={t}");
                assert!(tid.to_string() > p.to_string());
            }
            prev = Some(tid);
        }
        assert_eq!(clock.last().unwrap().micros(), 2003);
    }

    #[test]
    fn next_after_exceeds_a_foreign_rev() {
        let mut clock = TidClock::with_clock_id(0).unwrap();
        // A rev from the future made by a clock with a higher id.
        let foreign = Tid::from_parts(5_000, 1000).unwrap();
        let tid = clock.next_after_at(foreign, 10).unwrap();
        assert!(tid > foreign);
        assert_eq!(tid.micros(), 5_001);
        // And the clock remembers it.
        assert!(clock.next_tid_at(10).unwrap() > tid);
        // A rev in the past does not hold the clock back.
        let tid = clock
            .next_after_at(Tid::from_parts(1, 0).unwrap(), 9_000)
            .unwrap();
        assert_eq!(tid.micros(), 9_000);
        // The wall clock wins when it is ahead.
        assert!(clock.next_after_at(tid, 20_000).unwrap().micros() == 20_000);
    }

    #[test]
    fn exhaustion_is_an_error() {
        let mut clock = TidClock::with_clock_id(0).unwrap();
        let top = Tid::from_parts(MAX_TID_MICROS, 0).unwrap();
        assert!(matches!(
            clock.next_after_at(top, 0),
            Err(TidError::Exhausted { .. })
        ));
        // Parsed TIDs may have the top bit set; nothing comes after them either.
        assert!(matches!(
            clock.next_after_at(Tid::from_u64(u64::MAX), 0),
            Err(TidError::Exhausted { .. })
        ));
        let tid = clock.next_tid_at(u64::MAX).unwrap();
        assert_eq!(tid.micros(), MAX_TID_MICROS);
        assert!(clock.next_tid_at(u64::MAX).is_err());
    }

    #[test]
    fn real_clock_is_strictly_increasing() {
        let mut clock = TidClock::new();
        let mut prev = clock.next_tid().unwrap();
        for _ in 0..10_000 {
            let tid = clock.next_tid().unwrap();
            assert!(tid > prev);
            prev = tid;
        }
        // A recent time: after 2024-01-01.
        assert!(prev.micros() > 1_704_067_200_000_000);
    }
}
