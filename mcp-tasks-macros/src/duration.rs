//! Human durations (`"30m"`, `"1h30m"`, `"2s"`, `"500ms"`) checked at compile time.

/// Parses a duration into milliseconds.
pub(crate) fn parse_millis(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("expected a duration such as \"30m\", \"2s\" or \"1h30m\"".into());
    }
    let mut total: u64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!(
                "expected a number at `{rest}`; write durations like \"30m\", \"2s\" or \"1h30m\""
            ));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| "the number is too large".to_owned())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = rest[unit_len..].trim_start();
        let factor = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(format!("`{n}` needs a unit: ms, s, m, h or d")),
            other => return Err(format!("unknown unit `{other}`; expected ms, s, m, h or d")),
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
