//! Timestamps of the filter language and of timestamp range PSFs: instants as microseconds
//! since the Unix epoch (UTC), read from RFC 3339 strings and from epoch numbers in a unit.
//!
//! JSON has no timestamp type: event data carries time as RFC 3339 text
//! (`"2021-07-21T10:00:00Z"`, GitHub's `created_at`) or as an epoch number (`1626861600`,
//! `1626861600000`). Byte-wise string order is time order only while every value has the
//! same shape and offset; comparing instants is exact for any mix. [`parse_timestamp`] reads
//! the shapes Arrow's (and Spark's) cast of a string to a timestamp reads.

use serde::{Deserialize, Serialize};

/// Microseconds in a second.
pub const MICROS_PER_SECOND: i64 = 1_000_000;

/// The instant `text` names, in microseconds since 1970-01-01T00:00:00Z, or `None` when it is
/// no timestamp or lies outside the years 1677–2262. Arrow's cast of a string to a timestamp
/// reads it (`arrow_cast::parse::string_to_timestamp_nanos`, Spark's `to_timestamp` model): RFC
/// 3339 with `T` or a space, an optional fraction and offset (none: UTC), or a bare date (its
/// midnight, UTC). Fractions beyond microseconds are truncated toward the past.
#[must_use]
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    // Every accepted shape starts with a four-digit year and a dash: most non-timestamps
    // (names, ids, numbers) are turned away before the parse.
    if bytes.len() < 10 || !bytes[..4].iter().all(u8::is_ascii_digit) || bytes[4] != b'-' {
        return None;
    }
    if let Some(micros) = canonical_micros(bytes) {
        return Some(micros);
    }
    arrow_cast::parse::string_to_timestamp_nanos(text).ok().map(|nanos| nanos.div_euclid(1_000))
}

/// A timestamp literal prepared for comparing many strings with it: where the literal is a
/// whole second of years 1678-2261, a string of the shape `YYYY-MM-DDTHH:MM:SSZ` naming a
/// valid instant compares with it byte by byte (that shape's byte order is time order),
/// without being converted; any other string is read by [`parse_timestamp`]. The answer is
/// [`parse_timestamp`]'s either way (tested).
#[derive(Debug, Clone, Copy)]
pub struct InstantKey {
    micros: i64,
    canonical: Option<[u8; 20]>,
}

impl InstantKey {
    /// The key of the instant `micros` (microseconds since the epoch).
    #[must_use]
    pub fn new(micros: i64) -> Self {
        let text = format_timestamp(micros);
        let canonical = (text.len() == 20 && canonical_micros(text.as_bytes()) == Some(micros))
            .then(|| text.as_bytes().try_into().ok())
            .flatten();
        Self { micros, canonical }
    }

    /// How the instant `text` names compares with this one; `None` when it names none.
    #[must_use]
    pub fn compare(&self, text: &str) -> Option<std::cmp::Ordering> {
        if let Some(canonical) = &self.canonical {
            if canonical_valid(text.as_bytes()) {
                if let Ok(bytes) = <&[u8; 20]>::try_from(text.as_bytes()) {
                    return Some(cmp20(bytes, canonical));
                }
            }
        }
        parse_timestamp(text).map(|t| t.cmp(&self.micros))
    }
}

