//! From an NSID to its verified schema: the authority's `_lexicon` TXT
//! record → the DID → its document (PDS and `#atproto` key) → the
//! `com.atproto.lexicon.schema` record keyed by the NSID, fetched with
//! `com.atproto.sync.getRecord` and checked against the commit signature
//! and the MST proof (a plain `getRecord` would have to be trusted).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use cid::Cid;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use serde_json::Value;

use super::LexNetError;
use crate::crypto::PublicKey;
use crate::identity::{DidResolver, HttpResolver};
use crate::model::{decode_dag_cbor, ipld_to_json};
use crate::repo::proof::verify_record_proof;
use crate::repo::verify::{SignatureCheck, VerifyOptions};

/// The collection schema records live in.
pub const SCHEMA_COLLECTION: &str = "com.atproto.lexicon.schema";

/// The most bytes of one answer read (a DID document, a proof CAR).
const MAX_ANSWER: usize = 4 << 20;

/// Where resolution looks.
#[derive(Debug, Clone)]
pub struct ResolverOptions {
    /// The name server to ask (UDP); `None`: the system's (`/etc/resolv.conf`).
    pub dns: Option<SocketAddr>,
    /// The PLC directory for did:plc documents.
    pub plc: String,
    /// Per DNS query and per HTTP request.
    pub timeout: Duration,
}

impl Default for ResolverOptions {
    fn default() -> Self {
        ResolverOptions {
            dns: None,
            plc: crate::sync::DEFAULT_PLC.to_owned(),
            timeout: Duration::from_secs(10),
        }
    }
}

/// A schema found and verified, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub nsid: String,
    /// The DID the authority's TXT record (or the caller) named.
    pub did: String,
    /// The PDS the DID document names.
    pub pds: String,
    /// The schema record's CID (what a lock file pins).
    pub cid: Cid,
    /// The commit that proved it, and its revision.
    pub commit: Cid,
    pub rev: String,
    /// The lexicon document (the record without its `$type`).
    pub schema: Value,
}

/// A DID's PDS and signing key.
#[derive(Debug, Clone)]
struct Account {
    pds: String,
    key: PublicKey,
}

/// Resolves NSIDs, remembering what it found for the rest of its life (one
/// command): each authority's DID, each DID's PDS and key, each schema.
pub struct Resolver {
    rt: tokio::runtime::Runtime,
    dns: TokioResolver,
    http: reqwest::Client,
    identity: Box<dyn DidResolver>,
    dids: RefCell<HashMap<String, String>>,
    accounts: RefCell<HashMap<String, Account>>,
    schemas: RefCell<HashMap<String, Resolution>>,
}

/// The TXT name that holds the DID of `nsid`'s authority:
/// `_lexicon.` then the NSID without its name, reversed
/// (`chat.gel.assistant.message` → `_lexicon.assistant.gel.chat`).
pub fn txt_name(nsid: &str) -> Result<String, LexNetError> {
    gelstore_lexicon::syntax::check_nsid(nsid).map_err(|e| LexNetError::BadNsid {
        nsid: nsid.chars().take(256).collect(),
        reason: e.to_string(),
    })?;
    let mut segments: Vec<&str> = nsid.split('.').collect();
    segments.pop();
    segments.reverse();
    Ok(format!(
        "_lexicon.{}",
        segments.join(".").to_ascii_lowercase()
    ))
}

