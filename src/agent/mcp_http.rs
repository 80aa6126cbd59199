//! MCP over streamable HTTP.
//!
//! NOT FINISHED: rmcp's ready-made HTTP client is built on reqwest 0.13,
//! while the rest of gelstore (atrium-xrpc-client) is on reqwest 0.12;
//! the transport needs an `rmcp::transport::streamable_http_client::
//! StreamableHttpClient` implemented on our reqwest. Until then a `{"url"}`
//! server is reported as not connected (`mcp_transport_failed`) and its
//! tools are not offered.

use std::collections::BTreeMap;

use rmcp::service::{RoleClient, RunningService};

/// Connects to the server at `url`.
pub async fn connect(
    url: &str,
    _headers: &BTreeMap<String, String>,
) -> Result<RunningService<RoleClient, ()>, String> {
    Err(format!(
        "MCP over streamable HTTP is not supported yet by this gelstore (server {url}); use a stdio server"
    ))
}