/// Whether `b` is `YYYY-MM-DDTHH:MM:SSZ` naming a valid instant of years 1678-2261 (what
/// [`canonical_micros`] reads), judged on the bytes without converting them: this runs once
/// per value of a column a `TIMESTAMP` comparison scans, so no iterator or `memcmp` call.
#[inline]
fn canonical_valid(b: &[u8]) -> bool {
    let Ok(b) = <&[u8; 20]>::try_from(b) else { return false };
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z' {
        return false;
    }
    // Every digit position at once: a byte below '0' wraps above 9.
    let mut nondigit = 0u8;
    for i in [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18] {
        nondigit |= u8::from(b[i].wrapping_sub(b'0') > 9);
    }
    if nondigit != 0 {
        return false;
    }
    let two = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let year = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let (month, day) = (two(5), two(8));
    let last_day = match month {
        0x3031 | 0x3033 | 0x3035 | 0x3037 | 0x3038 | 0x3130 | 0x3132 => 0x3331, // "31"
        0x3034 | 0x3036 | 0x3039 | 0x3131 => 0x3330,                            // "30"
        0x3032 => {
            let y = (0..4).fold(0u32, |n, i| n * 10 + u32::from(b[i] - b'0'));
            if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) { 0x3239 } else { 0x3238 } // "29", "28"
        }
        _ => return false,
    };
    (u32::from_be_bytes(*b"1678")..=u32::from_be_bytes(*b"2261")).contains(&year)
        && (0x3031..=last_day).contains(&day)
        && two(11) <= 0x3233 // "23"
        && two(14) <= 0x3539 // "59"
        && two(17) <= 0x3539
}

/// Byte order of two 20-byte strings, as two big-endian integers (no `memcmp` call).
#[inline]
fn cmp20(a: &[u8; 20], b: &[u8; 20]) -> std::cmp::Ordering {
    let head = |x: &[u8; 20]| u128::from_be_bytes(x[..16].try_into().unwrap_or([0; 16]));
    let tail = |x: &[u8; 20]| u32::from_be_bytes([x[16], x[17], x[18], x[19]]);
    head(a).cmp(&head(b)).then_with(|| tail(a).cmp(&tail(b)))
}

/// The instant of `YYYY-MM-DDTHH:MM:SSZ` — the shape most event data writes (GitHub Archive's
/// `created_at`) — read without the general parser: about ten times faster, and the same
/// answer (tested against it). `None` for any other shape, and for a leap second (`:60`),
/// which the general parser decides.
fn canonical_micros(b: &[u8]) -> Option<i64> {
    if !canonical_valid(b) {
        return None;
    }
    let digits = |at: usize, count: usize| b[at..at + count].iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    let (year, month, day) = (digits(0, 4), digits(5, 2), digits(8, 2));
    let (hour, minute, second) = (digits(11, 2), digits(14, 2), digits(17, 2));
    // Days since 1970-01-01 of the proleptic Gregorian date (the civil-from-days inverse).
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60 * MICROS_PER_SECOND + second * MICROS_PER_SECOND)
}

/// Days since 1970-01-01 of the proleptic Gregorian date `year-month-day` (month 1-12; a
/// day beyond the month's last counts on into the next). Hinnant's `days_from_civil`.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let (y, m) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + (153 * m + 2) / 5 + day - 1;
    era * 146_097 + day_of_era - 719_468
}

/// The proleptic Gregorian `(year, month 1-12, day)` of `days` since 1970-01-01 (Hinnant's
/// `civil_from_days`, the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// What `date_trunc(unit, t)` truncates an instant to, in UTC: a fixed width from the epoch
/// (microsecond to day), or a calendar unit — the week (starting on Monday, ISO 8601, as
/// PostgreSQL, Spark and Flink truncate it), the month, the quarter, the year.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TruncUnit {
    /// A whole number of microseconds from 1970-01-01T00:00:00Z (1 µs to a day).
    Fixed(i64),
    /// Monday 00:00 of the ISO week.
    Week,
    /// The first of the month, 00:00.
    Month,
    /// The first of January, April, July or October, 00:00.
    Quarter,
    /// The first of January, 00:00.
    Year,
}

impl TruncUnit {
    /// The unit SQL names `name` (any case, singular or plural): `microsecond`,
    /// `millisecond`, `second`, `minute`, `hour`, `day`, `week`, `month`, `quarter`, `year`.
    #[must_use]
    pub fn named(name: &str) -> Option<TruncUnit> {
        let name = name.to_ascii_lowercase();
        Some(match name.strip_suffix('s').unwrap_or(&name) {
            "microsecond" => TruncUnit::Fixed(1),
            "millisecond" => TruncUnit::Fixed(1_000),
            "second" => TruncUnit::Fixed(MICROS_PER_SECOND),
            "minute" => TruncUnit::Fixed(60 * MICROS_PER_SECOND),
            "hour" => TruncUnit::Fixed(3_600 * MICROS_PER_SECOND),
            "day" => TruncUnit::Fixed(MICROS_PER_DAY),
            "week" => TruncUnit::Week,
            "month" => TruncUnit::Month,
            "quarter" => TruncUnit::Quarter,
            "year" => TruncUnit::Year,
            _ => return None,
        })
    }

