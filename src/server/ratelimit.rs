//! Failed password attempts, limited with the reference PDS's
//! `createSession` figures: once 30 attempts failed in 5 minutes (or 300 in
//! a day), every attempt is refused (`RateLimitExceeded`) until the oldest
//! leaves the window. Only failures count: `gelstore sync` logs in on every
//! run, and a frequent cron sync must not lock its own account out. (How
//! many hashes run at once is bounded separately, in `AppState`.) One
//! account per server, so one counter.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `(window, most attempts in it)`.
const WINDOWS: [(Duration, usize); 2] = [
    (Duration::from_secs(5 * 60), 30),
    (Duration::from_secs(24 * 60 * 60), 300),
];

/// The failed attempts of the last day.
#[derive(Debug, Default)]
pub struct AttemptLimiter {
    attempts: Mutex<VecDeque<Instant>>,
}

/// An attempt was refused: when the next one is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// How long until an attempt is allowed again.
    pub retry_after: Duration,
}

impl AttemptLimiter {
    /// Whether an attempt at `now` may go ahead.
    pub fn check(&self, now: Instant) -> Result<(), Limited> {
        let mut failures = self.lock();
        let longest = WINDOWS[WINDOWS.len() - 1].0;
        while failures
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= longest)
        {
            failures.pop_front();
        }
        for (window, most) in WINDOWS {
            // The failures inside this window are the newest ones.
            let inside = failures
                .iter()
                .rev()
                .take_while(|t| now.saturating_duration_since(**t) < window)
                .count();
            if inside >= most {
                // The oldest failure in the window leaves it first.
                let oldest = failures[failures.len() - inside];
                return Err(Limited {
                    retry_after: window.saturating_sub(now.saturating_duration_since(oldest)),
                });
            }
        }
        Ok(())
    }

    /// Counts a failed attempt at `now`.
    pub fn failed(&self, now: Instant) {
        self.lock().push_back(now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Instant>> {
        self.attempts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_failures_in_five_minutes_then_three_hundred_a_day() {
        let limiter = AttemptLimiter::default();
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        for i in 0..30 {
            limiter.check(at(i)).unwrap();
            limiter.failed(at(i));
        }
        let refused = limiter.check(at(30)).unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(270));
        // Once the first failure left the window, one more is allowed.
        limiter.check(at(300)).unwrap();
        limiter.failed(at(300));
        assert!(limiter.check(at(300)).is_err());
        // Spread out, the daily window binds: 300 failures in the day.
        let limiter = AttemptLimiter::default();
        for i in 0..300u64 {
            limiter.check(at(i * 20)).unwrap();
            limiter.failed(at(i * 20));
        }
        let refused = limiter.check(at(300 * 20)).unwrap_err();
        assert_eq!(
            refused.retry_after,
            Duration::from_secs(24 * 60 * 60 - 6000)
        );
        limiter.check(at(24 * 60 * 60)).unwrap();
    }
}
