//! `gelstore repo get|ls|export` on a data folder that `gelstore serve`
//! holds: they go through the running server's public XRPC endpoints
//! (`getRecord`, `describeRepo` + `listRecords`, `getRepo`), so a live
//! server can be read and backed up without stopping it. The output is the
//! same as on the store (the export is the same CAR: the server writes it
//! with the store's exporter). Commands that write, or need the folder's
//! keys, still fail at once naming the server (see `cli::run`).

use std::io::Write;

use serde_json::{Value, json};

use super::repo::{ExportArgs, GetArgs, LsArgs, RepoCommand};
use super::{Failure, Format, Outcome, finish, say};
use crate::repo::car::{CarLimits, CarReader};
use crate::repo::commit::Commit;
use crate::server::running::Running;

type Result<T> = std::result::Result<T, Failure>;

/// Runs `cmd` through the server if it is a read this module serves;
/// `None` for any other command.
pub fn run(server: &Running, cmd: &RepoCommand) -> Option<Outcome> {
    let result = match cmd {
        RepoCommand::Get(a) => get(server, a),
        RepoCommand::Ls(a) => ls(server, a),
        RepoCommand::Export(a) => export(server, a),
        _ => return None,
    };
    eprintln!(
        "(read through gelstore serve at {}, pid {}: it holds this folder)",
        server.url, server.pid
    );
    Some(finish(result))
}

/// How long one call to the server may take (a whole `getRepo` included).
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// A GET of `/xrpc/{nsid}?{query}`: the body, or the XRPC error as a
/// failure.
fn call(server: &Running, nsid: &str, query: &[(&str, &str)]) -> Result<Vec<u8>> {
    thread_local! {
        // One runtime and connection pool per command, not per call.
        static CLIENT: Option<(tokio::runtime::Runtime, reqwest::Client)> = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()
            .zip(reqwest::Client::builder().timeout(CALL_TIMEOUT).build().ok());
    }
    let url = reqwest::Url::parse_with_params(&format!("{}/xrpc/{nsid}", server.url), query)
        .map_err(|e| Failure::env(format!("{}: {e}", server.url)))?;
    CLIENT.with(|c| {
        let (runtime, client) = c
            .as_ref()
            .ok_or_else(|| Failure::env("cannot start an HTTP client"))?;
        runtime.block_on(async {
            let response = client.get(url).send().await.map_err(|e| {
                Failure::env(format!("cannot reach the server at {}: {e}", server.url))
            })?;
            let status = response.status();
            let body = response
                .bytes()
                .await
                .map_err(|e| Failure::env(format!("reading from {}: {e}", server.url)))?;
            if status.is_success() {
                return Ok(body.to_vec());
            }
            let error: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let message = format!(
                "{nsid}: {} {}",
                error["error"].as_str().unwrap_or(status.as_str()),
                error["message"].as_str().unwrap_or("")
            );
            // A missing record is the caller's input; anything else is the
            // environment (the server, the network).
            if matches!(
                error["error"].as_str(),
                Some("RecordNotFound" | "InvalidRequest")
            ) {
                Err(Failure::input(message))
            } else {
                Err(Failure::env(message))
            }
        })
    })
}

fn call_json(server: &Running, nsid: &str, query: &[(&str, &str)]) -> Result<Value> {
    let body = call(server, nsid, query)?;
    serde_json::from_slice(&body)
        .map_err(|e| Failure::env(format!("{nsid}: the server's answer is not JSON: {e}")))
}

fn get(server: &Running, args: &GetArgs) -> Result<()> {
    let record = call_json(
        server,
        crate::atproto::com::atproto::repo::get_record::NSID,
        &[
            ("repo", &server.did),
            ("collection", &args.collection),
            ("rkey", &args.rkey),
        ],
    )
    .map_err(|e| {
        if e.message.contains("RecordNotFound") {
            Failure::input(format!(
                "record {}/{} does not exist",
                args.collection, args.rkey
            ))
        } else {
            e
        }
    })?;
    let value = &record["value"];
    match args.format {
        Format::Human => {
            say(serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()))
        }
        Format::Json => say(json!({
            "collection": args.collection,
            "rkey": args.rkey,
            "cid": record["cid"],
            "value": value,
        })),
    }
    Ok(())
}

