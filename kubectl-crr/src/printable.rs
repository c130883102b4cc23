//! Text from the cluster made safe for a terminal. Event notes and status messages can carry a
//! container's own output (a failed preStop hook's, up to 512 bytes), which may hold terminal
//! escapes that move the cursor, rewrite the screen or retitle the window. Everything the plugin
//! prints from the API goes through [`printable`] first.

/// `text` with every control character (C0, DEL, C1: escapes, carriage returns, newlines, tabs)
/// and every bidirectional-override character shown as a visible `\u{..}` escape, so the text
/// stays on its line and cannot steer the terminal or reorder what is shown.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        if character.is_control() || is_bidi_control(character) {
            out.extend(character.escape_unicode());
        } else {
            out.push(character);
        }
    }
    out
}

/// The Unicode characters that change the display order of the text around them.
fn is_bidi_control(character: char) -> bool {
    matches!(
        character,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_unchanged() {
        let text = "preStop hook of container app failed: exit code 1 (ünïcode ok) ✓";
        assert_eq!(printable(text), text);
    }

    #[test]
    fn terminal_escapes_and_line_breaks_are_shown_not_obeyed() {
        assert_eq!(
            printable("ok\x1b[2J\x1b]0;owned\x07\r\nnext\tcol"),
            "ok\\u{1b}[2J\\u{1b}]0;owned\\u{7}\\u{d}\\u{a}next\\u{9}col"
        );
        assert_eq!(printable("\u{9b}31m"), "\\u{9b}31m", "C1 CSI");
        assert_eq!(printable("\u{7f}"), "\\u{7f}");
    }

    #[test]
    fn bidi_overrides_are_shown_not_obeyed() {
        assert_eq!(printable("a\u{202E}b\u{2066}c"), "a\\u{202e}b\\u{2066}c");
    }

    #[test]
    fn nothing_printable_survives_unescaped() {
        for code in 0..=0x10FFFF_u32 {
            let Some(character) = char::from_u32(code) else {
                continue;
            };
            let shown = printable(&character.to_string());
            assert!(
                shown
                    .chars()
                    .all(|c| !c.is_control() && !is_bidi_control(c)),
                "{code:#x}"
            );
        }
    }
}
