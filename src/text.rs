//! Cutting and escaping text for people to read: a message quoted in a
//! finding or a prompt is cut to a length, a name that came from outside
//! is printed with its control characters escaped.
//!
//! A leaf: every room may use it, it uses none.

use std::borrow::Cow;

/// `text` cut to `max` characters, with an ellipsis when cut.
pub fn cut(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// The first `max` characters of `text`, cut on a character boundary and
/// marked by nothing: for a field with a hard length limit.
pub fn prefix(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// `text` with its control characters escaped (`\u{1b}`, `\n`), so a raw
/// ESC in a stored name never reaches the terminal.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_counts_characters_and_marks_the_cut() {
        assert_eq!(cut("héllo", 5), "héllo");
        assert_eq!(cut("héllo world", 5), "héllo…");
        assert_eq!(prefix("héllo world", 2), "hé");
        assert_eq!(prefix("hé", 5), "hé");
    }

    #[test]
    fn controls_are_escaped_and_other_text_is_borrowed() {
        assert_eq!(escape_controls("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\n");
        assert!(matches!(escape_controls("plain é"), Cow::Borrowed(_)));
    }
}
