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

/// The first `n` of `items` joined by `sep`, then `sep…` when there were
/// more: a list that may be long, said in one line.
pub fn first_few<T: AsRef<str>>(items: &[T], n: usize, sep: &str) -> String {
    let shown: Vec<&str> = items.iter().take(n).map(AsRef::as_ref).collect();
    let mut line = shown.join(sep);
    if items.len() > n {
        line.push_str(sep);
        line.push('…');
    }
    line
}

/// The first `max` characters of `text`, cut on a character boundary and
/// marked by nothing: for a field with a hard length limit.
pub fn prefix(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// Unicode's format characters (general category Cf) and the line and
/// paragraph separators (Zl, Zp): invisible, yet a right-to-left override
/// (U+202E) reorders what follows it and a zero-width space (U+200B) makes
/// two names look alike, so they are as unsafe in a stored name as a
/// control character. A table rather than a crate: it is short, and it
/// changes only when Unicode adds a format character (Unicode 15.1 here).
/// Private-use characters and noncharacters are not in it: they print as
/// a box or a glyph and can neither hide nor reorder text.
const FORMAT_CHARACTERS: [(u32, u32); 22] = [
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2028, 0x2029),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` is a format character or a line or paragraph separator
/// ([`FORMAT_CHARACTERS`]).
pub fn is_format(c: char) -> bool {
    let c = u32::from(c);
    FORMAT_CHARACTERS
        .iter()
        .any(|(first, last)| (*first..=*last).contains(&c))
}

/// Whether `c` must not reach a terminal raw: a control character (NUL,
/// ESC, a newline, ...) or a format character ([`is_format`]).
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || is_format(c)
}

/// `text` with its control and format characters escaped (`\u{1b}`, `\n`,
/// `\u{202e}`), so a raw ESC or a right-to-left override in a stored name
/// never reaches the terminal.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| {
            if is_unsafe(c) {
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
    fn first_few_says_the_first_and_marks_that_more_stand() {
        assert_eq!(first_few(&["a", "b"], 2, ", "), "a, b");
        assert_eq!(first_few(&["a", "b", "c"], 2, "; "), "a; b; …");
        assert_eq!(first_few::<&str>(&[], 3, ", "), "");
    }

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

    #[test]
    fn format_characters_are_escaped_and_letters_around_them_are_not() {
        assert_eq!(
            escape_controls("kid\u{202e}gpj.exe\u{200b}"),
            "kid\\u{202e}gpj.exe\\u{200b}"
        );
        assert_eq!(
            escape_controls("a\u{feff}\u{2028}b"),
            "a\\u{feff}\\u{2028}b"
        );
        for c in ['\u{ad}', '\u{61c}', '\u{2066}', '\u{e0041}', '\u{1d173}'] {
            assert!(is_format(c), "{c:?}");
        }
        for c in ['a', 'é', '☃', '\u{200a}', '\u{2070}', '\u{ffef}'] {
            assert!(!is_unsafe(c), "{c:?}");
        }
    }
}
