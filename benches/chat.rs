//! Stream assembly of one long reply: a 500,000-character text part sent as
//! 500,000 one-character `text_delta`s (the lexicon's `textPart` maximum),
//! then its `text_end`.
//!
//! Run: `cargo bench --bench chat` (release profile). Three levels, each
//! timed over several runs (best run reported):
//!
//! - `assembler`: `chat::assemble::Assembler::push` on decoded events;
//! - `reply`: `chat::reply::Reply::push` (assembly plus one `text_delta`
//!   `AssistantEvent` out per delta), then `finish`;
//! - `jsonl`: the same from JSON lines (`StreamLine::parse` per line).
//!
//! Memory is measured with a counting global allocator: allocations made
//! during a run, and the peak of live heap bytes above what was live when
//! the run started (the input events or lines are allocated before, and
//! each consumed delta is freed as the run goes, which offsets the growing
//! text buffer: the peak is the run's net extra memory). The
//! 50,000-delta rows show that time per event does not grow with the
//! reply's size (assembly is linear).
//!
//! `store` (last line): chat writes end to end through `chat::ChatStore`
//! on a data folder in a temporary directory: per exchange, a user message
//! (assemble the record, seal, commit), the pending reply (create-if-absent
//! commit), a small recorded run (`fixtures/streams/plain_text_small_deltas`)
//! and the finish (seal, swap commit). Three commits per exchange, each
//! flushed to disk (fsync), so this row measures the disk as much as the code.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use gelstore::chat::approval::NoApproval;
use gelstore::chat::assemble::Assembler;
use gelstore::chat::input::{AssistantMessageEvent, StreamLine};
use gelstore::chat::keys::ReplyKey;
use gelstore::chat::reply::{End, Reply};
use gelstore::lexicon::chat::gel::assistant::message::{MessageStatus, MessageStopReason};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(now, Relaxed);
            ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let now = if new_size >= layout.size() {
                LIVE.fetch_add(new_size - layout.size(), Relaxed) + new_size - layout.size()
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed) - (layout.size() - new_size)
            };
            PEAK.fetch_max(now, Relaxed);
            ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const RUNS: usize = 5;
const MIB: f64 = 1024.0 * 1024.0;

fn events(n: usize) -> Vec<AssistantMessageEvent> {
    let mut out = Vec::with_capacity(n + 2);
    out.push(AssistantMessageEvent::TextStart { content_index: 0 });
    let mut full = String::with_capacity(n);
    for i in 0..n {
        let c = char::from(b'a' + (i % 26) as u8);
        full.push(c);
        out.push(AssistantMessageEvent::TextDelta {
            content_index: 0,
            delta: c.to_string(),
        });
    }
    out.push(AssistantMessageEvent::TextEnd {
        content_index: 0,
        content: full,
    });
    out
}

fn lines(n: usize) -> String {
    let mut s = String::new();
    for e in events(n) {
        s.push_str(&serde_json::to_string(&e).unwrap());
        s.push('\n');
    }
    s.push_str("{\"type\":\"done\",\"stopReason\":\"stop\"}\n");
    s
}

struct Measure {
    time: Duration,
    allocs: usize,
    /// Peak live heap above the run's start.
    peak: usize,
    /// Live heap when the run started (its input).
    base: usize,
}

/// Runs `f` on fresh input `RUNS` times; the best time, and the
/// allocations and peak extra heap of the last run.
fn measure<I>(mut input: impl FnMut() -> I, mut f: impl FnMut(I)) -> Measure {
    let mut best = Duration::MAX;
    let mut allocs = 0;
    let mut peak = 0;
    let mut start = 0;
    for _ in 0..RUNS {
        let i = input();
        let base = LIVE.load(Relaxed);
        PEAK.store(base, Relaxed);
        let a0 = ALLOCS.load(Relaxed);
        let t = Instant::now();
        f(i);
        best = best.min(t.elapsed());
        allocs = ALLOCS.load(Relaxed) - a0;
        peak = PEAK.load(Relaxed) - base;
        start = base;
    }
    Measure {
        time: best,
        allocs,
        peak,
        base: start,
    }
}

