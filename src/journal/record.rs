//! The journal's line format: one JSON object per line,
//! `{"format":1,"crc32c":N,"event":EVENT}`, where `N` is the CRC32C of the
//! exact bytes of `EVENT` as they stand in the line; a record synced before
//! it was acknowledged carries `"durable":true` before its event, so its
//! damage reads as corruption, never as a torn tail.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::Corruption;

/// The line format this build writes, and the only one it reads.
pub const FORMAT_VERSION: u32 = 1;

/// The largest record (one whole line, newline included) the journal writes
/// or reads. Journals hold decisions and ids; bulk data belongs in step
/// artifacts.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    format: u32,
    crc32c: u32,
    /// Synced on its own before it was acknowledged (an idempotency key):
    /// damage to it is corruption, never a torn tail to drop.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    durable: bool,
    #[serde(borrow)]
    event: &'a RawValue,
}

/// What every durable line holds between its checksum and its event.
const DURABLE_MARK: &[u8] = br#","durable":true,"event":"#;

/// Whether a line (damaged or not) carries the durable mark. Read from the
/// bytes of its head, not as JSON, so a damaged line still tells (the head,
/// `{"format":1,"crc32c":N,"durable":true,"event":`, is under 64 bytes).
pub(super) fn marked_durable(line: &[u8]) -> bool {
    let head = &line[..line.len().min(64)];
    head.windows(DURABLE_MARK.len()).any(|w| w == DURABLE_MARK)
}

/// Just enough of any line to learn its format, whatever else a newer
/// format put in it (serde skips the fields it does not name).
#[derive(Deserialize)]
struct FormatOnly {
    format: u64,
}

/// What one complete line holds.
pub(super) enum Decoded<'a> {
    Event(&'a RawValue),
    Corrupt(Corruption),
    UnsupportedVersion(u64),
}

/// The line for `event`, newline included.
pub(super) fn encode<T: Serialize + ?Sized>(
    event: &T,
    durable: bool,
) -> serde_json::Result<Vec<u8>> {
    let mut event = serde_json::to_string(event)?;
    // A `RawValue` inside the event is written verbatim and may contain
    // newlines. In valid JSON a raw newline can only be whitespace between
    // tokens (strings escape theirs), so a space is the same JSON and keeps
    // the record on one line.
    if event.contains('\n') {
        event = event.replace('\n', " ");
    }
    // The text `Line`'s serializer writes, put together by hand: the event
    // is serde_json's own output (valid JSON), so parsing it again into a
    // `RawValue` only to copy it once more would check nothing.
    let crc = crc32c::crc32c(event.as_bytes());
    let mut line = Vec::with_capacity(event.len() + 64);
    line.extend_from_slice(format!("{{\"format\":{FORMAT_VERSION},\"crc32c\":{crc}").as_bytes());
    if durable {
        line.extend_from_slice(DURABLE_MARK);
    } else {
        line.extend_from_slice(b",\"event\":");
    }
    line.extend_from_slice(event.as_bytes());
    line.extend_from_slice(b"}\n");
    Ok(line)
}

/// Decodes one line, its newline already removed.
pub(super) fn decode(line: &[u8]) -> Decoded<'_> {
    let Ok(text) = std::str::from_utf8(line) else {
        return Decoded::Corrupt(Corruption::Unparsable);
    };
    match serde_json::from_str::<Line<'_>>(text) {
        Ok(line) if line.format != FORMAT_VERSION => {
            Decoded::UnsupportedVersion(u64::from(line.format))
        }
        Ok(line) if crc32c::crc32c(line.event.get().as_bytes()) != line.crc32c => {
            Decoded::Corrupt(Corruption::ChecksumMismatch)
        }
        Ok(line) => Decoded::Event(line.event),
        Err(_) => match serde_json::from_str::<FormatOnly>(text) {
            Ok(other) if other.format != u64::from(FORMAT_VERSION) => {
                Decoded::UnsupportedVersion(other.format)
            }
            _ => Decoded::Corrupt(Corruption::Unparsable),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-made line is byte for byte what `Line`'s serializer writes,
    /// durable or not, with a raw value holding newlines inside the event.
    #[test]
    fn lines_are_what_the_serializer_writes() {
        let raw = RawValue::from_string("{\n\"a\": [1,\n2]}".to_owned()).expect("raw");
        let event = serde_json::json!({"event": "step_finished", "step": "a\"b\né", "n": 3});
        for durable in [false, true] {
            for value in [
                serde_json::to_value(&event).expect("value"),
                serde_json::json!({"raw": &*raw}),
            ] {
                let text = serde_json::to_string(&value)
                    .expect("text")
                    .replace('\n', " ");
                let event = RawValue::from_string(text).expect("event");
                let mut expected = serde_json::to_vec(&Line {
                    format: FORMAT_VERSION,
                    crc32c: crc32c::crc32c(event.get().as_bytes()),
                    durable,
                    event: &event,
                })
                .expect("line");
                expected.push(b'\n');
                assert_eq!(
                    String::from_utf8(encode(&value, durable).expect("encode")),
                    String::from_utf8(expected),
                );
            }
        }
    }

    fn decoded_event(line: &[u8]) -> String {
        match decode(line.strip_suffix(b"\n").expect("newline")) {
            Decoded::Event(raw) => raw.get().to_owned(),
            Decoded::Corrupt(problem) => panic!("corrupt: {problem}"),
            Decoded::UnsupportedVersion(found) => panic!("version {found}"),
        }
    }

    #[test]
    fn line_layout_is_format_checksum_event() {
        let line = encode(
            &serde_json::json!({"step": "build", "state": "running"}),
            false,
        )
        .expect("encode");

        let event = r#"{"step":"build","state":"running"}"#;
        let expected = format!(
            "{{\"format\":1,\"crc32c\":{},\"event\":{event}}}\n",
            crc32c::crc32c(event.as_bytes())
        );
        assert_eq!(String::from_utf8(line).expect("utf8"), expected);
    }

    #[test]
    fn raw_json_with_newlines_stays_on_one_line() {
        let raw = RawValue::from_string("{\n  \"a\": [1,\n 2]\n}".to_owned()).expect("raw");

        let line = encode(&raw, false).expect("encode");

        assert_eq!(line.iter().position(|&b| b == b'\n'), Some(line.len() - 1));
        let event: serde_json::Value =
            serde_json::from_str(&decoded_event(&line)).expect("event parses");
        assert_eq!(event, serde_json::json!({"a": [1, 2]}));
    }

    #[test]
    fn a_newer_format_with_another_layout_is_reported_as_a_version() {
        assert!(matches!(
            decode(br#"{"format":7,"checksum":"xx","payload":[]}"#),
            Decoded::UnsupportedVersion(7)
        ));
        assert!(matches!(
            decode(br#"{"format":1,"checksum":"xx"}"#),
            Decoded::Corrupt(Corruption::Unparsable)
        ));
    }
}