    /// The unit's SQL name, as [`Self::named`] reads it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            TruncUnit::Fixed(1) => "microsecond",
            TruncUnit::Fixed(1_000) => "millisecond",
            TruncUnit::Fixed(MICROS_PER_SECOND) => "second",
            TruncUnit::Fixed(60_000_000) => "minute",
            TruncUnit::Fixed(3_600_000_000) => "hour",
            TruncUnit::Fixed(_) => "day",
            TruncUnit::Week => "week",
            TruncUnit::Month => "month",
            TruncUnit::Quarter => "quarter",
            TruncUnit::Year => "year",
        }
    }

    /// `date_trunc(unit, t)`: the latest boundary of the unit at or before `t` (µs).
    #[must_use]
    pub fn floor(self, t: i64) -> i64 {
        let days = t.div_euclid(MICROS_PER_DAY);
        let day_start = |days: i64| days.saturating_mul(MICROS_PER_DAY);
        match self {
            TruncUnit::Fixed(width) => t - t.rem_euclid(width),
            // 1970-01-01 was a Thursday: Monday is 3 days earlier.
            TruncUnit::Week => day_start(days - (days + 3).rem_euclid(7)),
            TruncUnit::Month | TruncUnit::Quarter | TruncUnit::Year => {
                let (year, month, _) = civil_from_days(days);
                let month = match self {
                    TruncUnit::Month => month,
                    TruncUnit::Quarter => (month - 1) / 3 * 3 + 1,
                    _ => 1,
                };
                day_start(days_from_civil(year, month, 1))
            }
        }
    }

    /// How many whole units lie between 1970-01-01T00:00:00Z's unit and `t`'s: the number
    /// of `t`'s week (ISO, from Monday), month, quarter or year counted from the epoch's,
    /// or `⌊t / width⌋` for a fixed width. Non-decreasing in `t` (the bucket of a calendar
    /// range PSF).
    #[must_use]
    pub fn index(self, t: i64) -> i64 {
        let days = t.div_euclid(MICROS_PER_DAY);
        let months = || {
            let (year, month, _) = civil_from_days(days);
            (year - 1970) * 12 + month - 1
        };
        match self {
            TruncUnit::Fixed(width) => t.div_euclid(width),
            TruncUnit::Week => (days + 3).div_euclid(7),
            TruncUnit::Month => months(),
            TruncUnit::Quarter => months().div_euclid(3),
            TruncUnit::Year => months().div_euclid(12),
        }
    }

    /// The boundary after the boundary `floor` (a value of [`Self::floor`]), saturating at
    /// the `i64` range.
    #[must_use]
    pub fn next(self, floor: i64) -> i64 {
        let months = match self {
            TruncUnit::Fixed(width) => return floor.saturating_add(width),
            TruncUnit::Week => return floor.saturating_add(7 * MICROS_PER_DAY),
            TruncUnit::Month => 1,
            TruncUnit::Quarter => 3,
            TruncUnit::Year => 12,
        };
        let (year, month, _) = civil_from_days(floor.div_euclid(MICROS_PER_DAY));
        let index = year * 12 + (month - 1) + months;
        days_from_civil(index.div_euclid(12), index.rem_euclid(12) + 1, 1).saturating_mul(MICROS_PER_DAY)
    }
}

/// RFC 3339 text of an instant in microseconds, in UTC with `Z`, with as many fraction
/// digits as it needs (none, 3 or 6): `2021-07-21T10:00:00Z`, `2021-07-21T10:00:00.250Z`.
/// [`parse_timestamp`] reads it back as the same instant. Instants chrono cannot represent
/// (beyond year ±262,000) print as the number of microseconds.
#[must_use]
pub fn format_timestamp(micros: i64) -> String {
    match arrow_array::temporal_conversions::timestamp_us_to_datetime(micros) {
        Some(instant) => instant.format("%Y-%m-%dT%H:%M:%S%.fZ").to_string(),
        None => format!("{micros}us"),
    }
}