fn key() -> ReplyKey {
    ReplyKey::parse("3lbqzdw5pzk22.r0").unwrap()
}

fn report(name: &str, n: usize, m: &Measure) {
    let events = (n + 2) as f64;
    println!(
        "{name:<10} {n:>8} deltas  {:>9.2} ms  {:>6.1} M events/s  {:>6.1} ns/event  {:>8} allocs  peak +{:.2} MiB over {:.1} MiB of input",
        m.time.as_secs_f64() * 1e3,
        events / m.time.as_secs_f64() / 1e6,
        m.time.as_secs_f64() * 1e9 / events,
        m.allocs,
        m.peak as f64 / MIB,
        m.base as f64 / MIB,
    );
}

fn main() {
    println!(
        "chat stream assembly: one text part of N one-character deltas + text_end (best of {RUNS})"
    );
    for n in [50_000usize, 500_000] {
        let m = measure(
            || events(n),
            |evs| {
                let mut a = Assembler::default();
                for e in evs {
                    black_box(a.push(e).unwrap());
                }
                let parts = a.finish();
                assert_eq!(parts.parts.len(), 1);
                black_box(parts);
            },
        );
        report("assembler", n, &m);

        let m = measure(
            || events(n),
            |evs| {
                let mut r = Reply::new(key(), Arc::new(NoApproval));
                let mut out = 0usize;
                for e in evs {
                    if let Some(ev) = r.push(e).unwrap() {
                        out += 1;
                        black_box(ev);
                    }
                }
                let f = r.finish(End::Done {
                    stop_reason: MessageStopReason::Stop,
                    usage: None,
                });
                assert_eq!(f.reply.status, MessageStatus::Complete);
                assert_eq!(out, n + 1);
                black_box(f);
            },
        );
        report("reply", n, &m);

        let m = measure(
            || lines(n),
            |text| {
                let mut r = Reply::new(key(), Arc::new(NoApproval));
                let mut events = Vec::new();
                let mut end = None;
                for l in text.lines() {
                    end = r.apply(StreamLine::parse(l).unwrap(), &mut events);
                    events.clear();
                }
                let f = r.finish(end.unwrap());
                assert_eq!(f.reply.status, MessageStatus::Complete);
                black_box(f);
            },
        );
        report("jsonl", n, &m);
    }
    store_writes();
}

fn store_writes() {
    use gelstore::chat::keys::Attempt;
    use gelstore::chat::store::ChatStore;
    let dir = tempfile::tempdir().unwrap();
    gelstore::device::init(dir.path(), None, &mut gelstore::seal::os_rng()).unwrap();
    let mut store = ChatStore::open(dir.path()).unwrap();
    let chat = store.create_chat(Some("bench"), None).unwrap();
    let run = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/streams/plain_text_small_deltas/input.jsonl"),
    )
    .unwrap();
    let n = 200;
    let start = Instant::now();
    let mut parent = None;
    for _ in 0..n {
        let msg = store.send(&chat, "hello", parent, Attempt::FIRST).unwrap();
        let pending = store.start_reply(msg, None).unwrap();
        let f = Reply::new(pending.key, Arc::new(NoApproval)).run_jsonl(&run);
        store.finish_reply(&pending, &f.reply).unwrap();
        parent = Some(pending.key);
    }
    let t = start.elapsed().as_secs_f64();
    println!(
        "{:<10} {n} exchanges (message + pending reply + finished reply, 3 commits each): {:.1} exchanges/s, {:.1} commits/s, {:.2} ms/commit",
        "store",
        n as f64 / t,
        3.0 * n as f64 / t,
        t * 1000.0 / (3.0 * n as f64)
    );
}
