//! Which provider serves a model, where it is and with which key, by each
//! SDK's own environment variables.
//!
//! | provider | format | base URL (variable, default) | key |
//! |---|---|---|---|
//! | `openai` | Responses | `OPENAI_BASE_URL`, `https://api.openai.com/v1` | `OPENAI_API_KEY` |
//! | `openai-chat` | Chat Completions | `OPENAI_BASE_URL`, as above | `OPENAI_API_KEY` (optional) |
//! | `anthropic` | Messages | `ANTHROPIC_BASE_URL`, `https://api.anthropic.com` | `ANTHROPIC_API_KEY` |
//! | `ollama` | `/api/chat` | `OLLAMA_HOST`, `http://127.0.0.1:11434` | none |
//!
//! `openai-chat` is the one for every OpenAI-compatible server (vLLM,
//! llama.cpp, LM Studio, Ollama's `/v1`, OpenRouter): point
//! `OPENAI_BASE_URL` at it.
//!
//! The key is held in [`ApiKey`], whose `Debug` never shows it, and goes
//! only into the request's header.

use super::WireFormat;
use crate::lexicon::chat::gel::assistant::defs::ModelRef;

/// A model named `provider/id` (the lexicon's `modelRef`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    pub provider: String,
    pub id: String,
}

/// Why a model name or its provider's configuration is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("model {0:?} is not named provider/id (for example anthropic/claude-sonnet-4-5)")]
    NotProviderSlashId(String),
    #[error(
        "unknown provider {0:?}: use openai, openai-chat (any OpenAI-compatible server), anthropic or ollama"
    )]
    UnknownProvider(String),
    #[error("{variable} is not set: the {provider} provider needs an API key")]
    MissingKey {
        provider: &'static str,
        variable: &'static str,
    },
    #[error("{variable} is not an http(s) URL: {reason}")]
    BadUrl {
        variable: &'static str,
        reason: String,
    },
}

impl ModelSpec {
    /// Parses `provider/id` (the id may itself hold `/`, as OpenRouter's do).
    pub fn parse(s: &str) -> Result<ModelSpec, SpecError> {
        match s.split_once('/') {
            Some((p, id)) if !p.is_empty() && !id.is_empty() && p.len() <= 64 => Ok(ModelSpec {
                provider: p.to_owned(),
                id: id.to_owned(),
            }),
            _ => Err(SpecError::NotProviderSlashId(s.chars().take(200).collect())),
        }
    }

    /// As the lexicon's `modelRef`.
    pub fn to_ref(&self) -> ModelRef {
        ModelRef {
            provider: self.provider.clone(),
            id: self.id.clone(),
            extra: Default::default(),
        }
    }

    /// From a record's `modelRef`.
    pub fn from_ref(m: &ModelRef) -> ModelSpec {
        ModelSpec {
            provider: m.provider.clone(),
            id: m.id.clone(),
        }
    }
}

impl std::fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.provider, self.id)
    }
}

/// A secret that never prints.
#[derive(Clone)]
pub struct ApiKey(zeroize::Zeroizing<String>);

impl ApiKey {
    pub fn new(key: String) -> ApiKey {
        ApiKey(zeroize::Zeroizing::new(key))
    }

    /// The key, for the request header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(…)")
    }
}

/// Where and how to reach one provider.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// The name in `provider/id`.
    pub name: String,
    pub format: WireFormat,
    /// Without a trailing `/`.
    pub base_url: String,
    pub key: Option<ApiKey>,
}

impl ProviderConfig {
    /// The configuration of `provider` from the process environment.
    pub fn from_env(provider: &str) -> Result<ProviderConfig, SpecError> {
        Self::from_lookup(provider, |v| std::env::var(v).ok())
    }