impl Resolver {
    pub fn new(options: &ResolverOptions) -> Result<Resolver, LexNetError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| LexNetError::Io {
                what: "start the runtime".into(),
                reason: e.to_string(),
            })?;
        let builder = match options.dns {
            Some(addr) => {
                let mut config = ResolverConfig::new();
                config.add_name_server(NameServerConfig::new(addr, Protocol::Udp));
                TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
            }
            None => TokioResolver::builder_tokio().map_err(|e| LexNetError::Dns {
                name: "the system's name servers".into(),
                reason: e.to_string(),
            })?,
        };
        let mut opts = ResolverOpts::default();
        opts.timeout = options.timeout;
        opts.attempts = 2;
        let dns = builder.with_options(opts).build();
        let http = reqwest::Client::builder()
            .connect_timeout(options.timeout)
            .timeout(options.timeout)
            .build()
            .map_err(|e| LexNetError::Io {
                what: "make the HTTP client".into(),
                reason: crate::net::error_chain(&e),
            })?;
        let identity =
            HttpResolver::new(&options.plc, options.timeout).map_err(|e| LexNetError::Io {
                what: "start the DID resolver".into(),
                reason: e.to_string(),
            })?;
        Ok(Resolver {
            rt,
            dns,
            http,
            identity: Box::new(identity),
            dids: RefCell::default(),
            accounts: RefCell::default(),
            schemas: RefCell::default(),
        })
    }

    /// The DID `nsid`'s authority names, and the TXT name it was read from.
    pub fn authority_did(&self, nsid: &str) -> Result<(String, String), LexNetError> {
        let name = txt_name(nsid)?;
        if let Some(did) = self.dids.borrow().get(&name) {
            return Ok((name, did.clone()));
        }
        let texts = self.txt(&name)?;
        let mut dids: Vec<String> = texts
            .iter()
            .filter_map(|t| t.strip_prefix("did="))
            .map(str::to_owned)
            .collect();
        dids.sort();
        dids.dedup();
        let did = match dids.as_slice() {
            [] => {
                return Err(LexNetError::NoDidInTxt { name, found: texts });
            }
            [one] => one.clone(),
            _ => return Err(LexNetError::AmbiguousTxt { name, dids }),
        };
        self.dids.borrow_mut().insert(name.clone(), did.clone());
        Ok((name, did))
    }

    /// The TXT strings at `name` (each record's strings joined, as the
    /// spec reads a value split into 255-byte pieces).
    pub fn txt(&self, name: &str) -> Result<Vec<String>, LexNetError> {
        let fqdn = format!("{name}.");
        match self.rt.block_on(self.dns.txt_lookup(fqdn)) {
            Ok(lookup) => Ok(lookup
                .iter()
                .map(|txt| {
                    txt.txt_data()
                        .iter()
                        .map(|piece| String::from_utf8_lossy(piece))
                        .collect::<String>()
                })
                .collect()),
            Err(e) if e.is_no_records_found() => Err(LexNetError::NoTxtRecord {
                name: name.to_owned(),
            }),
            Err(e) => Err(LexNetError::Dns {
                name: name.to_owned(),
                reason: e.to_string(),
            }),
        }
    }

    /// Resolves `nsid` through DNS.
    pub fn resolve(&self, nsid: &str) -> Result<Resolution, LexNetError> {
        if let Some(found) = self.schemas.borrow().get(nsid) {
            return Ok(found.clone());
        }
        let (_, did) = self.authority_did(nsid)?;
        self.resolve_at(nsid, &did)
    }

    /// Resolves `nsid` in `did`'s repository (no DNS: the caller knows
    /// the DID, as a publisher does).
    pub fn resolve_at(&self, nsid: &str, did: &str) -> Result<Resolution, LexNetError> {
        txt_name(nsid)?;
        if let Some(found) = self.schemas.borrow().get(nsid)
            && found.did == did
        {
            return Ok(found.clone());
        }
        let account = self.account(did)?;
        let url = format!(
            "{}/xrpc/com.atproto.sync.getRecord?did={}&collection={SCHEMA_COLLECTION}&rkey={nsid}",
            account.pds.trim_end_matches('/'),
            did.replace('%', "%25"),
        );
        let not_published = || LexNetError::NotPublished {
            nsid: nsid.to_owned(),
            did: did.to_owned(),
            pds: account.pds.clone(),
        };
        let car = match self.get(&url)? {
            Answer::Ok(bytes) => bytes,
            Answer::Error { error, .. } if error == "RecordNotFound" => return Err(not_published()),
            Answer::Error {
                status,
                error,
                message,
            } => {
                return Err(LexNetError::Http {
                    url,
                    reason: format!("HTTP {status} {error}: {message}"),
                });
            }
        };
        let fail = |reason: String| LexNetError::Proof {
            nsid: nsid.to_owned(),
            did: did.to_owned(),
            reason,
        };
        let path = format!("{SCHEMA_COLLECTION}/{nsid}");
        let options = VerifyOptions::new(SignatureCheck::Key(&account.key)).expect_did(did);
        let proven = verify_record_proof(&car, &path, &options).map_err(|e| fail(e.to_string()))?;
        let (Some(cid), Some(block)) = (proven.cid, proven.record) else {
            return match proven.cid {
                None => Err(not_published()),
                Some(_) => Err(fail("the proof lacks the record's block".into())),
            };
        };
        let schema = schema_of(nsid, &block)?;
        let found = Resolution {
            nsid: nsid.to_owned(),
            did: did.to_owned(),
            pds: account.pds.clone(),
            cid,
            commit: proven.commit_cid,
            rev: proven.rev.to_string(),
            schema,
        };
        self.schemas
            .borrow_mut()
            .insert(nsid.to_owned(), found.clone());
        Ok(found)
    }

    /// `did`'s PDS and signing key, from its DID document.
    fn account(&self, did: &str) -> Result<Account, LexNetError> {
        if let Some(a) = self.accounts.borrow().get(did) {
            return Ok(a.clone());
        }
        let doc = self.identity.resolve(did)?;
        let key = doc.atproto_key()?;
        let pds = doc.pds_endpoint().ok_or_else(|| LexNetError::NoPds {
            did: did.to_owned(),
        })?;
        let account = Account { pds, key };
        self.accounts
            .borrow_mut()
            .insert(did.to_owned(), account.clone());
        Ok(account)
    }

    fn get(&self, url: &str) -> Result<Answer, LexNetError> {
        let http = |reason: String| LexNetError::Http {
            url: url.to_owned(),
            reason,
        };
        self.rt.block_on(async {
            let response = self
                .http
                .get(url)
                .send()
                .await
                .map_err(|e| http(crate::net::error_chain(&e)))?;
            let status = response.status().as_u16();
            if response.content_length().unwrap_or(0) > MAX_ANSWER as u64 {
                return Err(http(format!("an answer over {MAX_ANSWER} bytes")));
            }
            let bytes = response
                .bytes()
                .await
                .map_err(|e| http(crate::net::error_chain(&e)))?;
            if bytes.len() > MAX_ANSWER {
                return Err(http(format!("an answer over {MAX_ANSWER} bytes")));
            }
            if status == 200 {
                return Ok(Answer::Ok(bytes.to_vec()));
            }
            let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            Ok(Answer::Error {
                status,
                error: json["error"].as_str().unwrap_or_default().to_owned(),
                message: json["message"].as_str().unwrap_or_default().to_owned(),
            })
        })
    }
}

