//! Small pieces every HTTP client here shares.

/// An error with its chain of causes, `: `-joined: reqwest's own message
/// ("error sending request") says nothing without them.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
