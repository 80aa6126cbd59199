//! The provider adapters' cost, in one run on the same bytes:
//!
//! 1. **Throughput**, per wire format, one recorded reply of
//!    `GELSTORE_BENCH_DELTAS` (20,000) text deltas cut into 4 KiB reads:
//!    - `framing`: the SSE parser alone (`sse-stream`, what the adapter
//!      uses) or the NDJSON line split: the floor of reading the stream;
//!    - `framing + JSON`: plus `serde_json::Value` of each payload;
//!    - `adapter`: `provider::http::drive`, the whole adapter (framing,
//!      typed JSON, the format's state machine) to run-format outputs;
//!    - `adapter + reply`: plus the chat core's assembler (`LineRun`), to
//!      the seed 000 events a client sees.
//! 2. **Latency** gelstore adds between a provider chunk and its
//!    `textDelta` frame: a loopback HTTP server writes one Anthropic SSE
//!    event every 2 ms (timestamped before the write); the real
//!    `ProviderClient` reads it, the adapter and the assembler turn it into
//!    a `text_delta` event, which is framed as the `subscribeReply`
//!    message (DAG-CBOR) — timestamped there. p50/p99/max over
//!    `GELSTORE_BENCH_LATENCY_CHUNKS` (2,000) chunks, after 100 warm-up.
//!
//! Run: `cargo bench --bench provider`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use gelstore::chat::run::LineRun;
use gelstore::chat::{AssistantEvent, NoApproval, Reply, ReplyKey, StreamLine};
use gelstore::provider::http::{ProviderClient, drive};
use gelstore::provider::{Conversation, Output, ProviderConfig, Turn, TurnRequest, WireFormat};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A reply of `n` text deltas in `format`'s wire form.
fn transcript(format: WireFormat, n: usize) -> Vec<u8> {
    let mut s = String::new();
    let delta = |i: usize| format!("w{} ", i % 1000);
    match format {
        WireFormat::OpenAiChat => {
            for i in 0..n {
                s.push_str(&format!(
                    "data: {{\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"finish_reason\":null}}]}}\n\n",
                    delta(i)
                ));
            }
            s.push_str("data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
        }
        WireFormat::OpenAiResponses => {
            s.push_str("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_b\",\"model\":\"m\",\"status\":\"in_progress\"}}\n\n");
            s.push_str("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_b\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n");
            let mut all = String::new();
            for i in 0..n {
                all.push_str(&delta(i));
                s.push_str(&format!(
                    "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_b\",\"output_index\":0,\"content_index\":0,\"delta\":\"{}\"}}\n\n",
                    delta(i)
                ));
            }
            s.push_str(&format!("event: response.output_text.done\ndata: {{\"type\":\"response.output_text.done\",\"item_id\":\"msg_b\",\"output_index\":0,\"content_index\":0,\"text\":\"{all}\"}}\n\n"));
            s.push_str(&format!("event: response.output_item.done\ndata: {{\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{{\"id\":\"msg_b\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"text\":\"{all}\"}}]}}}}\n\n"));
            s.push_str("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_b\",\"model\":\"m\",\"status\":\"completed\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n");
        }
        WireFormat::Anthropic => {
            s.push_str(&anthropic_head());
            for i in 0..n {
                s.push_str(&anthropic_delta(&delta(i)));
            }
            s.push_str(&anthropic_tail());
        }
        WireFormat::Ollama => {
            for i in 0..n {
                s.push_str(&format!(
                    "{{\"model\":\"m\",\"created_at\":\"2026-12-01T00:00:00Z\",\"message\":{{\"role\":\"assistant\",\"content\":\"{}\"}},\"done\":false}}\n",
                    delta(i)
                ));
            }
            s.push_str("{\"model\":\"m\",\"created_at\":\"2026-12-01T00:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":1,\"eval_count\":1}\n");
        }
    }
    s.into_bytes()
}

fn anthropic_head() -> String {
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_b\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-b\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_owned()
}

fn anthropic_delta(text: &str) -> String {
    format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
    )
}

fn anthropic_tail() -> String {
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_owned()
}

fn chunks(body: &[u8]) -> Vec<Result<Bytes, std::io::Error>> {
    body.chunks(4096)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect()
}

/// The best of `runs` timings of `f`.
fn best(runs: usize, mut f: impl FnMut() -> usize) -> (Duration, usize) {
    let mut best = Duration::MAX;
    let mut count = 0;
    for _ in 0..runs {
        let t = Instant::now();
        count = f();
        best = best.min(t.elapsed());
    }
    (best, count)
}

