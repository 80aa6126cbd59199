//! The provider conformance corpus (`fixtures/providers/<format>/<case>/`):
//! each case's raw HTTP body (`response.sse` / `response.ndjson`) is
//! decoded with the format's adapter and compared with what it must mean
//! — the run-format lines (`expected.lines.jsonl`) and the reply record
//! they make (`expected.record.json`). The body is decoded whole and cut
//! into chunks of 1, 7 and 64 bytes: framing across chunk boundaries must
//! not change a thing. Properties that hold whatever the expectations say
//! are checked too: every finished call has an object of arguments, the
//! record validates, a cut call never has a result, the lines round-trip.
//!
//! `GELSTORE_WRITE_PROVIDER_FIXTURES=1 cargo test --test chat provider_corpus`
//! rewrites the expected files (review the diff before committing).

use crate::support::provider;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gelstore::chat::StreamLine;
use gelstore::chat::approval::NoApproval;
use gelstore::chat::input::AssistantMessageEvent;
use gelstore::chat::keys::ReplyKey;
use gelstore::chat::record::pending_reply;
use gelstore::chat::reply::{Finished, Reply};
use gelstore::lexicon::chat::gel::assistant::defs::PlainContentPartsItem;
use gelstore::lexicon::chat::gel::assistant::message::{MessageStatus, MessageStopReason};
use gelstore::lexicon_runtime::{AtUri, Datetime, Validate};
use gelstore::provider::http::decode_chunks;
use gelstore::provider::{Finish, Output, ProviderError, WireFormat};
use serde_json::{Value, json};

const FORMATS: [(&str, WireFormat); 4] = [
    ("openai_chat", WireFormat::OpenAiChat),
    ("openai_responses", WireFormat::OpenAiResponses),
    ("anthropic", WireFormat::Anthropic),
    ("ollama", WireFormat::Ollama),
];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/providers")
}

fn writing() -> bool {
    std::env::var_os("GELSTORE_WRITE_PROVIDER_FIXTURES").is_some()
}

struct Case {
    name: String,
    path: PathBuf,
    format: WireFormat,
    body: Vec<u8>,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (folder, format) in FORMATS {
        let mut paths: Vec<PathBuf> = fs::read_dir(dir().join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        paths.sort();
        for path in paths {
            let file = if format.is_sse() {
                "response.sse"
            } else {
                "response.ndjson"
            };
            let body = fs::read(path.join(file))
                .unwrap_or_else(|e| panic!("{}: {e}", path.join(file).display()));
            let name = format!("{folder}/{}", path.file_name().unwrap().to_string_lossy());
            out.push(Case {
                name,
                path,
                format,
                body,
            });
        }
    }
    out
}

fn decode(
    format: WireFormat,
    body: &[u8],
    chunk: usize,
) -> (Vec<Output>, Result<Finish, ProviderError>) {
    let chunks: Vec<&[u8]> = if chunk == 0 {
        vec![body]
    } else {
        body.chunks(chunk).collect()
    };
    decode_chunks(format, &chunks)
}

/// The decoder's outputs as run-format lines: each line, then the end as
/// `done`, a failure as `error`, nothing for a cut.
fn lines_of(name: &str, outputs: &[Output], end: &Result<Finish, ProviderError>) -> String {
    let mut text = String::new();
    let mut ends = 0;
    for (n, o) in outputs.iter().enumerate() {
        let line = match o {
            Output::Line(l) => l.clone(),
            Output::End { stop_reason, usage } => {
                ends += 1;
                assert_eq!(n + 1, outputs.len(), "{name}: output after the end");
                StreamLine::Done {
                    stop_reason: stop_reason.clone(),
                    usage: usage.clone(),
                }
            }
        };
        text.push_str(&line.to_json_line());
        text.push('\n');
    }
    match end {
        Ok(Finish::Ended) => assert_eq!(ends, 1, "{name}: ended without one End"),
        Ok(Finish::Cut) => assert_eq!(ends, 0, "{name}: cut after an End"),
        Err(e) => {
            assert_eq!(ends, 0, "{name}: an error after the End");
            let line = StreamLine::Error {
                message: e.message.clone(),
                usage: None,
            };
            text.push_str(&line.to_json_line());
            text.push('\n');
        }
    }
    text
}

/// Writes `actual` to `name`, or compares with it.
fn expect(case: &Path, name: &str, actual: &str) {
    let path = case.join(name);
    if writing() {
        fs::write(&path, actual).unwrap();
        return;
    }
    let want = fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (write it with GELSTORE_WRITE_PROVIDER_FIXTURES=1)",
            path.display()
        )
    });
    assert_eq!(actual, want, "{} differs", path.display());
}