/// The unit of epoch numbers (`1626861600` seconds, `1626861600000` milliseconds) a timestamp
/// range PSF reads: a number `n` is the instant `n` units after 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EpochUnit {
    /// Seconds (Unix time; what SQL's `CAST(number AS TIMESTAMP)` reads), the default.
    #[default]
    S,
    /// Milliseconds (JavaScript's `Date.now()`, Kafka and Flink record timestamps).
    Ms,
    /// Microseconds.
    Us,
}

impl EpochUnit {
    /// Microseconds per unit.
    #[must_use]
    pub fn micros(self) -> i64 {
        match self {
            EpochUnit::S => MICROS_PER_SECOND,
            EpochUnit::Ms => 1_000,
            EpochUnit::Us => 1,
        }
    }

    /// The instant of the epoch number `value` in this unit, in microseconds, saturating at
    /// the `i64` range; `None` for NaN. Monotone: `a <= b` gives `at(a) <= at(b)`, so a range
    /// PSF's bucket of a number never contradicts the filter language's numeric order.
    #[must_use]
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    pub fn at(self, value: f64) -> Option<i64> {
        // `as` from f64 saturates and is monotone; one rounding (the product) keeps it so.
        (!value.is_nan()).then(|| (value * self.micros() as f64) as i64)
    }
}

/// A duration written as a number and a unit (`"1h"`, `"15m"`, `"30s"`, `"500ms"`, `"1d"`,
/// `"1w"`), in microseconds.
///
/// # Errors
/// A message naming what was expected, for text that is not a positive whole number followed
/// by one of `us`, `ms`, `s`, `m`, `h`, `d`, `w`.
pub fn parse_duration(text: &str) -> std::result::Result<i64, String> {
    let digits = text.trim().bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.trim().split_at(digits);
    let per = match unit.trim() {
        "us" => 1,
        "ms" => 1_000,
        "s" => MICROS_PER_SECOND,
        "m" | "min" => 60 * MICROS_PER_SECOND,
        "h" => 3_600 * MICROS_PER_SECOND,
        "d" => 86_400 * MICROS_PER_SECOND,
        "w" => 7 * 86_400 * MICROS_PER_SECOND,
        _ => return Err(format!("`{text}` is not a duration: a whole number and one of us, ms, s, m, h, d, w (`1h`, `15m`)")),
    };
    match number.parse::<i64>().ok().and_then(|n| n.checked_mul(per)) {
        Some(micros) if micros > 0 => Ok(micros),
        _ => Err(format!("`{text}` is not a positive duration within ±292,000 years")),
    }
}

