//! Taking turns on a store: how long an opener waits for a store another
//! process (or handle) holds, the same for every engine.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::EngineError;

/// How long an engine's `open` waits, by default, for a store another
/// process (or handle) holds.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// The environment variable that overrides [`LOCK_WAIT`]: whole seconds,
/// `0` to fail at once.
pub const LOCK_WAIT_ENV: &str = "GELSTORE_LOCK_WAIT_SECS";

/// How long a wait lasts before the opener says on stderr that it is
/// waiting (a handle closed a moment ago is released well before).
const LOCK_NOTICE_AFTER: Duration = Duration::from_millis(200);

/// The lock wait the engines' `open` use: [`LOCK_WAIT_ENV`] if it is set
/// to a whole number of seconds, else [`LOCK_WAIT`] (a malformed value is
/// reported on stderr and ignored).
pub fn lock_wait() -> Duration {
    match std::env::var(LOCK_WAIT_ENV) {
        Err(_) => LOCK_WAIT,
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(secs) => Duration::from_secs(secs),
            Err(_) => {
                eprintln!(
                    "warning: {LOCK_WAIT_ENV}={v:?} is not a whole number of seconds; waiting up to {} s",
                    LOCK_WAIT.as_secs()
                );
                LOCK_WAIT
            }
        },
    }
}

/// Calls `open` until it returns something other than
/// [`EngineError::Locked`] or `wait` has passed: gelstore processes on one
/// data folder take turns rather than fail. After 200 ms of waiting, one
/// line on stderr says so; when `wait` runs out the error is `Locked` with
/// `waited` set.
pub(crate) fn retry_while_locked<T>(
    path: &Path,
    wait: Duration,
    mut open: impl FnMut() -> Result<T, EngineError>,
) -> Result<T, EngineError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    let mut noticed = false;
    loop {
        match open() {
            Err(EngineError::Locked { .. }) if started.elapsed() < wait => {
                if !noticed && started.elapsed() >= LOCK_NOTICE_AFTER {
                    noticed = true;
                    eprintln!(
                        "waiting for the store at {} (held by another gelstore process)…",
                        path.display()
                    );
                }
                let left = wait.saturating_sub(started.elapsed());
                thread::sleep(pause.min(left));
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(EngineError::Locked { path, detail, .. }) => {
                return Err(EngineError::Locked {
                    path,
                    detail,
                    waited: wait,
                });
            }
            other => return other,
        }
    }
}