fn key() -> ReplyKey {
    ReplyKey::parse("3lbqzdw5pzk22.r0").unwrap()
}

fn run(lines: &str) -> Finished {
    Reply::new(key(), Arc::new(NoApproval)).run_jsonl(lines)
}

/// Properties every case has, whatever its expectations say.
fn check_invariants(name: &str, lines: &str, f: &Finished) {
    for line in lines.lines() {
        let parsed = StreamLine::parse(line).unwrap_or_else(|e| panic!("{name}: {line}: {e}"));
        assert_eq!(
            parsed.to_json_line(),
            line,
            "{name}: the line does not round-trip"
        );
        if let StreamLine::Event(AssistantMessageEvent::ToolcallEnd { tool_call, .. }) = &parsed {
            assert!(tool_call.arguments.is_object(), "{name}: {line}");
            assert_eq!(tool_call.kind, "toolCall", "{name}");
        }
        if let StreamLine::ProviderData { provider_data, .. } = &parsed {
            let v: Value = serde_json::from_str(provider_data).unwrap();
            assert_eq!(
                &v.to_string(),
                provider_data,
                "{name}: provider data not compact"
            );
        }
    }
    let r = &f.reply;
    assert!(
        r.error.is_none(),
        "{name}: the reply refused the lines: {:?}",
        r.error
    );
    r.content
        .validate()
        .unwrap_or_else(|e| panic!("{name}: content: {e}"));
    let chat =
        AtUri::new("at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqzcx2ss222")
            .unwrap();
    let mut m = pending_reply(chat, Datetime::new("2025-11-29T19:41:00.000Z").unwrap());
    r.fill(&mut m);
    m.validate()
        .unwrap_or_else(|e| panic!("{name}: record: {e}"));
    for c in &r.cut_calls {
        assert!(
            !r.content.parts.iter().any(
                |p| matches!(p, PlainContentPartsItem::ToolResultPart(t) if t.call_id == c.call_id)
            ),
            "{name}: a cut call has a result"
        );
        assert!(
            matches!(&r.content.parts[c.index], PlainContentPartsItem::ToolCallPart(p) if p.arguments.is_none()),
            "{name}: a cut call kept arguments"
        );
    }
}

#[test]
fn every_case_decodes_as_expected() {
    let cases = cases();
    assert!(cases.len() >= 24, "cases: {}", cases.len());
    for (folder, _) in FORMATS {
        let n = cases
            .iter()
            .filter(|c| c.name.starts_with(&format!("{folder}/")))
            .count();
        assert!(n >= 5, "{folder}: {n} cases");
    }
    for case in &cases {
        let name = &case.name;
        let note = fs::read_to_string(case.path.join("note.txt")).unwrap();
        assert_eq!(
            note.trim().lines().count(),
            1,
            "{name}: note.txt is one line"
        );
        let (outputs, end) = decode(case.format, &case.body, 0);
        let lines = lines_of(name, &outputs, &end);
        for chunk in [1, 7, 64] {
            let (o, e) = decode(case.format, &case.body, chunk);
            assert_eq!(o, outputs, "{name}: outputs differ in chunks of {chunk}");
            assert_eq!(e, end, "{name}: the end differs in chunks of {chunk}");
        }
        expect(&case.path, "expected.lines.jsonl", &lines);
        let f = run(&lines);
        check_invariants(name, &lines, &f);
        let record = serde_json::to_string_pretty(&f.reply.summary_json()).unwrap() + "\n";
        expect(&case.path, "expected.record.json", &record);
    }
}