fn ls(server: &Running, args: &LsArgs) -> Result<()> {
    let collections: Vec<String> = match &args.collection {
        Some(c) => vec![c.clone()],
        None => {
            let repo = call_json(
                server,
                crate::atproto::com::atproto::repo::describe_repo::NSID,
                &[("repo", &server.did)],
            )?;
            let mut all: Vec<String> = repo["collections"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect();
            // The store lists by key: collections in byte order.
            all.sort();
            all
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for collection in &collections {
        let mut cursor = String::new();
        loop {
            let mut query = vec![
                ("repo", server.did.as_str()),
                ("collection", collection.as_str()),
                ("limit", "100"),
                // Oldest key first: the store's order.
                ("reverse", "true"),
            ];
            if !cursor.is_empty() {
                query.push(("cursor", &cursor));
            }
            let page = call_json(
                server,
                crate::atproto::com::atproto::repo::list_records::NSID,
                &query,
            )?;
            for record in page["records"].as_array().into_iter().flatten() {
                let uri = record["uri"].as_str().unwrap_or_default();
                let rkey = uri.rsplit('/').next().unwrap_or_default();
                let cid = record["cid"].as_str().unwrap_or_default();
                let line = match args.format {
                    Format::Human => format!("{collection}/{rkey} {cid}"),
                    Format::Json => {
                        json!({"collection": collection, "rkey": rkey, "cid": cid}).to_string()
                    }
                };
                if writeln!(out, "{line}").is_err() {
                    return Ok(());
                }
            }
            match page["cursor"].as_str() {
                Some(next) if !next.is_empty() && next != cursor => cursor = next.to_owned(),
                _ => break,
            }
        }
    }
    let _ = out.flush();
    Ok(())
}

fn export(server: &Running, args: &ExportArgs) -> Result<()> {
    let mut query = vec![("did", server.did.as_str())];
    if let Some(since) = &args.since {
        query.push(("since", since));
    }
    let car = call(
        server,
        crate::atproto::com::atproto::sync::get_repo::NSID,
        &query,
    )?;
    // Read back what came: its root commit and block count (and a CAR that
    // does not parse is refused before anything is written).
    let mut reader = CarReader::from_slice(&car, CarLimits::default())
        .map_err(|e| Failure::env(format!("getRepo: not a CAR: {e}")))?;
    let root = *reader
        .roots()
        .first()
        .ok_or_else(|| Failure::env("getRepo: the CAR has no root"))?;
    let mut blocks = 0u64;
    let mut commit = None;
    while let Some((cid, bytes)) = reader
        .next_block()
        .map_err(|e| Failure::env(format!("getRepo: {e}")))?
    {
        blocks += 1;
        if cid == root {
            commit = Commit::from_cbor(&bytes).ok();
        }
    }
    let commit = commit.ok_or_else(|| Failure::env("getRepo: the CAR lacks its commit"))?;
    super::repo::write_output(&args.out, &car)?;
    match args.format {
        Format::Human => eprintln!(
            "exported {blocks} block(s), {} bytes, rev {}{}",
            car.len(),
            commit.rev(),
            args.since
                .as_ref()
                .map(|s| format!(" (since {s})"))
                .unwrap_or_default()
        ),
        Format::Json => say(json!({
            "file": args.out.display().to_string(),
            "commit": root.to_string(),
            "rev": commit.rev().to_string(),
            "since": args.since,
            "blocks": blocks,
            "bytes": car.len(),
        })),
    }
    Ok(())
}