    /// The configuration of `provider` with variables from `var`.
    pub fn from_lookup(
        provider: &str,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<ProviderConfig, SpecError> {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let (format, url_var, default_url, key_var, key_required) = match provider {
            "openai" => (
                WireFormat::OpenAiResponses,
                "OPENAI_BASE_URL",
                "https://api.openai.com/v1",
                "OPENAI_API_KEY",
                true,
            ),
            "openai-chat" => (
                WireFormat::OpenAiChat,
                "OPENAI_BASE_URL",
                "https://api.openai.com/v1",
                "OPENAI_API_KEY",
                false,
            ),
            "anthropic" => (
                WireFormat::Anthropic,
                "ANTHROPIC_BASE_URL",
                "https://api.anthropic.com",
                "ANTHROPIC_API_KEY",
                true,
            ),
            "ollama" => (
                WireFormat::Ollama,
                "OLLAMA_HOST",
                "http://127.0.0.1:11434",
                "",
                false,
            ),
            other => return Err(SpecError::UnknownProvider(other.chars().take(64).collect())),
        };
        let raw = get(url_var).unwrap_or_else(|| default_url.to_owned());
        let base_url = normalize_url(url_var, &raw, format == WireFormat::Ollama)?;
        let key = if key_var.is_empty() {
            None
        } else {
            get(key_var).map(ApiKey::new)
        };
        if key.is_none() && key_required {
            let provider = if provider == "openai" {
                "openai"
            } else {
                "anthropic"
            };
            return Err(SpecError::MissingKey {
                provider,
                variable: key_var,
            });
        }
        Ok(ProviderConfig {
            name: provider.to_owned(),
            format,
            base_url,
            key,
        })
    }

    /// The URL one turn is posted to.
    pub fn endpoint(&self) -> String {
        format!("{}{}", self.base_url, self.format.path())
    }
}

/// `url` without its trailing `/`; Ollama's `OLLAMA_HOST` may be a bare
/// `host:port`, as the Ollama CLI takes it.
fn normalize_url(
    variable: &'static str,
    url: &str,
    bare_host_ok: bool,
) -> Result<String, SpecError> {
    let url = url.trim();
    let url = if bare_host_ok && !url.contains("://") {
        format!("http://{url}")
    } else {
        url.to_owned()
    };
    let parsed = reqwest::Url::parse(&url).map_err(|e| SpecError::BadUrl {
        variable,
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(SpecError::BadUrl {
            variable,
            reason: "it needs an http:// or https:// scheme and a host".into(),
        });
    }
    Ok(url.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |v| {
            pairs
                .iter()
                .find(|(k, _)| *k == v)
                .map(|(_, x)| x.to_string())
        }
    }

    #[test]
    fn model_names() {
        let m = ModelSpec::parse("openai-chat/meta-llama/Llama-3.3-70B").unwrap();
        assert_eq!(
            (m.provider.as_str(), m.id.as_str()),
            ("openai-chat", "meta-llama/Llama-3.3-70B")
        );
        for bad in ["gpt-5", "/x", "x/", ""] {
            assert!(matches!(
                ModelSpec::parse(bad),
                Err(SpecError::NotProviderSlashId(_))
            ));
        }
    }

    #[test]
    fn providers_by_sdk_variables() {
        let c = ProviderConfig::from_lookup(
            "anthropic",
            env(&[
                ("ANTHROPIC_API_KEY", "sk-secret"),
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
            ]),
        )
        .unwrap();
        assert_eq!(c.endpoint(), "http://127.0.0.1:9/v1/messages");
        assert!(!format!("{c:?}").contains("sk-secret"));
        let c = ProviderConfig::from_lookup("ollama", env(&[("OLLAMA_HOST", "127.0.0.1:11434")]))
            .unwrap();
        assert_eq!(c.endpoint(), "http://127.0.0.1:11434/api/chat");
        let c = ProviderConfig::from_lookup(
            "openai-chat",
            env(&[("OPENAI_BASE_URL", "http://localhost:8000/v1")]),
        )
        .unwrap();
        assert_eq!(c.endpoint(), "http://localhost:8000/v1/chat/completions");
        assert!(matches!(
            ProviderConfig::from_lookup("openai", env(&[])),
            Err(SpecError::MissingKey {
                variable: "OPENAI_API_KEY",
                ..
            })
        ));
        assert!(matches!(
            ProviderConfig::from_lookup("gemini", env(&[])),
            Err(SpecError::UnknownProvider(_))
        ));
        assert!(matches!(
            ProviderConfig::from_lookup("ollama", env(&[("OLLAMA_HOST", "ftp://x")])),
            Err(SpecError::BadUrl { .. })
        ));
    }
}
