//! The access-log escapers (`log_format ... escape=default|json`), shared by
//! the HTTP and stream access logs. Pure functions: a value in, escaped text
//! appended to the line.

/// nginx's default escaping: `"`, `\`, and bytes outside 0x20..0x7e as `\xXX`;
/// an empty value as `-`.
pub fn escape_default(v: &str, out: &mut String) {
    if v.is_empty() {
        out.push('-');
        return;
    }
    // The bytes the value stands for (`octets`): a Latin-1 byte of a URI
    // is logged as `\xE9`, as nginx logs it.
    for &b in crate::octets::bytes(v).iter() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.push_str(&format!("\\x{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
}

/// `log_format escape=json`: JSON string escaping, control characters as `\uXXXX`.
pub fn escape_json(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        let mut s = String::new();
        escape_default("a\"b\\c\x01é", &mut s);
        assert_eq!(s, "a\\x22b\\x5Cc\\x01\\xC3\\xA9");
        let mut s = String::new();
        escape_default("", &mut s);
        assert_eq!(s, "-");
        let mut s = String::new();
        escape_json("a\"\n\x01", &mut s);
        assert_eq!(s, "a\\\"\\n\\u0001");
    }
}