/// A body cut at any line boundary (a connection lost between frames)
/// still decodes to lines the reply accepts: the decoders never emit a
/// stream the assembler refuses, whatever the point of the cut.
#[test]
fn every_prefix_makes_a_valid_reply() {
    for case in cases() {
        let cuts = case
            .body
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1);
        for cut in std::iter::once(0).chain(cuts) {
            let name = format!("{} cut at byte {cut}", case.name);
            let (outputs, end) = decode(case.format, &case.body[..cut], 0);
            let lines = lines_of(&name, &outputs, &end);
            check_invariants(&name, &lines, &run(&lines));
        }
    }
}

fn case(name: &str) -> Case {
    cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name}"))
}

fn decoded(name: &str) -> (Vec<Output>, Result<Finish, ProviderError>, Finished) {
    let c = case(name);
    let (outputs, end) = decode(c.format, &c.body, 0);
    let lines = lines_of(name, &outputs, &end);
    let f = run(&lines);
    (outputs, end, f)
}

/// The finished calls: (id, name, arguments).
fn calls(outputs: &[Output]) -> Vec<(String, String, Value)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Line(StreamLine::Event(AssistantMessageEvent::ToolcallEnd {
                tool_call,
                ..
            })) => Some((
                tool_call.id.clone(),
                tool_call.name.clone(),
                tool_call.arguments.clone(),
            )),
            _ => None,
        })
        .collect()
}

fn stop_of(outputs: &[Output]) -> Option<MessageStopReason> {
    match outputs.last() {
        Some(Output::End { stop_reason, .. }) => Some(stop_reason.clone()),
        _ => None,
    }
}

fn model_of(outputs: &[Output]) -> Option<(String, String)> {
    outputs.iter().find_map(|o| match o {
        Output::Line(StreamLine::Model(m)) => Some((m.provider.clone(), m.id.clone())),
        _ => None,
    })
}

fn provider_data(outputs: &[Output]) -> Vec<(usize, Value)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Line(StreamLine::ProviderData {
                content_index,
                provider_data,
            }) => Some((*content_index, serde_json::from_str(provider_data).unwrap())),
            _ => None,
        })
        .collect()
}

