//! The approval lifecycle end to end over records (see docs/chat.md): a reply
//! waits, an answer is checked (with the named refusals), the calls are
//! settled and repeated in the reply to the answer, and the thread view
//! shows the resolved copies in place of the waiting ones.

use std::sync::Arc;

use gelstore::chat::approval::{
    ApprovalError, AskFor, Decision, check_answer, denial_output, waiting_calls,
};
use gelstore::chat::events::AssistantEvent;
use gelstore::chat::input::{AssistantMessageEvent, ToolRun};
use gelstore::chat::keys::{Attempt, ReplyKey};
use gelstore::chat::record::{ChatRecord, pending_reply, requested_reply, user_message};
use gelstore::chat::reply::{End, Finished, Reply};
use gelstore::chat::thread::Thread;
use gelstore::lexicon::chat::gel::assistant::answer_approval::AnswerApprovalError;
use gelstore::lexicon::chat::gel::assistant::defs::{
    PlainContent, PlainContentPartsItem, TextPart, ToolApprovalPart, ToolApprovalPartDecision,
    ToolCallPartApproval,
};
use gelstore::lexicon::chat::gel::assistant::message::{MessageStatus, MessageStopReason};
use gelstore::lexicon::chat::gel::assistant::subscribe_reply::{
    ToolResultDecision, ToolResultOutcome,
};
use gelstore::lexicon_runtime::{AtUri, Datetime, Validate};
use serde_json::json;

const U1: &str = "3lbqzdw5pzk22";
const U2: &str = "3lbqzdw5pzk33";
const U3: &str = "3lbqzdw5pzk44";

fn chat() -> AtUri {
    AtUri::new("at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqzcx2ss222")
        .unwrap()
}

fn now() -> Datetime {
    Datetime::new("2025-11-29T19:41:00.000Z").unwrap()
}

fn policy() -> Arc<AskFor> {
    Arc::new(AskFor::tools(["delete_files", "send_mail"]))
}

fn ev(v: serde_json::Value) -> AssistantMessageEvent {
    serde_json::from_value(v).unwrap()
}

fn call(reply: &mut Reply, i: usize, id: &str, name: &str, args: serde_json::Value) {
    reply
        .push(ev(
            json!({"type":"toolcall_start","contentIndex":i,"id":id,"toolName":name}),
        ))
        .unwrap();
    reply
        .push(ev(json!({"type":"toolcall_end","contentIndex":i,
            "toolCall":{"type":"toolCall","id":id,"name":name,"arguments":args}})))
        .unwrap();
}

fn say(reply: &mut Reply, i: usize, text: &str) {
    reply
        .push(ev(json!({"type":"text_start","contentIndex":i})))
        .unwrap();
    reply
        .push(ev(
            json!({"type":"text_end","contentIndex":i,"content":text}),
        ))
        .unwrap();
}

fn record(key: &str, f: &Finished) -> ChatRecord {
    let mut m = pending_reply(chat(), now());
    f.reply.fill(&mut m);
    m.validate().unwrap();
    ChatRecord::new(key, m, Some(f.reply.content.clone()))
}

fn user(key: &str, parent: Option<&str>, text: &str) -> ChatRecord {
    let parent = parent.map(|p| ReplyKey::parse(p).unwrap());
    let m = user_message(chat(), parent, Attempt::FIRST, now());
    m.validate().unwrap();
    ChatRecord::new(
        key,
        m,
        Some(PlainContent {
            error: None,
            parts: vec![PlainContentPartsItem::TextPart(TextPart {
                provider_data: None,
                text: text.into(),
                extra: Default::default(),
            })],
            extra: Default::default(),
        }),
    )
}

/// U1 → U1.r0, which waits on two gated calls (and ran one free call).
fn waiting_reply() -> Finished {
    let key = ReplyKey::parse(&format!("{U1}.r0")).unwrap();
    let mut r = Reply::new(key, policy());
    say(&mut r, 0, "I'll tidy up and tell Ana.");
    call(&mut r, 1, "c_list", "list_files", json!({"dir": "drafts"}));
    call(
        &mut r,
        2,
        "c_del",
        "delete_files",
        json!({"paths": ["drafts/a.md"]}),
    );
    call(
        &mut r,
        3,
        "c_mail",
        "send_mail",
        json!({"to": "ana@example.com"}),
    );
    r.end_turn(MessageStopReason::ToolUse, None).unwrap();
    r.tool_result(
        "c_list",
        ToolRun {
            outcome: ToolResultOutcome::Succeeded,
            output: "[\"a.md\"]".into(),
            is_error: false,
            elapsed_ms: Some(2),
            json: false,
            job_id: None,
            subject: None,
        },
    )
    .unwrap();
    let f = r.finish(End::Done {
        stop_reason: MessageStopReason::ToolUse,
        usage: None,
    });
    assert_eq!(f.reply.status, MessageStatus::Waiting);
    assert_eq!(f.reply.waiting, vec!["c_del", "c_mail"]);
    let confirms: Vec<(&str, &str)> = f
        .events
        .iter()
        .filter_map(|e| match e {
            AssistantEvent::ConfirmRequired { id, call_id, .. } => {
                Some((id.as_str(), call_id.as_str()))
            }
            _ => None,
        })
        .collect();
    // One pending action per call, each with its own id.
    let calls: Vec<&str> = confirms.iter().map(|(_, c)| *c).collect();
    assert_eq!(calls, ["c_del", "c_mail"]);
    assert_ne!(confirms[0].0, confirms[1].0);
    assert_eq!(pending_ids(&f), [confirms[0].0, confirms[1].0]);
    f
}

