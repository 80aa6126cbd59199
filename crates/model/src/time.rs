//! The wall clock as an atproto datetime.

/// Now, as `YYYY-MM-DDTHH:MM:SS.mmmZ`: UTC, millisecond precision — the form
/// the reference implementation writes, accepted by every datetime check.
pub fn now_datetime() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_a_valid_atproto_datetime_close_to_the_clock() {
        let now = now_datetime();
        assert_eq!(now.len(), 24, "{now}");
        gelstore_lexicon::syntax::check_datetime(&now).unwrap();
        let parsed = chrono::DateTime::parse_from_rfc3339(&now).unwrap();
        let drift = chrono::Utc::now().signed_duration_since(parsed);
        assert!(
            drift.num_seconds().abs() < 60,
            "{now} vs the clock: {drift}"
        );
    }
}