fn text_parts(f: &Finished) -> Vec<(&'static str, String)> {
    f.reply
        .content
        .parts
        .iter()
        .filter_map(|p| match p {
            PlainContentPartsItem::TextPart(t) => Some(("text", t.text.clone())),
            PlainContentPartsItem::ReasoningPart(t) => Some(("reasoning", t.text.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn every_format_names_its_model_and_plain_text() {
    for (folder, provider, model) in [
        ("openai_chat", "openai-chat", "gpt-4.1-2025-04-14"),
        ("openai_responses", "openai", "gpt-4.1-mini-2025-04-14"),
        ("anthropic", "anthropic", "claude-sonnet-4-5-20250929"),
        ("ollama", "ollama", "llama3.2:3b"),
    ] {
        let name = format!("{folder}/plain_text_small_deltas");
        let (outputs, end, f) = decoded(&name);
        assert_eq!(end, Ok(Finish::Ended), "{name}");
        assert_eq!(
            model_of(&outputs),
            Some((provider.into(), model.into())),
            "{name}"
        );
        assert_eq!(stop_of(&outputs), Some(MessageStopReason::Stop), "{name}");
        assert_eq!(f.reply.status, MessageStatus::Complete, "{name}");
        assert!(
            text_parts(&f)[0]
                .1
                .starts_with("Grüße! The answer is 42 🙂."),
            "{name}"
        );
        let deltas = outputs
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    Output::Line(StreamLine::Event(AssistantMessageEvent::TextDelta { .. }))
                )
            })
            .count();
        assert!(deltas > 10, "{name}: {deltas} deltas");
    }
}

#[test]
fn chat_calls_are_told_apart_by_index_and_id() {
    let (o, _, _) = decoded("openai_chat/parallel_tool_calls");
    assert_eq!(
        calls(&o),
        vec![
            (
                "call_Jx8fQk2LmN4pRs6tUv0wYz1A".into(),
                "get_weather".into(),
                json!({"city": "Oslo", "unit": "celsius"})
            ),
            (
                "call_Bq3rTs5uVw7xYz9aCd1eFg2H".into(),
                "get_weather".into(),
                json!({"city": "Kyōto", "unit": "celsius"})
            ),
        ]
    );
    assert_eq!(stop_of(&o), Some(MessageStopReason::ToolUse));
    let (o, _, f) = decoded("openai_chat/fragments_without_index");
    assert_eq!(
        calls(&o),
        vec![
            (
                "call_a1b2c3".into(),
                "search_docs".into(),
                json!({"query": "sse framing"})
            ),
            (
                "call_d4e5f6".into(),
                "search_docs".into(),
                json!({"query": "ndjson", "limit": 3})
            ),
        ]
    );
    assert_eq!(f.reply.status, MessageStatus::Complete);
    let (o, _, _) = decoded("openai_chat/reused_index");
    let ids: Vec<String> = calls(&o).into_iter().map(|c| c.0).collect();
    assert_eq!(
        ids,
        [
            "function-call-4107392841571926017",
            "function-call-4107392841571926018"
        ]
    );
}

#[test]
fn usage_takes_cached_tokens_off_the_input() {
    let (_, _, f) = decoded("openai_chat/parallel_tool_calls");
    let u = f.reply.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.cache_read_tokens, u.output_tokens),
        (Some(266), Some(1024), Some(54))
    );
    let (_, _, f) = decoded("openai_responses/reasoning_encrypted_function_call");
    let u = f.reply.usage.unwrap();
    assert_eq!(
        (
            u.input_tokens,
            u.cache_read_tokens,
            u.output_tokens,
            u.reasoning_tokens
        ),
        (Some(168), Some(1152), Some(190), Some(128))
    );
    let (_, _, f) = decoded("anthropic/parallel_tool_use");
    let u = f.reply.usage.unwrap();
    assert_eq!(
        (
            u.input_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.output_tokens
        ),
        (Some(310), Some(2048), Some(512), Some(121))
    );
}

#[test]
fn reasoning_keeps_its_provider_state() {
    let (o, _, f) = decoded("anthropic/thinking_signature");
    let pd = provider_data(&o);
    assert_eq!(pd.len(), 1);
    assert_eq!(pd[0].0, 0);
    assert!(pd[0].1["signature"].as_str().unwrap().starts_with("EqQB"));
    assert_eq!(
        text_parts(&f)[0],
        ("reasoning", "The user asks for 2^10. That is 1024.".into())
    );

    let (o, _, f) = decoded("anthropic/redacted_thinking");
    let pd = provider_data(&o);
    assert!(
        pd[0].1["redactedData"]
            .as_str()
            .unwrap()
            .starts_with("EmwK")
    );
    assert!(pd[1].1["signature"].is_string());
    assert_eq!(text_parts(&f)[0], ("reasoning", String::new()));

    let (o, _, f) = decoded("openai_responses/reasoning_encrypted_function_call");
    let pd = provider_data(&o);
    assert_eq!(pd[0].0, 0);
    assert_eq!(pd[0].1["id"], json!("rs_68c1f1b4d6fa8190c9a5e7b3f4d6c8b2"));
    assert!(
        pd[0].1["encryptedContent"]
            .as_str()
            .unwrap()
            .starts_with("gAAAAAB")
    );
    assert_eq!(
        pd[1],
        (1, json!({"id": "fc_68c1f1b9e7ab8190dab6f8c4a5e7d9c3"}))
    );
    let (kind, text) = &text_parts(&f)[0];
    assert_eq!(*kind, "reasoning");
    assert!(text.starts_with("**Checking the forecast**"), "{text}");
    assert!(
        text.contains("get_weather.\n\n**Choosing units**"),
        "{text}"
    );
    assert_eq!(calls(&o)[0].0, "call_Lm3nP5qR7sT9uV1wX3yZ5aB7");

    let (o, _, f) = decoded("ollama/thinking");
    assert!(provider_data(&o).is_empty());
    assert_eq!(
        text_parts(&f),
        vec![
            ("reasoning", "The user wants a greeting in French.".into()),
            ("text", "Bonjour ! Comment ça va ?".into())
        ]
    );
    let (_, _, f) = decoded("openai_chat/reasoning_content");
    assert_eq!(text_parts(&f)[1], ("text", "17 × 23 = **391**.".into()));
}

