//! `datetime`: the RFC 3339 / ISO 8601 intersection atproto allows
//! (specs/lexicon#datetime), checked by a full parse, not just its shape.

use super::text::describe;
use super::{Format, SyntaxError};

const MAX_FRACTION: usize = 20;

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::Datetime, reason)
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)` with an uppercase `T`
/// and `Z`, and no `-00:00`. The values must name a real instant: no month
/// 13, no Feb 30, no hour 24, and nothing that lands before year 0 in UTC.
///
/// Two limits go beyond the spec text, because a value we accept must not be
/// refused by the reference validators (Go `time.Parse`, JS `new Date`):
/// leap seconds (`:60`) are rejected (the fixtures only pin `:61`), and the
/// fraction is capped at 20 digits (the TypeScript check's limit).
pub fn check_datetime(value: &str) -> Result<(), SyntaxError> {
    let mut c = Cursor {
        bytes: value.as_bytes(),
        pos: 0,
    };
    let year = c.digits(4, "year")?;
    c.expect(b'-', "'-' after the year")?;
    let month = c.digits(2, "month")?;
    c.expect(b'-', "'-' after the month")?;
    let day = c.digits(2, "day")?;
    c.expect(b'T', "an uppercase 'T' between date and time")?;
    let hour = c.digits(2, "hour")?;
    c.expect(b':', "':' after the hour")?;
    let minute = c.digits(2, "minute")?;
    c.expect(b':', "':' after the minute")?;
    let second = c.digits(2, "second")?;
    if c.eat(b'.') {
        match c.run_of_digits() {
            0 => return Err(err("the fraction after '.' has no digits")),
            1..=MAX_FRACTION => {}
            _ => {
                return Err(err(format!(
                    "the fraction has more than {MAX_FRACTION} digits"
                )));
            }
        }
    }
    let offset = c.offset()?;
    if let Some(&b) = c.bytes.get(c.pos) {
        return Err(err(format!("has {} after the timezone", describe(b))));
    }

    check_date(year, month, day)?;
    if hour > 23 {
        return Err(err(format!("hour {hour:02} is out of range (00-23)")));
    }
    if minute > 59 {
        return Err(err(format!("minute {minute:02} is out of range (00-59)")));
    }
    if second > 59 {
        return Err(err(format!("second {second:02} is out of range (00-59)")));
    }
    // Only 0000-01-01 with a positive offset can fall before year 0 in UTC.
    let local_seconds = i64::from(hour * 3600 + minute * 60 + second);
    if year == 0 && month == 1 && day == 1 && local_seconds < i64::from(offset) * 60 {
        return Err(err("falls before year 0000 once converted to UTC"));
    }
    Ok(())
}

fn check_date(year: u32, month: u32, day: u32) -> Result<(), SyntaxError> {
    if !(1..=12).contains(&month) {
        return Err(err(format!("month {month:02} is out of range (01-12)")));
    }
    let last = days_in_month(year, month);
    if day == 0 || day > last {
        return Err(err(format!(
            "day {day:02} is out of range for {year:04}-{month:02} (01-{last})"
        )));
    }
    Ok(())
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Proleptic Gregorian, as ISO 8601 uses (so year 0000 is a leap year).
fn is_leap_year(year: u32) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    /// Exactly `n` ASCII digits as a number.
    fn digits(&mut self, n: usize, what: &str) -> Result<u32, SyntaxError> {
        let field = self.bytes.get(self.pos..self.pos + n);
        match field {
            Some(field) if field.iter().all(u8::is_ascii_digit) => {
                self.pos += n;
                Ok(field
                    .iter()
                    .fold(0, |acc, d| acc * 10 + u32::from(d - b'0')))
            }
            _ => Err(err(format!("the {what} must be {n} digits"))),
        }
    }

    fn expect(&mut self, byte: u8, what: &str) -> Result<(), SyntaxError> {
        if self.eat(byte) {
            return Ok(());
        }
        let found = match self.bytes.get(self.pos) {
            Some(&b) => describe(b),
            None => "the end".to_string(),
        };
        Err(err(format!("expected {what}, found {found}")))
    }

    fn eat(&mut self, byte: u8) -> bool {
        let hit = self.bytes.get(self.pos) == Some(&byte);
        self.pos += usize::from(hit);
        hit
    }

    /// Skips any digits and says how many there were.
    fn run_of_digits(&mut self) -> usize {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let run = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        self.pos += run;
        run
    }

    /// `Z` or `±HH:MM`, as minutes east of UTC.
    fn offset(&mut self) -> Result<i32, SyntaxError> {
        const SHAPE: &str = "the timezone must be 'Z' or '+HH:MM' / '-HH:MM'";
        let sign = match self.bytes.get(self.pos) {
            Some(b'Z') => {
                self.pos += 1;
                return Ok(0);
            }
            Some(b'+') => 1,
            Some(b'-') => -1,
            _ => return Err(err(SHAPE)),
        };
        self.pos += 1;
        let hours = self.digits(2, "offset hour").map_err(|_| err(SHAPE))?;
        if !self.eat(b':') {
            return Err(err(SHAPE));
        }
        let minutes = self.digits(2, "offset minute").map_err(|_| err(SHAPE))?;
        if hours > 23 || minutes > 59 {
            return Err(err(format!(
                "offset {hours:02}:{minutes:02} is out of range"
            )));
        }
        if sign < 0 && hours == 0 && minutes == 0 {
            return Err(err("'-00:00' is not allowed; use 'Z' or '+00:00'"));
        }
        Ok(sign * (hours * 60 + minutes) as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_datetime(value).unwrap_err().reason
    }

    #[test]
    fn feb_29_only_in_leap_years() {
        for ok in [
            "2024-02-29T00:00:00Z",
            "2000-02-29T00:00:00Z",
            "0000-02-29T00:00:00Z",
        ] {
            assert!(check_datetime(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            reason("2023-02-29T00:00:00Z"),
            "day 29 is out of range for 2023-02 (01-28)"
        );
        assert_eq!(
            reason("1900-02-29T00:00:00Z"),
            "day 29 is out of range for 1900-02 (01-28)"
        );
        assert!(reason("2024-02-30T00:00:00Z").starts_with("day 30 is out of range"));
    }

    #[test]
    fn month_lengths() {
        assert!(check_datetime("1985-04-30T00:00:00Z").is_ok());
        assert!(reason("1985-04-31T00:00:00Z").starts_with("day 31 is out of range"));
        assert!(check_datetime("1985-12-31T23:59:59Z").is_ok());
        assert_eq!(
            reason("1985-00-01T00:00:00Z"),
            "month 00 is out of range (01-12)"
        );
    }

    #[test]
    fn time_boundaries() {
        assert!(check_datetime("1985-04-12T23:59:59.999Z").is_ok());
        assert_eq!(
            reason("1985-04-12T24:00:00Z"),
            "hour 24 is out of range (00-23)"
        );
        assert_eq!(
            reason("1985-04-12T23:60:00Z"),
            "minute 60 is out of range (00-59)"
        );
        assert_eq!(
            reason("1985-04-12T23:59:60Z"),
            "second 60 is out of range (00-59)"
        );
    }

    #[test]
    fn offsets() {
        assert!(check_datetime("1985-04-12T23:20:50+23:59").is_ok());
        assert!(check_datetime("1985-04-12T23:20:50-23:59").is_ok());
        assert!(check_datetime("1985-04-12T23:20:50+00:00").is_ok());
        assert_eq!(
            reason("1985-04-12T23:20:50+24:00"),
            "offset 24:00 is out of range"
        );
        assert_eq!(
            reason("1985-04-12T23:20:50+00:60"),
            "offset 00:60 is out of range"
        );
        assert_eq!(
            reason("1985-04-12T23:20:50-00:00"),
            "'-00:00' is not allowed; use 'Z' or '+00:00'"
        );
        assert!(reason("1985-04-12T23:20:50+0000").starts_with("the timezone must be"));
    }

    #[test]
    fn year_zero_in_utc() {
        assert!(check_datetime("0000-01-01T00:00:00Z").is_ok());
        assert!(check_datetime("0000-01-01T01:00:00+01:00").is_ok());
        assert!(check_datetime("0000-01-01T00:00:00-01:00").is_ok());
        assert!(check_datetime("0000-01-02T00:00:00+23:59").is_ok());
        assert!(check_datetime("0001-01-01T00:00:00+01:00").is_ok());
        for bad in ["0000-01-01T00:59:59.9+01:00", "0000-01-01T00:00:00+00:01"] {
            assert_eq!(
                reason(bad),
                "falls before year 0000 once converted to UTC",
                "{bad}"
            );
        }
    }

    #[test]
    fn shape_errors_name_the_field() {
        assert_eq!(reason("1985-04-12T23:20:5Z"), "the second must be 2 digits");
        assert_eq!(
            reason("1985-04-12t23:20:50Z"),
            "expected an uppercase 'T' between date and time, found 't'"
        );
        assert_eq!(
            reason("1985-04-12T23:20:50.Z"),
            "the fraction after '.' has no digits"
        );
        assert_eq!(
            reason("1985-04-12T23:20:50Z "),
            "has a space after the timezone"
        );
        assert_eq!(
            reason("1985-04-12"),
            "expected an uppercase 'T' between date and time, found the end"
        );
        assert_eq!(reason(""), "the year must be 4 digits");
        assert!(reason("1985\u{2014}04-12T23:20:50Z").contains("non-ASCII"));
    }

    #[test]
    fn fraction_length_limit_is_inclusive() {
        let at = format!("1985-04-12T23:20:50.{}Z", "1".repeat(20));
        assert!(check_datetime(&at).is_ok());
        let past = format!("1985-04-12T23:20:50.{}Z", "1".repeat(21));
        assert_eq!(reason(&past), "the fraction has more than 20 digits");
        let huge = format!("1985-04-12T23:20:50.{}Z", "1".repeat(100_000));
        assert_eq!(reason(&huge), "the fraction has more than 20 digits");
    }
}
