//! Failed password attempts, limited per client with the reference PDS's
//! `createSession` figures: once 30 attempts failed in 5 minutes (or 300
//! in a day) from one client address, its attempts are refused
//! (`RateLimitExceeded`) until the oldest leaves the window. Keyed by
//! address, as the reference keys by identifier and address, so a
//! stranger cannot lock the owner out; only failures count, so a frequent
//! `gelstore sync` (one login per run) never locks itself out.
//!
//! An attempt is counted as a failure before its hash runs and forgiven if
//! the password was right, so concurrent guesses cannot all slip past the
//! check while their hashes queue. (How many hashes run at once is
//! bounded separately, in `AppState`.)

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `(window, most failures in it)`.
const WINDOWS: [(Duration, usize); 2] = [
    (Duration::from_secs(5 * 60), 30),
    (Duration::from_secs(24 * 60 * 60), 300),
];

/// Addresses kept before the ones with no recent failure are dropped.
const SWEEP_AT: usize = 10_000;

/// The failed attempts of the last day, by client address.
#[derive(Debug, Default)]
pub struct AttemptLimiter {
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

/// An attempt was refused: when the next one is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// How long until an attempt is allowed again.
    pub retry_after: Duration,
}

/// An attempt under way, counted as failed until [`AttemptLimiter::succeeded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Attempt {
    client: IpAddr,
    at: Instant,
}

impl AttemptLimiter {
    /// Starts an attempt from `client` at `now` (counted as a failure), or
    /// refuses it if a window is full.
    pub fn begin(&self, client: IpAddr, now: Instant) -> Result<Attempt, Limited> {
        let mut all = self.lock();
        if all.len() >= SWEEP_AT {
            all.retain(|_, f| {
                f.back()
                    .is_some_and(|t| now.saturating_duration_since(*t) < longest())
            });
        }
        let failures = all.entry(client).or_default();
        while failures
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= longest())
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
        failures.push_back(now);
        Ok(Attempt { client, at: now })
    }

    /// The attempt's password was right: it is not a failure.
    pub fn succeeded(&self, attempt: Attempt) {
        let mut all = self.lock();
        if let Some(failures) = all.get_mut(&attempt.client) {
            if let Some(i) = failures.iter().rposition(|t| *t == attempt.at) {
                failures.remove(i);
            }
            if failures.is_empty() {
                all.remove(&attempt.client);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, VecDeque<Instant>>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn longest() -> Duration {
    WINDOWS[WINDOWS.len() - 1].0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_failures_in_five_minutes_then_three_hundred_a_day() {
        let limiter = AttemptLimiter::default();
        let me: IpAddr = "192.0.2.1".parse().unwrap();
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        // Successes never count.
        for i in 0..100 {
            let a = limiter.begin(me, at(i)).unwrap();
            limiter.succeeded(a);
        }
        for i in 0..30 {
            let _failed = limiter.begin(me, at(i)).unwrap();
        }
        let refused = limiter.begin(me, at(30)).unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(270));
        // Another client is not locked out.
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let _ = limiter.begin(other, at(30)).unwrap();
        // Once the first failure left the window, one more is allowed.
        let _ = limiter.begin(me, at(300)).unwrap();
        assert!(limiter.begin(me, at(300)).is_err());
        // Spread out, the daily window binds: 300 failures in the day.
        let limiter = AttemptLimiter::default();
        for i in 0..300u64 {
            let _ = limiter.begin(me, at(i * 20)).unwrap();
        }
        let refused = limiter.begin(me, at(300 * 20)).unwrap_err();
        assert_eq!(
            refused.retry_after,
            Duration::from_secs(24 * 60 * 60 - 6000)
        );
        let _ = limiter.begin(me, at(24 * 60 * 60)).unwrap();
    }
}