/// The pendingId of each waiting call, in order.
fn pending_ids(f: &Finished) -> Vec<&str> {
    f.reply
        .content
        .parts
        .iter()
        .filter_map(|p| match p {
            PlainContentPartsItem::ToolCallPart(c) => c.pending_id.as_deref(),
            _ => None,
        })
        .collect()
}

fn approve(id: &str, reason: Option<&str>) -> ToolApprovalPart {
    ToolApprovalPart {
        call_id: id.into(),
        pending_id: None,
        decision: ToolApprovalPartDecision::Approved,
        reason: reason.map(Into::into),
        extra: Default::default(),
    }
}

#[test]
fn answer_settle_resume_and_view() {
    let w = waiting_reply();
    let w_key = format!("{U1}.r0");
    let mut records = vec![user(U1, None, "Tidy my drafts"), record(&w_key, &w)];

    // The answer approves c_del only; c_mail is not mentioned, so denied.
    let resolution = check_answer(&records, &w_key, &[approve("c_del", Some("yes"))]).unwrap();
    let decided: Vec<(&str, Decision, bool)> = resolution
        .calls
        .iter()
        .map(|c| (c.call.call_id.as_str(), c.decision, c.mentioned))
        .collect();
    assert_eq!(
        decided,
        vec![
            ("c_del", Decision::Approved, true),
            ("c_mail", Decision::Denied, false)
        ]
    );
    let answer_content = resolution.answer_content();
    answer_content.validate().unwrap();
    assert_eq!(answer_content.parts.len(), 2);

    // The host runs the approved call; the denied one gets an error result.
    let mut ran = Vec::new();
    let settled = resolution.settle(|c| {
        ran.push(c.call_id.clone());
        ToolRun {
            outcome: ToolResultOutcome::Succeeded,
            output: "deleted 1 file".into(),
            is_error: false,
            elapsed_ms: Some(31),
            json: false,
            job_id: None,
            subject: None,
        }
    });
    assert_eq!(ran, vec!["c_del"]);

    // The answer message and the reply to it.
    let a_key = U2;
    let answer = user_message(
        chat(),
        Some(ReplyKey::parse(&w_key).unwrap()),
        Attempt::FIRST,
        now(),
    );
    answer.validate().unwrap();
    let ar_key = requested_reply(a_key, &answer).unwrap();
    assert_eq!(ar_key.to_string(), format!("{U2}.r0"));
    records.push(ChatRecord::new(a_key, answer, Some(answer_content)));

    let (mut r, events) = Reply::resume(ar_key, policy(), &settled).unwrap();
    assert_eq!(
        events,
        vec![
            AssistantEvent::ToolResult {
                call_id: "c_del".into(),
                tool: Some("delete_files".into()),
                label: None,
                outcome: ToolResultOutcome::Succeeded,
                ok: true,
                body: "deleted 1 file".into(),
                job_id: None,
                effects: None,
                subject: None,
                elapsed_ms: Some(31),
                decision: Some(ToolResultDecision::Approved),
                output_blob: None,
            },
            AssistantEvent::ToolResult {
                call_id: "c_mail".into(),
                tool: Some("send_mail".into()),
                label: None,
                outcome: ToolResultOutcome::Refused,
                ok: false,
                body: "The user denied this tool call.".into(),
                job_id: None,
                effects: None,
                subject: None,
                elapsed_ms: None,
                decision: Some(ToolResultDecision::Declined),
                output_blob: None,
            },
        ]
    );
    say(&mut r, 0, "Deleted a.md; I did not mail Ana.");
    let ar = r.finish(End::Done {
        stop_reason: MessageStopReason::Stop,
        usage: None,
    });
    assert_eq!(ar.reply.status, MessageStatus::Complete);
    let parts = &ar.reply.content.parts;
    assert_eq!(parts.len(), 5);
    match (&parts[0], &parts[1], &parts[2], &parts[3]) {
        (
            PlainContentPartsItem::ToolCallPart(c1),
            PlainContentPartsItem::ToolResultPart(r1),
            PlainContentPartsItem::ToolCallPart(c2),
            PlainContentPartsItem::ToolResultPart(r2),
        ) => {
            assert_eq!(c1.approval, Some(ToolCallPartApproval::Approved));
            assert_eq!(
                c1.arguments.as_deref(),
                Some(r#"{"paths":["drafts/a.md"]}"#)
            );
            assert_eq!((r1.call_id.as_str(), r1.is_error), ("c_del", None));
            assert_eq!(c2.approval, Some(ToolCallPartApproval::Denied));
            assert_eq!(r2.is_error, Some(true));
            assert_eq!(r2.output, denial_output(None));
        }
        other => panic!("{other:?}"),
    }
    records.push(record(&ar_key.to_string(), &ar));

    // A second answer is refused; so is answering after a regeneration.
    let again = check_answer(&records, &w_key, &[approve("c_mail", None)]).unwrap_err();
    assert!(matches!(again, ApprovalError::PendingResolved { ref answer, .. } if answer == U2));
    assert_eq!(again.xrpc_error(), AnswerApprovalError::PendingResolved);

    // The thread view: the waiting copies are replaced by the resolved ones.
    let t = Thread::build(records.clone());
    assert!(t.orphan_users.is_empty() && t.orphan_replies.is_empty() && t.unplaced.is_empty());
    let root = t.roots[0];
    let wn = t.replies_of(root).next().unwrap();
    let view = wn.view.as_ref().unwrap();
    let shown: Vec<String> = view
        .parts
        .iter()
        .map(|p| match p {
            PlainContentPartsItem::TextPart(_) => "text".to_string(),
            PlainContentPartsItem::ToolCallPart(c) => format!(
                "call {} {}",
                c.call_id,
                c.approval.as_ref().map_or("-", |a| a.as_str())
            ),
            PlainContentPartsItem::ToolResultPart(r) => format!("result {}", r.call_id),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            "text",
            "call c_list -",
            "call c_del approved",
            "result c_del",
            "call c_mail denied",
            "result c_mail",
            "result c_list",
        ]
    );
    assert_eq!(waiting_calls(view).count(), 0);
    let a = wn.answer.unwrap();
    assert_eq!(
        t.users[a].answers.map(|k| k.to_string()),
        Some(w_key.clone())
    );
    // The reply to the answer shows only what is new.
    let arn = t.replies_of(a).next().unwrap();
    assert_eq!(arn.view.as_ref().unwrap().parts.len(), 1);
    // The stored records are untouched.
    assert_eq!(
        waiting_calls(wn.record.content.as_ref().unwrap()).count(),
        2
    );
}

#[test]
fn refusals_are_named() {
    let w = waiting_reply();
    let w_key = format!("{U1}.r0");
    let base = vec![user(U1, None, "Tidy my drafts"), record(&w_key, &w)];

    let e = check_answer(&base, &w_key, &[approve("c_list", None)]).unwrap_err();
    assert!(matches!(e, ApprovalError::PendingUnknown(_)), "{e}");
    assert_eq!(e.xrpc_error(), AnswerApprovalError::PendingUnknown);
    let e = check_answer(&base, &w_key, &[approve("nope", None)]).unwrap_err();
    assert!(matches!(e, ApprovalError::PendingUnknown(_)));
    let e = check_answer(&base, &format!("{U1}.r5"), &[]).unwrap_err();
    assert!(matches!(e, ApprovalError::PendingUnknown(_)));

    // A regeneration (.r1) replaced the waiting reply.
    let mut regen = base.clone();
    let r1 = Reply::new(ReplyKey::parse(&format!("{U1}.r1")).unwrap(), policy());
    regen.push(record(
        &format!("{U1}.r1"),
        &r1.finish(End::Done {
            stop_reason: MessageStopReason::Stop,
            usage: None,
        }),
    ));
    let e = check_answer(&regen, &w_key, &[approve("c_del", None)]).unwrap_err();
    assert!(matches!(e, ApprovalError::PendingSuperseded { .. }));
    assert_eq!(e.xrpc_error(), AnswerApprovalError::PendingSuperseded);

    // A call named by its pending-action id resolves to it; a quoted
    // pendingId that is not the call's is refused.
    let ids = pending_ids(&w);
    let by_id = check_answer(&base, &w_key, &[approve(ids[1], None)]).unwrap();
    let approved: Vec<&str> = by_id
        .calls
        .iter()
        .filter(|c| c.decision == Decision::Approved)
        .map(|c| c.call.call_id.as_str())
        .collect();
    assert_eq!(approved, ["c_mail"]);
    let answer = by_id.answer_content();
    let quoted: Vec<Option<&str>> = answer
        .parts
        .iter()
        .map(|p| match p {
            PlainContentPartsItem::ToolApprovalPart(a) => a.pending_id.as_deref(),
            _ => None,
        })
        .collect();
    assert_eq!(quoted, [Some(ids[0]), Some(ids[1])]);
    let mut wrong = approve("c_del", None);
    wrong.pending_id = Some(ids[1].into());
    let e = check_answer(&base, &w_key, &[wrong]).unwrap_err();
    assert!(matches!(e, ApprovalError::PendingUnknown(_)), "{e}");

    // A reason over 300 graphemes is a malformed request.
    let long = "é".repeat(301);
    let e = check_answer(&base, &w_key, &[approve("c_del", Some(&long))]).unwrap_err();
    assert!(matches!(e, ApprovalError::InvalidDecision { .. }));
}

#[test]
fn a_pending_answer_marks_the_decisions() {
    let w = waiting_reply();
    let w_key = format!("{U1}.r0");
    let resolution = check_answer(
        &[user(U1, None, "x"), record(&w_key, &w)],
        &w_key,
        &[approve("c_mail", None)],
    )
    .unwrap();
    let answer = user_message(
        chat(),
        Some(ReplyKey::parse(&w_key).unwrap()),
        Attempt::FIRST,
        now(),
    );
    let records = vec![
        user(U1, None, "x"),
        record(&w_key, &w),
        ChatRecord::new(U2, answer, Some(resolution.answer_content())),
        // Its reply is still pending: no content yet.
        ChatRecord::new(format!("{U2}.r0"), pending_reply(chat(), now()), None),
    ];
    let t = Thread::build(records);
    let view = t
        .replies_of(t.roots[0])
        .next()
        .unwrap()
        .view
        .clone()
        .unwrap();
    let marks: Vec<(String, String)> = view
        .parts
        .iter()
        .filter_map(|p| match p {
            PlainContentPartsItem::ToolCallPart(c) => Some((
                c.call_id.clone(),
                c.approval.as_ref().map_or("-", |a| a.as_str()).to_string(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        marks,
        vec![
            ("c_list".into(), "-".into()),
            ("c_del".into(), "denied".into()),
            ("c_mail".into(), "approved".into())
        ]
    );
}

#[test]
fn thread_branches_and_orphans() {
    let r0 = format!("{U1}.r0");
    let f =
        Reply::new(ReplyKey::parse(&r0).unwrap(), Arc::new(AskFor::default())).finish(End::Done {
            stop_reason: MessageStopReason::Stop,
            usage: None,
        });
    let mut records = vec![
        user(U1, None, "first"),
        record(&r0, &f),
        // Two continuations of the same reply: a branch.
        user(U3, Some(&r0), "branch b"),
        user(U2, Some(&r0), "branch a"),
        // A reply whose user message is missing, a user message whose
        // parent is missing, a record with a bad key.
        record("3lbqzdw5pzk55.r0", &f),
        user("3lbqzdw5pzk66", Some("3lbqzdw5pzk77.r3"), "lost"),
        user("not-a-key", None, "bad"),
    ];
    // A cycle: each continues from the other's reply.
    records.push(user("3lbqzdw5pzkaa", Some("3lbqzdw5pzkbb.r0"), "c1"));
    records.push(record("3lbqzdw5pzkaa.r0", &f));
    records.push(user("3lbqzdw5pzkbb", Some("3lbqzdw5pzkaa.r0"), "c2"));
    records.push(record("3lbqzdw5pzkbb.r0", &f));
    let t = Thread::build(records);
    assert_eq!(t.roots.len(), 1);
    let reply = t.replies_of(t.roots[0]).next().unwrap();
    let children: Vec<String> = reply
        .children
        .iter()
        .map(|&u| t.users[u].key.to_string())
        .collect();
    assert_eq!(children, vec![U2, U3]);
    assert_eq!(t.orphan_replies.len(), 1);
    let orphans: Vec<String> = t
        .orphan_users
        .iter()
        .map(|&u| t.users[u].key.to_string())
        .collect();
    assert_eq!(
        orphans,
        vec!["3lbqzdw5pzk66", "3lbqzdw5pzkaa", "3lbqzdw5pzkbb"]
    );
    assert_eq!(t.unplaced.len(), 1);
}