#[test]
fn tools_without_arguments_and_whole_calls() {
    let (o, _, _) = decoded("anthropic/empty_partial_json");
    assert_eq!(
        calls(&o),
        vec![(
            "toolu_01Hq3rTs5uVw7xYz9aCd1eFg".into(),
            "get_current_time".into(),
            json!({})
        )]
    );
    let (o, _, _) = decoded("ollama/whole_tool_calls");
    assert_eq!(
        calls(&o),
        vec![
            (
                "call_0".into(),
                "get_weather".into(),
                json!({"city": "Toronto", "format": "celsius"})
            ),
            (
                "call_1".into(),
                "get_weather".into(),
                json!({"city": "Montréal", "format": "celsius"})
            ),
        ]
    );
    assert_eq!(stop_of(&o), Some(MessageStopReason::ToolUse));
    // Start, one delta with the whole arguments, end — per call.
    let deltas = o
        .iter()
        .filter(|x| {
            matches!(
                x,
                Output::Line(StreamLine::Event(
                    AssistantMessageEvent::ToolcallDelta { .. }
                ))
            )
        })
        .count();
    assert_eq!(deltas, 2);
}

#[test]
fn cut_and_length_calls_never_run() {
    let (o, end, f) = decoded("anthropic/cut_in_input_json");
    assert_eq!(end, Ok(Finish::Cut));
    assert_eq!(stop_of(&o), None);
    assert_eq!(f.reply.status, MessageStatus::Interrupted);
    assert_eq!(f.reply.cut_calls.len(), 1);
    for name in [
        "anthropic/max_tokens_open_tool_call",
        "openai_chat/length_open_tool_call",
        "openai_responses/incomplete_max_output_tokens",
    ] {
        let (o, end, f) = decoded(name);
        assert_eq!(end, Ok(Finish::Ended), "{name}");
        assert_eq!(stop_of(&o), Some(MessageStopReason::Length), "{name}");
        assert!(calls(&o).is_empty(), "{name}");
        assert_eq!(
            (f.reply.status, f.reply.cut_calls.len()),
            (MessageStatus::Complete, 1),
            "{name}"
        );
    }
    let (o, _, _) = decoded("ollama/done_reason_length");
    assert_eq!(stop_of(&o), Some(MessageStopReason::Length));
}

#[test]
fn failures_keep_the_partial_reply() {
    use gelstore::lexicon::chat::gel::assistant::subscribe_reply::ErrorCode;
    for (name, code, retryable, words) in [
        (
            "anthropic/overloaded_after_200",
            ErrorCode::AssistantCapacity,
            true,
            "overloaded_error: Overloaded",
        ),
        (
            "anthropic/refusal",
            ErrorCode::AssistantProvider,
            false,
            "refused",
        ),
        (
            "openai_chat/content_filter",
            ErrorCode::AssistantProvider,
            false,
            "content filter",
        ),
        (
            "openai_chat/error_chunk",
            ErrorCode::AssistantProvider,
            true,
            "The server had an error",
        ),
        (
            "openai_chat/malformed_json",
            ErrorCode::AssistantProvider,
            false,
            "malformed",
        ),
        (
            "openai_responses/failed",
            ErrorCode::AssistantProvider,
            true,
            "server_error: An error occurred",
        ),
        (
            "openai_responses/incomplete_content_filter",
            ErrorCode::AssistantProvider,
            false,
            "content filter",
        ),
        (
            "openai_responses/error_event",
            ErrorCode::RateLimited,
            true,
            "Rate limit reached",
        ),
        (
            "ollama/error_line",
            ErrorCode::AssistantProvider,
            false,
            "unexpected EOF",
        ),
    ] {
        let (o, end, f) = decoded(name);
        let e = end.expect_err(name);
        assert_eq!((&e.code, e.retryable), (&code, retryable), "{name}: {e:?}");
        assert!(e.message.contains(words), "{name}: {}", e.message);
        assert_eq!(f.reply.status, MessageStatus::Failed, "{name}");
        assert_eq!(stop_of(&o), None, "{name}");
        if name != "openai_responses/error_event" {
            assert!(
                !text_parts(&f).is_empty(),
                "{name}: the partial reply is kept"
            );
        }
    }
}

