//! How far a sync has got, for a user interface to show: the library only
//! calls these hooks (from the thread running the sync); drawing a bar, and
//! deciding whether to draw one at all, is the caller's business (the CLI
//! draws an `indicatif` bar on a terminal only).

/// Receives a sync's progress. Every method has an empty default, so an
/// implementation picks what it shows.
pub trait Progress: Send + Sync {
    /// The push is about to send `total` writes (creates, updates, deletes).
    fn push_started(&self, total: u64) {
        let _ = total;
    }

    /// `done` more writes were acknowledged by the PDS (reported by the
    /// session after each successful write call). The push is over when
    /// the download starts or the sync returns.
    fn pushed(&self, done: u64) {
        let _ = done;
    }

    /// The repository download started; `total` is its size when the PDS
    /// announced one (`Content-Length`), `None` for a streamed answer.
    fn pull_started(&self, total: Option<u64>) {
        let _ = total;
    }

    /// `bytes` more of the repository arrived.
    fn pulled(&self, bytes: u64) {
        let _ = bytes;
    }

    /// The download is over (successfully or not).
    fn pull_finished(&self) {}
}

/// Shows nothing: the default for library callers and non-terminals.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
