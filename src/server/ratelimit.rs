//! Failed password attempts, limited per client with the reference PDS's
//! `createSession` figures: once 30 attempts failed in 5 minutes (or 300
//! in a day) from one client address, its attempts are refused
//! (`RateLimitExceeded`) until the oldest leaves the window. Keyed by
//! address, as the reference keys by identifier and address, so a
//! stranger cannot lock the owner out; only failures count, so a frequent
//! `gelstore sync` (one login per run) never locks itself out.
//!
//! Besides, the account itself takes at most 100 failures an hour,
//! whatever the addresses: a guesser with many addresses (or a proxy
//! setting that trusts forged ones) gets no more tries than that. The
//! price is that such a guesser can keep the owner from logging in for
//! the hour; sessions already made keep working.
//!
//! An attempt is counted as a failure before its hash runs and forgiven if
//! the password was right, so concurrent guesses cannot all slip past the
//! check while their hashes queue. (How many hashes run at once is
//! bounded separately, in `AppState`.)

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `(window, most failures in it)` for one client address.
const CLIENT_WINDOWS: [(Duration, usize); 2] = [
    (Duration::from_secs(5 * 60), 30),
    (Duration::from_secs(24 * 60 * 60), 300),
];

/// `(window, most failures in it)` for the account, from any address.
const ACCOUNT_WINDOWS: [(Duration, usize); 1] = [(Duration::from_secs(60 * 60), 100)];

/// Addresses kept before the ones with no recent failure are dropped.
const SWEEP_AT: usize = 10_000;

/// The failed attempts of the last day, by client address, and of the
/// last hour for the account.
#[derive(Debug, Default)]
pub struct AttemptLimiter {
    failures: Mutex<Failures>,
}

#[derive(Debug, Default)]
struct Failures {
    clients: HashMap<IpAddr, VecDeque<Instant>>,
    account: VecDeque<Instant>,
}

/// An attempt was refused: when the next one is allowed, and the limit
/// that refused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// How long until an attempt is allowed again.
    pub retry_after: Duration,
    /// The most failures the full window takes.
    pub limit: usize,
    /// That window.
    pub window: Duration,
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
        let Failures { clients, account } = &mut *all;
        if clients.len() >= SWEEP_AT {
            let longest = longest(&CLIENT_WINDOWS);
            clients.retain(|_, f| {
                f.back()
                    .is_some_and(|t| now.saturating_duration_since(*t) < longest)
            });
        }
        let failures = clients.entry(client).or_default();
        // Every full window must have room again: the latest of them says
        // when.
        let refused = [
            full(failures, &CLIENT_WINDOWS, now),
            full(account, &ACCOUNT_WINDOWS, now),
        ]
        .into_iter()
        .flatten()
        .max_by_key(|l| l.retry_after);
        if let Some(limited) = refused {
            if failures.is_empty() {
                clients.remove(&client);
            }
            return Err(limited);
        }
        failures.push_back(now);
        account.push_back(now);
        Ok(Attempt { client, at: now })
    }

    /// The attempt's password was right: it is not a failure.
    pub fn succeeded(&self, attempt: Attempt) {
        let mut all = self.lock();
        let Failures { clients, account } = &mut *all;
        if let Some(failures) = clients.get_mut(&attempt.client) {
            forget(failures, attempt.at);
            if failures.is_empty() {
                clients.remove(&attempt.client);
            }
        }
        forget(account, attempt.at);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Failures> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Drops the failures older than the longest window, then the fullest
/// window of `windows` that is full, if any.
fn full(
    failures: &mut VecDeque<Instant>,
    windows: &[(Duration, usize)],
    now: Instant,
) -> Option<Limited> {
    let longest = longest(windows);
    while failures
        .front()
        .is_some_and(|t| now.saturating_duration_since(*t) >= longest)
    {
        failures.pop_front();
    }
    windows
        .iter()
        .filter_map(|&(window, most)| {
            // The failures inside this window are the newest ones.
            let inside = failures
                .iter()
                .rev()
                .take_while(|t| now.saturating_duration_since(**t) < window)
                .count();
            (inside >= most).then(|| {
                // The oldest failure in the window leaves it first.
                let oldest = failures[failures.len() - inside];
                Limited {
                    retry_after: window.saturating_sub(now.saturating_duration_since(oldest)),
                    limit: most,
                    window,
                }
            })
        })
        .max_by_key(|l| l.retry_after)
}

fn forget(failures: &mut VecDeque<Instant>, at: Instant) {
    if let Some(i) = failures.iter().rposition(|t| *t == at) {
        failures.remove(i);
    }
}

fn longest(windows: &[(Duration, usize)]) -> Duration {
    windows.iter().map(|(w, _)| *w).max().unwrap_or_default()
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
        assert_eq!((refused.limit, refused.window.as_secs()), (30, 300));
        // Another client is not locked out.
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let _ = limiter.begin(other, at(30)).unwrap();
        // Once the first failure left the window, one more is allowed.
        let _ = limiter.begin(me, at(300)).unwrap();
        assert!(limiter.begin(me, at(300)).is_err());
        // Spread out, the daily window binds: 300 failures in the day
        // (spread over more than the account's hour, which takes 100).
        let limiter = AttemptLimiter::default();
        for i in 0..300u64 {
            let _ = limiter.begin(me, at(i * 40)).unwrap();
        }
        let refused = limiter.begin(me, at(300 * 40)).unwrap_err();
        assert_eq!(
            refused.retry_after,
            Duration::from_secs(24 * 60 * 60 - 12000)
        );
        assert_eq!(refused.limit, 300);
        let _ = limiter.begin(me, at(24 * 60 * 60)).unwrap();
    }

    #[test]
    fn the_account_takes_a_hundred_failures_an_hour_from_all_addresses() {
        let limiter = AttemptLimiter::default();
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let addr = |i: u32| IpAddr::from(std::net::Ipv4Addr::from(0xc000_0200 + i));
        // A right password is forgiven for the account too.
        let ok = limiter.begin(addr(999), at(0)).unwrap();
        limiter.succeeded(ok);
        for i in 0..100u32 {
            let _ = limiter.begin(addr(i), at(u64::from(i))).unwrap();
        }
        let refused = limiter.begin(addr(500), at(100)).unwrap_err();
        assert_eq!((refused.limit, refused.window.as_secs()), (100, 3600));
        assert_eq!(refused.retry_after, Duration::from_secs(3500));
        // The refusal is not a failure of the new address.
        assert!(!limiter.lock().clients.contains_key(&addr(500)));
        // An hour after the first failure, one more is allowed.
        let _ = limiter.begin(addr(500), at(3600)).unwrap();
        assert!(limiter.begin(addr(501), at(3600)).is_err());
    }
}