enum Answer {
    Ok(Vec<u8>),
    Error {
        status: u16,
        error: String,
        message: String,
    },
}

/// The lexicon document a verified schema record block holds.
fn schema_of(nsid: &str, block: &[u8]) -> Result<Value, LexNetError> {
    let bad = |reason: String| LexNetError::BadSchema {
        nsid: nsid.to_owned(),
        reason,
    };
    let ipld = decode_dag_cbor(block).map_err(|e| bad(e.to_string()))?;
    let mut value = ipld_to_json(&ipld).map_err(|e| bad(e.to_string()))?;
    let Some(map) = value.as_object_mut() else {
        return Err(bad("not an object".into()));
    };
    if map.remove("$type").as_ref().and_then(Value::as_str) != Some(SCHEMA_COLLECTION) {
        return Err(bad(format!("its $type is not {SCHEMA_COLLECTION}")));
    }
    if map.get("id").and_then(Value::as_str) != Some(nsid) {
        return Err(bad(format!(
            "its id is {}, not the record key",
            map.get("id").unwrap_or(&Value::Null)
        )));
    }
    if map.get("lexicon").and_then(Value::as_u64) != Some(1) {
        return Err(bad("its lexicon version is not 1".into()));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_txt_name_is_the_authority_reversed() {
        assert_eq!(
            txt_name("chat.gel.assistant.message").unwrap(),
            "_lexicon.assistant.gel.chat"
        );
        assert_eq!(
            txt_name("Com.Example.fooBar").unwrap(),
            "_lexicon.example.com"
        );
        assert!(matches!(
            txt_name("not an nsid"),
            Err(LexNetError::BadNsid { .. })
        ));
    }
}
