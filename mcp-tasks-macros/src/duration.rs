//! Human durations (`"30m"`, `"1h30m"`, `"2s"`, `"500ms"`, `"1h 30min"`),
//! checked at compile time and turned into milliseconds.

/// Parses a duration into milliseconds; the error says what to write instead.
pub(crate) fn parse_millis(s: &str) -> Result<u64, String> {
    const EXAMPLES: &str = "write durations like \"30m\", \"2s\", \"500ms\" or \"1h30m\"";
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(format!("the duration is empty; {EXAMPLES}"));
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("expected a number at `{rest}`; {EXAMPLES}"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("`{}` is too large", &rest[..digits]))?;
        rest = rest[digits..].trim_start();
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = rest[unit_len..].trim_start();
        let factor = match unit {
            "ms" | "msec" | "msecs" | "millis" => 1,
            "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
            "d" | "day" | "days" => 86_400_000,
            "" => {
                return Err(format!(
                    "`{n}` needs a unit: `{n}s`, `{n}m`, `{n}h`, `{n}d` or `{n}ms`"
                ));
            }
            other => {
                return Err(format!(
                    "unknown unit `{other}`; expected `ms`, `s`, `m`, `h` or `d`"
                ));
            }
        };
        total = n
            .checked_mul(factor)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| "the duration is too long".to_owned())?;
    }
    if total == 0 {
        return Err("the duration must be longer than zero".into());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::parse_millis;

    #[test]
    fn accepts_units_and_sums() {
        assert_eq!(parse_millis("500ms"), Ok(500));
        assert_eq!(parse_millis("2s"), Ok(2_000));
        assert_eq!(parse_millis("30m"), Ok(1_800_000));
        assert_eq!(parse_millis("1h30m"), Ok(5_400_000));
        assert_eq!(parse_millis(" 1h 30min "), Ok(5_400_000));
        assert_eq!(parse_millis("2 hours"), Ok(7_200_000));
        assert_eq!(parse_millis("1d"), Ok(86_400_000));
    }

    #[test]
    fn rejects_with_a_reason() {
        assert!(parse_millis("").unwrap_err().contains("empty"));
        assert!(parse_millis("30").unwrap_err().contains("needs a unit"));
        assert!(
            parse_millis("soon")
                .unwrap_err()
                .contains("expected a number")
        );
        assert!(
            parse_millis("3 weeks")
                .unwrap_err()
                .contains("unknown unit `weeks`")
        );
        assert!(parse_millis("0s").unwrap_err().contains("longer than zero"));
        assert!(
            parse_millis("99999999999999999999s")
                .unwrap_err()
                .contains("too large")
        );
        assert!(
            parse_millis("9999999999999999d")
                .unwrap_err()
                .contains("too long")
        );
    }
}
