//! The JSON tokenizer: a cursor over one record's text with Jackson's rules (Spark's
//! `JsonParser` features: quotes, comments, non-numeric numbers, escapes, nesting depth).

use std::borrow::Cow;

use super::*;

/// A position in one record's text.
pub(super) struct Cursor<'a> {
    pub(super) s: &'a str,
    pub(super) b: &'a [u8],
    pub(super) pos: usize,
    pub(super) j: &'a JsonOptions,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(s: &'a str, j: &'a JsonOptions) -> Self {
        Self {
            s,
            b: s.as_bytes(),
            pos: 0,
            j,
        }
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    pub(super) fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn unexpected(&self, expected: &str) -> JErr {
        match self.s.get(self.pos..).and_then(|r| r.chars().next()) {
            None => JErr(format!("unexpected end of input, expected {expected}")),
            Some(c) => JErr(format!(
                "unexpected character {c:?} at column {}, expected {expected}",
                self.s[..self.pos].chars().count() + 1
            )),
        }
    }

    #[inline]
    pub(super) fn expect(&mut self, c: u8) -> JResult<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected_char(c))
        }
    }

    #[cold]
    pub(super) fn expected_char(&self, c: u8) -> JErr {
        self.unexpected(&format!("`{}`", c as char))
    }

    /// Skips whitespace (and comments, when allowed). Records usually have none or one space
    /// between tokens: that is decided here, inline; the rest goes to [`Self::skip_ws_rest`].
    #[inline]
    pub(super) fn skip_ws(&mut self) -> JResult<()> {
        if self.peek() == Some(b' ') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b' ' | b'\t' | b'\n' | b'\r' | b'/') => self.skip_ws_rest(),
            _ => Ok(()),
        }
    }

    #[inline(never)]
    pub(super) fn skip_ws_rest(&mut self) -> JResult<()> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.pos += 1,
                Some(b'/') if self.j.allow_comments => match self.b.get(self.pos + 1) {
                    Some(b'/') => {
                        while let Some(c) = self.peek() {
                            if c == b'\n' || c == b'\r' {
                                break;
                            }
                            self.pos += 1;
                        }
                    }
                    Some(b'*') => {
                        self.pos += 2;
                        loop {
                            match self.peek() {
                                None => return Err(JErr("unterminated comment".into())),
                                Some(b'*') if self.b.get(self.pos + 1) == Some(&b'/') => {
                                    self.pos += 2;
                                    break;
                                }
                                Some(_) => self.pos += 1,
                            }
                        }
                    }
                    _ => return Ok(()),
                },
                _ => return Ok(()),
            }
        }
    }

    /// A literal word such as `true`, which must not run into identifier characters.
    pub(super) fn literal(&mut self, word: &str) -> JResult<()> {
        let end = self.pos + word.len();
        if self.b.get(self.pos..end) == Some(word.as_bytes())
            && !self
                .b
                .get(end)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'$')
        {
            self.pos = end;
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{word}`")))
        }
    }

    pub(super) fn boolean(&mut self) -> JResult<bool> {
        if self.peek() == Some(b't') {
            self.literal("true")?;
            Ok(true)
        } else {
            self.literal("false")?;
            Ok(false)
        }
    }

    pub(super) fn starts_with(&self, w: &str) -> bool {
        self.b
            .get(self.pos..self.pos + w.len())
            .is_some_and(|s| s == w.as_bytes())
    }

    /// A number token (or `NaN`/`Infinity`/`-INF`... when allowed).
    pub(super) fn number(&mut self) -> JResult<Num<'a>> {
        let start = self.pos;
        let mut neg = false;
        let mut signed = false;
        match self.peek() {
            Some(b'-') => {
                neg = true;
                signed = true;
                self.pos += 1;
            }
            Some(b'+') => {
                signed = true;
                self.pos += 1;
            }
            _ => {}
        }
        let nn = self.j.allow_non_numeric_numbers;
        if nn && self.starts_with("NaN") && !signed {
            self.literal("NaN")?;
            return Ok(Num::Special(f64::NAN));
        }
        if nn && self.peek() == Some(b'I') {
            let word = if self.starts_with("Infinity") {
                "Infinity"
            } else if signed && self.starts_with("INF") {
                "INF"
            } else {
                return Err(self.unexpected("a value"));
            };
            self.literal(word)?;
            return Ok(Num::Special(if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }));
        }
        if signed && !neg {
            return Err(JErr("a leading `+` is not allowed in a JSON number".into()));
        }
        let digit = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_digit());
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if digit(self.peek()) {
                    if !self.j.allow_numeric_leading_zeros {
                        return Err(JErr(
                            "leading zeros are not allowed in a JSON number (option \
                             allowNumericLeadingZeros)"
                                .into(),
                        ));
                    }
                    while digit(self.peek()) {
                        self.pos += 1;
                    }
                }
            }
            Some(b'1'..=b'9') => {
                while digit(self.peek()) {
                    self.pos += 1;
                }
            }
            _ => {
                self.pos = start;
                return Err(self.unexpected("a value"));
            }
        }
        let mut int = true;
        if self.peek() == Some(b'.') {
            int = false;
            self.pos += 1;
            if !digit(self.peek()) {
                return Err(JErr("a decimal point must be followed by a digit".into()));
            }
            while digit(self.peek()) {
                self.pos += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            int = false;
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !digit(self.peek()) {
                return Err(JErr("an exponent must have digits".into()));
            }
            while digit(self.peek()) {
                self.pos += 1;
            }
        }
        let text = &self.s[start..self.pos];
        Ok(if int {
            Num::Int(text)
        } else {
            Num::Float(text)
        })
    }

    /// A quoted string (the cursor is on the opening quote).
    pub(super) fn string(&mut self) -> JResult<Cow<'a, str>> {
        let q = match self.peek() {
            Some(b'"') => b'"',
            Some(b'\'') if self.j.allow_single_quotes => b'\'',
            _ => return Err(self.unexpected("a string")),
        };
        self.pos += 1;
        let start = self.pos;
        let allow_ctrl = self.j.allow_unquoted_control_chars;
        if q == b'"' && !allow_ctrl {
            // Eight bytes at a time to the first quote, backslash or control character.
            self.pos = plain_run_end(self.b, self.pos);
        }
        loop {
            match self.peek() {
                None => return Err(JErr("unexpected end of input inside a string".into())),
                Some(c) if c == q => {
                    let s = &self.s[start..self.pos];
                    self.pos += 1;
                    return Ok(Cow::Borrowed(s));
                }
                Some(b'\\') => break,
                Some(c) if c < 0x20 && !allow_ctrl => {
                    return Err(JErr(format!(
                        "an unescaped control character (code {c}) in a string"
                    )))
                }
                Some(_) => self.pos += 1,
            }
        }
        let mut out = String::from(&self.s[start..self.pos]);
        loop {
            match self.peek() {
                None => return Err(JErr("unexpected end of input inside a string".into())),
                Some(c) if c == q => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                Some(c) if c < 0x20 && !allow_ctrl => {
                    return Err(JErr(format!(
                        "an unescaped control character (code {c}) in a string"
                    )))
                }
                Some(_) => {
                    let run_start = self.pos;
                    while let Some(c) = self.peek() {
                        if c == q || c == b'\\' || (c < 0x20 && !allow_ctrl) {
                            break;
                        }
                        self.pos += 1;
                    }
                    out.push_str(&self.s[run_start..self.pos]);
                }
            }
        }
    }

    /// One escape sequence after a backslash.
    pub(super) fn escape(&mut self, out: &mut String) -> JResult<()> {
        let Some(c) = self.peek() else {
            return Err(JErr("unexpected end of input in an escape sequence".into()));
        };
        self.pos += 1;
        match c {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let hi = self.hex4()?;
                let ch = if (0xD800..0xDC00).contains(&hi) && self.starts_with("\\u") {
                    let save = self.pos;
                    self.pos += 2;
                    let lo = self.hex4()?;
                    if (0xDC00..0xE000).contains(&lo) {
                        char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                    } else {
                        self.pos = save;
                        None
                    }
                } else {
                    char::from_u32(hi)
                };
                out.push(ch.unwrap_or('\u{FFFD}'));
            }
            b'\''
                if self.j.allow_single_quotes || self.j.allow_backslash_escaping_any_character =>
            {
                out.push('\'')
            }
            _ if self.j.allow_backslash_escaping_any_character => {
                // Take the whole (possibly multi-byte) character.
                self.pos -= 1;
                let ch = self.s[self.pos..].chars().next().unwrap_or('\u{FFFD}');
                self.pos += ch.len_utf8();
                out.push(ch);
            }
            _ => {
                return Err(JErr(format!(
                    "unrecognized escape sequence `\\{}`",
                    self.s[self.pos - 1..].chars().next().unwrap_or('?')
                )))
            }
        }
        Ok(())
    }

    pub(super) fn hex4(&mut self) -> JResult<u32> {
        let h = self
            .s
            .get(self.pos..self.pos + 4)
            .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
            .ok_or_else(|| JErr("a \\u escape needs 4 hex digits".into()))?;
        let v = u32::from_str_radix(h, 16).map_err(|_| JErr("a bad \\u escape".into()))?;
        self.pos += 4;
        Ok(v)
    }

    /// A field name: a string, or an identifier with `allowUnquotedFieldNames`.
    pub(super) fn key(&mut self) -> JResult<Cow<'a, str>> {
        match self.peek() {
            Some(b'"') | Some(b'\'') => self.string(),
            Some(c)
                if self.j.allow_unquoted_field_names
                    && (c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80) =>
            {
                let start = self.pos;
                while let Some(c) = self.peek() {
                    if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                Ok(Cow::Borrowed(&self.s[start..self.pos]))
            }
            _ => Err(self.unexpected("a field name in double quotes")),
        }
    }

    pub(super) fn skip_value(&mut self, depth: usize) -> JResult<()> {
        self.walk_value(None, depth)
    }

    /// Copies a value as compact JSON text, normalized as Jackson's `copyCurrentStructure`.
    pub(super) fn copy_value(&mut self, out: &mut String, depth: usize) -> JResult<()> {
        self.walk_value(Some(out), depth)
    }

    /// Reads one value at nesting `depth`, copying it to `out` when given. Iterative, with the
    /// open containers on a heap stack: a value nested as deep as [`MAX_DEPTH`] (Jackson's
    /// limit, past which the record is malformed) costs no call stack, so no input can
    /// overflow the thread's stack.
    pub(super) fn walk_value(&mut self, mut out: Option<&mut String>, depth: usize) -> JResult<()> {
        fn push(out: &mut Option<&mut String>, c: char) {
            if let Some(o) = out.as_deref_mut() {
                o.push(c);
            }
        }
        // The closing byte of each open container, innermost last.
        let mut open: Vec<u8> = Vec::new();
        loop {
            // One value at depth `depth + open.len()`.
            if depth + open.len() > MAX_DEPTH {
                return Err(JErr(format!("nesting deeper than {MAX_DEPTH} levels")));
            }
            match self.peek() {
                Some(c @ (b'{' | b'[')) => {
                    self.pos += 1;
                    push(&mut out, c as char);
                    self.skip_ws()?;
                    let close = if c == b'{' { b'}' } else { b']' };
                    if self.eat(close) {
                        push(&mut out, close as char);
                    } else {
                        open.push(close);
                        if close == b'}' {
                            self.member_name(&mut out)?;
                        }
                        continue;
                    }
                }
                Some(b'"' | b'\'') => {
                    let s = self.string()?;
                    if let Some(o) = out.as_deref_mut() {
                        write_json_string(o, &s);
                    }
                }
                Some(b't' | b'f') => {
                    let v = self.boolean()?;
                    if let Some(o) = out.as_deref_mut() {
                        o.push_str(if v { "true" } else { "false" });
                    }
                }
                Some(b'n') => {
                    self.literal("null")?;
                    if let Some(o) = out.as_deref_mut() {
                        o.push_str("null");
                    }
                }
                None => return Err(self.unexpected("a value")),
                Some(_) => {
                    let n = self.number()?;
                    if let Some(o) = out.as_deref_mut() {
                        match n {
                            Num::Int(t) => o.push_str(&canonical_int(t)),
                            Num::Float(t) => {
                                let v = t.parse::<f64>().unwrap_or(f64::NAN);
                                if v.is_finite() {
                                    o.push_str(&java_double_to_string(v));
                                } else {
                                    write_json_string(o, &java_double_to_string(v));
                                }
                            }
                            Num::Special(v) => write_json_string(o, &java_double_to_string(v)),
                        }
                    }
                }
            }
            // A value ended: close the containers it ends, or go on to the next element.
            loop {
                let Some(&close) = open.last() else {
                    return Ok(());
                };
                self.skip_ws()?;
                if self.eat(b',') {
                    push(&mut out, ',');
                    if close == b'}' {
                        self.member_name(&mut out)?;
                    } else {
                        self.skip_ws()?;
                    }
                    break;
                }
                if self.eat(close) {
                    push(&mut out, close as char);
                    open.pop();
                    continue;
                }
                return Err(self.unexpected(if close == b'}' {
                    "`,` or `}`"
                } else {
                    "`,` or `]`"
                }));
            }
        }
    }

    /// Reads `"name" :` of an object member (copied to `out` when given), up to its value.
    pub(super) fn member_name(&mut self, out: &mut Option<&mut String>) -> JResult<()> {
        self.skip_ws()?;
        let k = self.key()?;
        if let Some(o) = out.as_deref_mut() {
            write_json_string(o, &k);
        }
        self.skip_ws()?;
        self.expect(b':')?;
        if let Some(o) = out.as_deref_mut() {
            o.push(':');
        }
        self.skip_ws()
    }
}