fn throughput(rt: &tokio::runtime::Runtime, n: usize) {
    println!("throughput: one reply of {n} text deltas, 4 KiB reads, best of 5");
    println!("| format | stage | ms | events/s | MB/s |");
    println!("|---|---|---|---|---|");
    for format in [
        WireFormat::OpenAiChat,
        WireFormat::OpenAiResponses,
        WireFormat::Anthropic,
        WireFormat::Ollama,
    ] {
        let body = transcript(format, n);
        let mb = body.len() as f64 / 1e6;
        let row = |stage: &str, (t, events): (Duration, usize)| {
            let s = t.as_secs_f64();
            println!(
                "| {format:?} | {stage} | {:.2} | {:.0} | {:.0} |",
                s * 1e3,
                events as f64 / s,
                mb / s
            );
        };
        let framing = |json: bool| {
            best(5, || {
                rt.block_on(async {
                    let mut count = 0;
                    if format.is_sse() {
                        let mut events = sse_stream::SseStream::from_bytes_stream(
                            futures_util::stream::iter(chunks(&body)),
                        );
                        while let Some(Ok(e)) = events.next().await {
                            if let Some(d) = e.data {
                                if json {
                                    let v: serde_json::Value =
                                        serde_json::from_str(&d).unwrap_or_default();
                                    std::hint::black_box(v);
                                }
                                count += 1;
                            }
                        }
                    } else {
                        for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                            if json {
                                let v: serde_json::Value =
                                    serde_json::from_slice(line).unwrap_or_default();
                                std::hint::black_box(v);
                            }
                            count += 1;
                        }
                    }
                    count
                })
            })
        };
        row("framing", framing(false));
        row("framing + JSON", framing(true));
        row(
            "adapter",
            best(5, || {
                rt.block_on(async {
                    let mut count = 0;
                    let end = drive(
                        format,
                        futures_util::stream::iter(chunks(&body)),
                        Duration::from_secs(60),
                        &mut |o| {
                            std::hint::black_box(&o);
                            count += 1;
                        },
                    )
                    .await;
                    assert!(end.is_ok(), "{format:?}: {end:?}");
                    count
                })
            }),
        );
        row(
            "adapter + reply",
            best(5, || {
                rt.block_on(async {
                    let key = ReplyKey::parse("3lbqzdw5pzk22.r0").unwrap();
                    let mut run = LineRun::new(Reply::new(key, Arc::new(NoApproval)));
                    let mut events = Vec::new();
                    let mut count = 0;
                    let _ = drive(
                        format,
                        futures_util::stream::iter(chunks(&body)),
                        Duration::from_secs(60),
                        &mut |o| {
                            let line = match o {
                                Output::Line(l) => l,
                                Output::End { stop_reason, usage } => {
                                    StreamLine::Done { stop_reason, usage }
                                }
                            };
                            run.apply(line, &mut events);
                            count += events.len();
                            events.clear();
                        },
                    )
                    .await;
                    assert!(run.end().reply.error.is_none());
                    count
                })
            }),
        );
    }
}

/// Writes one Anthropic SSE event every `gap`, stamping each text delta's
/// send time (after the head, before the write).
fn paced_server(n: usize, gap: Duration, sent: Arc<Mutex<Vec<Instant>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        let mut out = stream;
        out.set_nodelay(true).unwrap();
        let _ = out.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
        );
        let _ = out.write_all(anthropic_head().as_bytes());
        for i in 0..n {
            std::thread::sleep(gap);
            let event = anthropic_delta(&format!("t{i} "));
            sent.lock().unwrap().push(Instant::now());
            let _ = out.write_all(event.as_bytes());
        }
        let _ = out.write_all(anthropic_tail().as_bytes());
    });
    url
}

fn latency(rt: &tokio::runtime::Runtime, n: usize) {
    let warm = 100;
    let sent = Arc::new(Mutex::new(Vec::new()));
    let url = paced_server(n + warm, Duration::from_millis(2), sent.clone());
    let config = ProviderConfig::from_lookup("anthropic", |v| match v {
        "ANTHROPIC_BASE_URL" => Some(url.clone()),
        "ANTHROPIC_API_KEY" => Some("bench".into()),
        _ => None,
    })
    .unwrap();
    let client = ProviderClient::new(config, Duration::from_secs(60)).unwrap();
    let conversation = Conversation {
        system: None,
        turns: vec![Turn::User { text: "go".into() }],
    };
    let request = TurnRequest {
        model: "claude-b",
        conversation: &conversation,
        tools: &[],
        effort: None,
        max_tokens: 1024,
    };
    let key = ReplyKey::parse("3lbqzdw5pzk22.r0").unwrap();
    let mut run = LineRun::new(Reply::new(key, Arc::new(NoApproval)));
    let mut events = Vec::new();
    let mut got: Vec<Instant> = Vec::new();
    let mut seq = 0;
    rt.block_on(client.stream_turn(&request, &mut |o| {
        let line = match o {
            Output::Line(l) => l,
            Output::End { stop_reason, usage } => StreamLine::TurnEnd { stop_reason, usage },
        };
        run.apply(line, &mut events);
        for e in events.drain(..) {
            if let AssistantEvent::TextDelta { .. } = &e {
                seq += 1;
                let frame = e.to_frame(seq);
                let bytes = serde_ipld_dagcbor::to_vec(&frame).unwrap();
                std::hint::black_box(bytes);
                got.push(Instant::now());
            }
        }
    }))
    .unwrap();
    let sent = sent.lock().unwrap();
    assert_eq!(got.len(), sent.len(), "one textDelta per chunk");
    let mut lat: Vec<Duration> = got
        .iter()
        .zip(sent.iter())
        .skip(warm)
        .map(|(g, s)| g.saturating_duration_since(*s))
        .collect();
    lat.sort();
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
    println!();
    println!(
        "latency: provider chunk written → textDelta frame encoded, {n} chunks 2 ms apart (loopback HTTP)"
    );
    println!("| p50 | p99 | max |");
    println!("|---|---|---|");
    println!(
        "| {:?} | {:?} | {:?} |",
        at(0.5),
        at(0.99),
        lat[lat.len() - 1]
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    throughput(&rt, env_usize("GELSTORE_BENCH_DELTAS", 20_000));
    latency(&rt, env_usize("GELSTORE_BENCH_LATENCY_CHUNKS", 2_000));
}