#[test]
fn trailing_frames_after_the_end() {
    // A second [DONE], a ping and a message_stop after the end are quiet.
    let c = case("openai_chat/plain_text_small_deltas");
    let mut body = c.body.clone();
    body.extend_from_slice(b"data: [DONE]\n\n");
    assert_eq!(decode(c.format, &body, 0).1, Ok(Finish::Ended));
    body.extend_from_slice(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n",
    );
    assert!(decode(c.format, &body, 0).1.is_err());

    let c = case("anthropic/plain_text_small_deltas");
    let mut body = c.body.clone();
    body.extend_from_slice(b"event: ping\ndata: {\"type\":\"ping\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    assert_eq!(decode(c.format, &body, 0).1, Ok(Finish::Ended));
    body.extend_from_slice(b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    assert!(decode(c.format, &body, 0).1.is_err());

    let c = case("ollama/plain_text_small_deltas");
    let mut body = c.body.clone();
    body.extend_from_slice(b"{\"model\":\"llama3.2:3b\",\"message\":{\"role\":\"assistant\",\"content\":\"x\"},\"done\":false}\n");
    assert!(decode(c.format, &body, 0).1.is_err());
}

/// Every transcript served over loopback HTTP by the mock provider and
/// read by the real client (`ProviderClient::stream_turn`, TCP cutting the
/// body where it will) gives the same lines as the recorded expectation.
#[test]
fn every_case_over_loopback_http_gives_the_same_lines() {
    use gelstore::provider::http::ProviderClient;
    use gelstore::provider::{Conversation, ProviderConfig, Turn, TurnRequest};
    use provider::{Answer, MockProvider};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for case in cases() {
        let content_type = if case.format.is_sse() {
            "text/event-stream"
        } else {
            "application/x-ndjson"
        };
        // Three copies: a retryable failure before any output is retried.
        let answer = Answer::stream(case.body.clone(), content_type);
        let mock = MockProvider::start(vec![answer.clone(), answer.clone(), answer]);
        let provider = match case.format {
            WireFormat::OpenAiChat => "openai-chat",
            WireFormat::OpenAiResponses => "openai",
            WireFormat::Anthropic => "anthropic",
            WireFormat::Ollama => "ollama",
        };
        let url = mock.url.clone();
        let config = ProviderConfig::from_lookup(provider, |v| match v {
            "OPENAI_BASE_URL" => Some(format!("{url}/v1")),
            "ANTHROPIC_BASE_URL" | "OLLAMA_HOST" => Some(url.clone()),
            "OPENAI_API_KEY" | "ANTHROPIC_API_KEY" => Some("k".into()),
            _ => None,
        })
        .unwrap();
        let client = ProviderClient::new(config, std::time::Duration::from_secs(30)).unwrap();
        let conversation = Conversation {
            system: Some("be brief".into()),
            turns: vec![Turn::User { text: "hi".into() }],
        };
        let request = TurnRequest {
            model: "m",
            conversation: &conversation,
            tools: &[],
            effort: None,
            max_tokens: 1024,
        };
        let mut outputs = Vec::new();
        let end = runtime.block_on(client.stream_turn(&request, &mut |o| outputs.push(o)));
        let lines = lines_of(&case.name, &outputs, &end);
        let expected = fs::read_to_string(case.path.join("expected.lines.jsonl")).unwrap();
        assert_eq!(lines, expected, "{} over HTTP", case.name);
        let received = mock.received();
        assert!(!received.is_empty(), "{}: no request", case.name);
        assert_eq!(received[0].body["stream"], true, "{}", case.name);
    }
}