/// [`parse_duration`]'s text for a width in microseconds: the largest unit that divides it.
#[must_use]
pub fn format_duration(micros: i64) -> String {
    for (unit, per) in [("w", 7 * 86_400 * MICROS_PER_SECOND), ("d", 86_400 * MICROS_PER_SECOND), ("h", 3_600 * MICROS_PER_SECOND),
        ("m", 60 * MICROS_PER_SECOND), ("s", MICROS_PER_SECOND), ("ms", 1_000)]
    {
        if micros % per == 0 {
            return format!("{}{unit}", micros / per);
        }
    }
    format!("{micros}us")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_units_truncate_to_their_first_instant() {
        let t = |text: &str| parse_timestamp(text).unwrap();
        let cases = [
            (TruncUnit::Week, "2021-07-21T10:20:30Z", "2021-07-19T00:00:00Z", "2021-07-26T00:00:00Z"),
            (TruncUnit::Week, "2021-07-19T00:00:00Z", "2021-07-19T00:00:00Z", "2021-07-26T00:00:00Z"),
            (TruncUnit::Week, "1970-01-01T00:00:00Z", "1969-12-29T00:00:00Z", "1970-01-05T00:00:00Z"),
            (TruncUnit::Month, "2021-07-21T10:20:30Z", "2021-07-01T00:00:00Z", "2021-08-01T00:00:00Z"),
            (TruncUnit::Month, "2020-12-31T23:59:59.999999Z", "2020-12-01T00:00:00Z", "2021-01-01T00:00:00Z"),
            (TruncUnit::Month, "1969-02-28T12:00:00Z", "1969-02-01T00:00:00Z", "1969-03-01T00:00:00Z"),
            (TruncUnit::Quarter, "2021-09-30T23:00:00Z", "2021-07-01T00:00:00Z", "2021-10-01T00:00:00Z"),
            (TruncUnit::Quarter, "2021-11-02T00:00:00Z", "2021-10-01T00:00:00Z", "2022-01-01T00:00:00Z"),
            (TruncUnit::Year, "2024-02-29T10:00:00Z", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"),
            (TruncUnit::Year, "1900-06-01T00:00:00Z", "1900-01-01T00:00:00Z", "1901-01-01T00:00:00Z"),
            (TruncUnit::Fixed(3_600 * MICROS_PER_SECOND), "2021-07-21T10:20:30Z", "2021-07-21T10:00:00Z", "2021-07-21T11:00:00Z"),
        ];
        for (unit, instant, floor, next) in cases {
            assert_eq!(unit.floor(t(instant)), t(floor), "{unit:?} of {instant}");
            assert_eq!(unit.next(t(floor)), t(next), "{unit:?} after {floor}");
            assert_eq!(TruncUnit::named(unit.name()), Some(unit));
        }
        // Every day of four centuries round-trips through the civil calendar.
        for days in -146_097..146_097 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(TruncUnit::named("MONTHS"), Some(TruncUnit::Month));
        assert_eq!(TruncUnit::Month.index(t("1970-01-31T23:59:59Z")), 0);
        assert_eq!(TruncUnit::Month.index(t("1969-12-31T23:59:59Z")), -1);
        assert_eq!(TruncUnit::Year.index(t("2021-07-21T10:00:00Z")), 51);
        assert_eq!(TruncUnit::Week.index(t("1970-01-05T00:00:00Z")), 1);
        assert_eq!(TruncUnit::Week.index(t("1970-01-04T23:59:59Z")), 0);
        assert_eq!(TruncUnit::named("fortnight"), None);
        // Floors are monotone and idempotent on random instants.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let instant = (x % 8_000_000_000_000_000) as i64 - 4_000_000_000_000_000;
            for unit in [TruncUnit::Week, TruncUnit::Month, TruncUnit::Quarter, TruncUnit::Year] {
                let floor = unit.floor(instant);
                assert!(floor <= instant && instant < unit.next(floor), "{unit:?} {instant}");
                assert_eq!(unit.floor(floor), floor);
                // The index counts units: the same within one, one more at the next.
                assert_eq!(unit.index(floor), unit.index(instant));
                assert_eq!(unit.index(unit.next(floor)), unit.index(instant) + 1, "{unit:?} {instant}");
            }
        }
    }

    const TEN: i64 = 1_626_861_600 * MICROS_PER_SECOND; // 2021-07-21T10:00:00Z

    #[test]
    fn the_shapes_engines_cast_are_read_as_instants() {
        assert_eq!(parse_timestamp("2021-07-21T10:00:00Z"), Some(TEN));
        assert_eq!(parse_timestamp("2021-07-21 10:00:00Z"), Some(TEN));
        assert_eq!(parse_timestamp("2021-07-21T12:00:00+02:00"), Some(TEN));
        assert_eq!(parse_timestamp("2021-07-21T09:30:00-00:30"), Some(TEN));
        assert_eq!(parse_timestamp("2021-07-21T10:00:00.25Z"), Some(TEN + 250_000));
        assert_eq!(parse_timestamp("2021-07-21T10:00:00.123456789Z"), Some(TEN + 123_456));
        assert_eq!(parse_timestamp("2021-07-21T10:00:00"), Some(TEN));
        assert_eq!(parse_timestamp("2021-07-21 10:00:00.5"), Some(TEN + 500_000));
        assert_eq!(parse_timestamp("2021-07-21"), Some(TEN - 10 * 3_600 * MICROS_PER_SECOND));
        assert_eq!(parse_timestamp("1969-12-31T23:59:59Z"), Some(-MICROS_PER_SECOND));
        for no in ["", "2021", "abc", "2021-13-01T00:00:00Z", "2021-02-30", "2021-07-21T25:00:00Z", "2021-07-21X10:00:00",
            "1626861600", "2021-07-21T10:00:00Zjunk", "+2021-07-21", "3000-01-01T00:00:00Z"]
        {
            assert_eq!(parse_timestamp(no), None, "{no}");
        }
    }

    #[test]
    fn the_canonical_shape_reads_as_the_general_parser_reads_it() {
        let general = |text: &str| arrow_cast::parse::string_to_timestamp_nanos(text).ok().map(|n| n.div_euclid(1_000));
        let mut texts: Vec<String> = ["2018-01-01T11:00:00Z", "2000-02-29T23:59:59Z", "1900-02-29T00:00:00Z", "2021-02-29T00:00:00Z",
            "1970-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2262-04-11T23:47:16Z", "1677-09-21T00:12:44Z",
            "2021-04-31T00:00:00Z", "2021-00-10T00:00:00Z", "2021-07-21T24:00:00Z", "2021-07-21T10:60:00Z", "2021-07-21T10:00:60Z",
            "2021-07-2xT10:00:00Z", "2021-07-21T10:00:00z"]
            .map(str::to_owned)
            .to_vec();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let pick = |n: u64, m: u64| (state / n) % m;
            texts.push(format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", 1676 + pick(1, 588), 1 + pick(7, 12), 1 + pick(97, 31),
                pick(1013, 24), pick(7919, 60), pick(104_729, 60)));
        }
        let mut fast = 0;
        let keys: Vec<(i64, InstantKey)> = [TEN, TEN + 1, -MICROS_PER_SECOND, 951_868_799_000_000]
            .into_iter()
            .chain(texts.iter().step_by(997).filter_map(|t| general(t)))
            .map(|t| (t, InstantKey::new(t)))
            .collect();
        for text in &texts {
            if let Some(micros) = canonical_micros(text.as_bytes()) {
                assert_eq!(Some(micros), general(text), "{text}");
                fast += 1;
            }
            assert_eq!(canonical_valid(text.as_bytes()), canonical_micros(text.as_bytes()).is_some(), "{text}");
            assert_eq!(parse_timestamp(text), general(text), "{text}");
            for (t, key) in &keys {
                assert_eq!(key.compare(text), general(text).map(|v| v.cmp(t)), "{text} against {t}");
            }
        }
        assert!(fast > 15_000, "{fast}");
    }

    #[test]
    fn formatted_instants_read_back() {
        for micros in [TEN, TEN + 250_000, TEN + 1, -MICROS_PER_SECOND, 0] {
            assert_eq!(parse_timestamp(&format_timestamp(micros)), Some(micros), "{}", format_timestamp(micros));
        }
        assert_eq!(format_timestamp(TEN), "2021-07-21T10:00:00Z");
    }

    #[test]
    fn durations_and_units() {
        assert_eq!(parse_duration("1h"), Ok(3_600 * MICROS_PER_SECOND));
        assert_eq!(parse_duration("15m"), Ok(900 * MICROS_PER_SECOND));
        assert_eq!(parse_duration("500ms"), Ok(500_000));
        assert!(parse_duration("0h").is_err() && parse_duration("h").is_err() && parse_duration("1y").is_err());
        assert!(parse_duration("99999999999999w").is_err());
        for text in ["1h", "15m", "1d", "2w", "90s", "500ms", "7us"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
        assert_eq!(EpochUnit::Ms.at(1_626_861_600_000.0), Some(TEN));
        assert_eq!(EpochUnit::S.at(1.5), Some(1_500_000));
        assert_eq!(EpochUnit::S.at(f64::NAN), None);
        assert_eq!(EpochUnit::Us.at(1e300), Some(i64::MAX));
    }
}
