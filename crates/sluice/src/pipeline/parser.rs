//! The pipeline file's syntax: tokens from sqlparser's tokenizer (Spark dialect, so strings,
//! comments and backquoted names are exactly Spark SQL's), statements split at `;`, the DDL
//! parsed here by hand (sqlparser has neither `CREATE SINK` nor `WATERMARK FOR`, and takes
//! `SELECT .. FROM t WITH (..)` for table hints), and every query parsed by sqlparser's own
//! `parse_query` over the file's tokens, so its errors carry file lines and columns.

use crate::error::class;
use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Ident, ObjectName, Query, TableFactor, Visit, Visitor};
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

use super::{
    ColumnDef, InsertDef, Name, OptionDef, Position, QueryDef, SetDef, SinkDef, Statement,
    StatementKind, TableDef, ViewDef, Watermark,
};
use crate::error::{Result, SluiceError};

/// The pipeline file's text: positions to byte offsets, located errors with a caret line.
#[derive(Debug, Clone)]
pub(super) struct SourceText {
    pub file_name: String,
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceText {
    pub(super) fn new(text: &str, file_name: &str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self {
            file_name: file_name.to_string(),
            text: text.to_string(),
            line_starts,
        }
    }

    /// The byte offset of a position (sqlparser counts lines from 1 and columns in chars from 1).
    pub(super) fn offset(&self, p: Position) -> usize {
        let Some(&start) = self.line_starts.get((p.line.max(1) - 1) as usize) else {
            return self.text.len();
        };
        let line = &self.text[start..];
        let col = (p.column.max(1) - 1) as usize;
        start
            + line
                .char_indices()
                .nth(col)
                .map(|(i, _)| i)
                .unwrap_or(line.len())
    }

    pub(super) fn slice(&self, from: Position, to: Position) -> &str {
        let (a, b) = (self.offset(from), self.offset(to));
        &self.text[a..b.max(a)]
    }

    fn line_text(&self, line: u64) -> &str {
        let Some(&start) = self.line_starts.get((line.max(1) - 1) as usize) else {
            return "";
        };
        let end = self
            .line_starts
            .get(line as usize)
            .copied()
            .unwrap_or(self.text.len());
        self.text[start..end].trim_end_matches(['\n', '\r'])
    }

    /// `  3 | the line` and a caret under the column.
    fn snippet(&self, p: Position) -> String {
        if p.line == 0 {
            return String::new();
        }
        let num = p.line.to_string();
        let pad = " ".repeat(num.len());
        let line = self.line_text(p.line).replace('\t', " ");
        let caret = " ".repeat((p.column.max(1) - 1) as usize);
        format!("\n {pad} |\n {num} | {line}\n {pad} | {caret}^")
    }

    /// `file:line:col: message` plus the line with a caret.
    pub(super) fn error(
        &self,
        class: &'static str,
        p: Position,
        msg: impl std::fmt::Display,
    ) -> SluiceError {
        SluiceError::query(class, self.located(p, msg))
    }

    fn located(&self, p: Position, msg: impl std::fmt::Display) -> String {
        format!(
            "{}:{}:{}: {msg}{}",
            self.file_name,
            p.line,
            p.column,
            self.snippet(p)
        )
    }

    /// An engine error, located at `p` with `context` in front (same fault and class).
    pub(super) fn wrap(
        &self,
        p: Position,
        context: impl std::fmt::Display,
        e: SluiceError,
    ) -> SluiceError {
        SluiceError::new(
            e.fault(),
            e.class(),
            self.located(p, format!("{context}: {}", e.message())),
        )
    }
}

fn pos(l: Location) -> Position {
    Position {
        line: l.line,
        column: l.column,
    }
}

/// Parses the whole file into statements (syntax only; names are checked by the caller).
pub(super) fn parse_statements(src: &SourceText) -> Result<Vec<Statement>> {
    // Spark's string literals (backslash escapes: `'\''` does not end one); a query's own text
    // is planned by `Session::sql`.
    let dialect = crate::plan::sql_syntax::SparkDialect;
    let tokens = Tokenizer::new(&dialect, &src.text)
        .tokenize_with_location()
        .map_err(|e| {
            src.error(
                class::PIPELINE_SYNTAX_ERROR,
                pos(e.location),
                e.message.clone(),
            )
        })?;
    let mut statements = Vec::new();
    let mut current: Vec<TokenWithSpan> = Vec::new();
    for t in tokens {
        if t.token == Token::SemiColon {
            if let Some(s) = parse_statement(src, std::mem::take(&mut current))? {
                statements.push(s);
            }
        } else {
            current.push(t);
        }
    }
    if let Some(s) = parse_statement(src, current)? {
        statements.push(s);
    }
    Ok(statements)
}

/// One statement's tokens (whitespace and comments included, as sqlparser's parser wants them)
/// and a cursor over the others.
struct Cursor<'a> {
    src: &'a SourceText,
    toks: Vec<TokenWithSpan>,
    /// Indices in `toks` of the tokens that are not whitespace or comments.
    sig: Vec<usize>,
    i: usize,
}

fn describe(t: &Token) -> String {
    match t {
        Token::EOF => "the end of the statement".into(),
        Token::SingleQuotedString(s) => format!("the string '{s}'"),
        other => format!("`{other}`"),
    }
}

impl<'a> Cursor<'a> {
    fn tok(&self, k: usize) -> Option<&TokenWithSpan> {
        self.sig.get(k).map(|&j| &self.toks[j])
    }
    fn peek(&self) -> &Token {
        self.tok(self.i).map(|t| &t.token).unwrap_or(&Token::EOF)
    }
    fn at_end(&self) -> bool {
        self.i >= self.sig.len()
    }
    /// The start of token `k`, or just after the last token.
    fn pos_of(&self, k: usize) -> Position {
        match self.tok(k) {
            Some(t) => pos(t.span.start),
            None => self.end(),
        }
    }
    fn pos(&self) -> Position {
        self.pos_of(self.i)
    }
    fn end(&self) -> Position {
        self.sig
            .last()
            .map(|&j| pos(self.toks[j].span.end))
            .unwrap_or(Position { line: 1, column: 1 })
    }
    fn is_word(&self, kw: &str) -> bool {
        matches!(self.peek(), Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(kw))
    }
    fn eat_word(&mut self, kw: &str) -> bool {
        let yes = self.is_word(kw);
        if yes {
            self.i += 1;
        }
        yes
    }
    fn eat_words(&mut self, kws: &[&str]) -> bool {
        let save = self.i;
        for kw in kws {
            if !self.eat_word(kw) {
                self.i = save;
                return false;
            }
        }
        true
    }
    fn eat(&mut self, t: &Token) -> bool {
        let yes = self.peek() == t;
        if yes {
            self.i += 1;
        }
        yes
    }
    fn err(&self, msg: impl std::fmt::Display) -> SluiceError {
        self.src
            .error(class::PIPELINE_SYNTAX_ERROR, self.pos(), msg)
    }
    /// "expected X, found Y" at the current token, with what to do.
    fn expected(&self, what: &str, hint: &str) -> SluiceError {
        let sep = if hint.is_empty() { "" } else { ". " };
        self.err(format!(
            "expected {what}, found {}{sep}{hint}",
            describe(self.peek())
        ))
    }
    fn expect(&mut self, t: &Token, hint: &str) -> Result<()> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{t}`"), hint))
        }
    }
    fn expect_word(&mut self, kw: &str, hint: &str) -> Result<()> {
        if self.eat_word(kw) {
            Ok(())
        } else {
            Err(self.expected(kw, hint))
        }
    }
    fn expect_end(&mut self, after: &str) -> Result<()> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.err(format!(
                "unexpected {} after {after}; end the statement with `;`",
                describe(self.peek())
            )))
        }
    }
    /// A name: a word or a quoted identifier. Unquoted names are case-insensitive (lowercased,
    /// as DataFusion and Spark resolve them).
    fn name(&mut self, what: &str) -> Result<Name> {
        let p = self.pos();
        match self.peek().clone() {
            Token::Word(w) => {
                self.i += 1;
                Ok(Name {
                    value: normalize(&w.value, w.quote_style),
                    position: p,
                })
            }
            _ => Err(self.expected(what, "")),
        }
    }
    /// The tokens `[from, to)` as text of the file.
    fn text(&self, from: usize, to: usize) -> &'a str {
        if from >= to {
            return "";
        }
        let a = pos(self.toks[self.sig[from]].span.start);
        let b = pos(self.toks[self.sig[to - 1]].span.end);
        self.src.slice(a, b)
    }
    /// The index of the token closing the bracket opened at `open` (`(`), if any.
    fn matching_paren(&self, open: usize) -> Option<usize> {
        let mut depth = 0i32;
        for k in open..self.sig.len() {
            match self.tok(k).map(|t| &t.token) {
                Some(Token::LParen) => depth += 1,
                Some(Token::RParen) => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(k);
                    }
                }
                _ => {}
            }
        }
        None
    }
}

fn normalize(value: &str, quote: Option<char>) -> String {
    if quote.is_none() {
        value.to_ascii_lowercase()
    } else {
        value.to_string()
    }
}

fn parse_statement(src: &SourceText, toks: Vec<TokenWithSpan>) -> Result<Option<Statement>> {
    let sig: Vec<usize> = toks
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .map(|(i, _)| i)
        .collect();
    if sig.is_empty() {
        return Ok(None);
    }
    let mut c = Cursor {
        src,
        toks,
        sig,
        i: 0,
    };
    let position = c.pos();
    let kind = if c.eat_word("SET") {
        StatementKind::Set(set(&mut c)?)
    } else if c.eat_word("INSERT") {
        if c.is_word("OVERWRITE") {
            return Err(c.err(
                "INSERT OVERWRITE is not supported: a streaming sink only appends (or updates); \
                 use INSERT INTO",
            ));
        }
        c.expect_word("INTO", "write INSERT INTO sink_table SELECT ...")?;
        StatementKind::Insert(insert(&mut c)?)
    } else if c.eat_word("CREATE") {
        c.eat_words(&["OR", "REPLACE"]);
        let _ = c.eat_word("TEMPORARY") || c.eat_word("TEMP");
        if c.eat_word("TABLE") || c.eat_word("SOURCE") {
            StatementKind::CreateTable(table(&mut c)?)
        } else if c.eat_word("VIEW") {
            StatementKind::CreateView(view(&mut c)?)
        } else if c.eat_word("SINK") {
            StatementKind::CreateSink(sink(&mut c)?)
        } else {
            return Err(c.expected(
                "TABLE, VIEW or SINK after CREATE",
                "a pipeline declares sources with CREATE TABLE, intermediate queries with \
                 CREATE VIEW and queries with CREATE SINK",
            ));
        }
    } else {
        let hint = if c.is_word("SELECT") || c.is_word("WITH") || c.peek() == &Token::LParen {
            "a query runs only into a sink: write CREATE SINK name WITH (connector = ...) AS \
             SELECT ..., or INSERT INTO sink_table SELECT ..."
        } else {
            "a pipeline file holds CREATE TABLE, CREATE VIEW, CREATE SINK, INSERT INTO and SET \
             statements, each ended by `;`"
        };
        return Err(c.expected(
            "CREATE TABLE, CREATE VIEW, CREATE SINK, INSERT INTO or SET",
            hint,
        ));
    };
    Ok(Some(Statement { position, kind }))
}

/// `SET key = value` (Flink's `SET 'key' = 'value'`; `TO` works too).
fn set(c: &mut Cursor) -> Result<SetDef> {
    let position = c.pos();
    let key = option_key(
        c,
        "a conf key after SET, e.g. SET 'spark.sql.shuffle.partitions' = '4'",
    )?;
    if !c.eat(&Token::Eq) && !c.eat_word("TO") {
        return Err(c.expected("`=` after the conf key", "write SET 'key' = 'value'"));
    }
    let (value, _) = option_value(c)?;
    c.expect_end("SET key = value")?;
    Ok(SetDef {
        key,
        value,
        position,
    })
}

/// `CREATE TABLE name [(columns, WATERMARK FOR ...)] WITH (options)`.
fn table(c: &mut Cursor) -> Result<TableDef> {
    c.eat_words(&["IF", "NOT", "EXISTS"]);
    let name = c.name("a table name")?;
    let mut columns = Vec::new();
    let mut watermark = None;
    if c.peek() == &Token::LParen {
        let open = c.i;
        let Some(close) = c.matching_paren(open) else {
            return Err(c.err("this `(` is never closed: end the column list with `)`"));
        };
        c.i += 1;
        for (from, to) in elements(c, open + 1, close) {
            if from == to {
                return Err(c.src.error(
                    class::PIPELINE_SYNTAX_ERROR,
                    c.pos_of(from),
                    "expected a column (`name TYPE`) or WATERMARK FOR ..., found nothing: \
                     remove the extra `,`",
                ));
            }
            c.i = from;
            if c.is_word("WATERMARK") {
                if watermark.is_some() {
                    return Err(c.err(
                        "a second WATERMARK clause: a table has one event-time column; keep one",
                    ));
                }
                watermark = Some(watermark_clause(c, to)?);
            } else {
                columns.push(column(c, from, to)?);
            }
        }
        c.i = close + 1;
    }
    if let Some(w) = &watermark {
        if !columns.is_empty()
            && !columns
                .iter()
                .any(|col: &ColumnDef| col.name.eq_ignore_ascii_case(&w.column))
        {
            let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            return Err(c.src.error(
                class::PIPELINE_SYNTAX_ERROR,
                w.position,
                format!(
                    "WATERMARK FOR {}: the table has no such column (its columns: {}); name a \
                     TIMESTAMP column of the table",
                    w.column,
                    names.join(", ")
                ),
            ));
        }
    }
    if !c.is_word("WITH") {
        return Err(c.expected(
            "WITH (...) after the table",
            "a table says where its rows come from or go: add WITH (connector = 'filesystem', \
             path = '...', format = 'json') or another connector",
        ));
    }
    let options = options(c)?;
    c.expect_end("the table's WITH (...)")?;
    Ok(TableDef {
        name,
        columns,
        watermark,
        options,
    })
}

/// The comma-separated elements of a parenthesised list `[from, to)` at depth 0 (brackets of
/// `DECIMAL(10, 2)` and `STRUCT<a: INT, b: INT>` are kept whole).
fn elements(c: &Cursor, from: usize, to: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = from;
    for k in from..to {
        match c.tok(k).map(|t| &t.token) {
            Some(Token::LParen | Token::Lt) => depth += 1,
            Some(Token::RParen | Token::Gt) => depth -= 1,
            Some(Token::ShiftRight) => depth -= 2,
            Some(Token::Comma) if depth == 0 => {
                out.push((start, k));
                start = k + 1;
            }
            _ => {}
        }
    }
    if start < to || !out.is_empty() {
        out.push((start, to));
    }
    out
}

/// `name TYPE [NOT NULL] [COMMENT '...']`, checked with Sluice's Spark DDL schema parser.
fn column(c: &mut Cursor, from: usize, to: usize) -> Result<ColumnDef> {
    let position = c.pos_of(from);
    let for_word = |k: usize, kw: &str| matches!(c.tok(k).map(|t| &t.token), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(kw));
    for kw in [
        "PRIMARY",
        "CONSTRAINT",
        "UNIQUE",
        "FOREIGN",
        "CHECK",
        "PERIOD",
    ] {
        if for_word(from, kw) {
            return Err(c.src.error(
                class::PIPELINE_SYNTAX_ERROR,
                position,
                format!(
                    "{kw} constraints are not supported: a streaming source has no keys; \
                     deduplicate in the query (SELECT DISTINCT or a GROUP BY) instead"
                ),
            ));
        }
    }
    if to - from >= 2 && for_word(from + 1, "AS") {
        return Err(c.src.error(
            class::PIPELINE_SYNTAX_ERROR,
            c.pos_of(from + 1),
            "computed columns are not supported: compute the value in the query or in a \
             CREATE VIEW over the table",
        ));
    }
    if let Some(k) = (from..to).find(|&k| for_word(k, "METADATA")) {
        return Err(c.src.error(
            class::PIPELINE_SYNTAX_ERROR,
            c.pos_of(k),
            "METADATA columns are not supported: the Kafka source has Spark's fixed columns \
             (key, value, topic, partition, offset, timestamp, timestampType); declare those \
             by name or none",
        ));
    }
    let name = match c.tok(from).map(|t| &t.token) {
        Some(Token::Word(w)) => w.value.clone(),
        found => {
            let found = describe(found.unwrap_or(&Token::EOF));
            let msg = format!(
                "expected a column name, found {found}: a column is `name TYPE`, e.g. \
                 `ts TIMESTAMP`"
            );
            return Err(c.src.error(class::PIPELINE_SYNTAX_ERROR, position, msg));
        }
    };
    if to - from < 2 {
        return Err(c.src.error(
            class::PIPELINE_SYNTAX_ERROR,
            c.pos_of(to),
            format!("the column {name} has no type: write `{name} STRING` (or TIMESTAMP, BIGINT, DOUBLE, ...)"),
        ));
    }
    let ddl = c.text(from, to).to_string();
    crate::schema::parse_ddl_schema(&ddl).map_err(|e| {
        c.src
            .wrap(c.pos_of(from + 1), format!("the column {name}"), e)
    })?;
    Ok(ColumnDef {
        name,
        ddl,
        position,
    })
}

/// `WATERMARK FOR col AS col [- INTERVAL '10' MINUTE]` (Flink's form) = Spark's
/// `withWatermark("col", "10 minute")`.
fn watermark_clause(c: &mut Cursor, to: usize) -> Result<Watermark> {
    let position = c.pos();
    let shape = "Sluice's watermark is Spark's withWatermark(column, delay): write WATERMARK FOR \
                 ts AS ts - INTERVAL '10' MINUTE";
    c.i += 1; // WATERMARK
    c.expect_word("FOR", shape)?;
    let col = c.name("the event-time column after WATERMARK FOR")?;
    c.expect_word("AS", shape)?;
    let again = c.name("the event-time column after AS")?;
    if again.value != col.value {
        return Err(c.src.error(
            class::PIPELINE_SYNTAX_ERROR,
            again.position,
            format!(
                "the watermark expression must be on the column {} itself: {shape}",
                col.value
            ),
        ));
    }
    let column = match c.tok(c.i - 1).map(|t| &t.token) {
        Some(Token::Word(w)) => w.value.clone(),
        _ => col.value.clone(),
    };
    let delay = if c.i >= to {
        "0 seconds".to_string()
    } else {
        if !c.eat(&Token::Minus) {
            return Err(c.expected("`-` INTERVAL '...' after the column", shape));
        }
        c.expect_word("INTERVAL", shape)?;
        let at = c.pos();
        let (amount, quoted) = match c.peek().clone() {
            Token::SingleQuotedString(s) => {
                c.i += 1;
                (s, true)
            }
            Token::Number(n, _) => {
                c.i += 1;
                (n, false)
            }
            _ => return Err(c.expected("the interval as a string, e.g. '10'", shape)),
        };
        // The unit(s): `MINUTE`, `MINUTE TO SECOND` (Spark's '1:30' MINUTE TO SECOND), or
        // further number-unit pairs (`1 HOUR 30 MINUTES`).
        let mut words: Vec<String> = Vec::new();
        while c.i < to {
            match c.peek().clone() {
                Token::Word(w) if w.quote_style.is_none() => {
                    c.i += 1;
                    words.push(w.value.to_ascii_lowercase());
                }
                Token::Number(n, _) if !words.is_empty() => {
                    c.i += 1;
                    words.push(n);
                }
                _ if words.is_empty() => {
                    return Err(c.expected("an interval unit (SECOND, MINUTE, HOUR, DAY)", shape))
                }
                _ => {
                    return Err(c.err(format!(
                        "unexpected {} in the watermark: {shape}",
                        describe(c.peek())
                    )))
                }
            }
        }
        let delay = if quoted && words.len() > 1 {
            format!("'{amount}' {}", words.join(" "))
        } else if words.is_empty() {
            amount
        } else {
            format!("{amount} {}", words.join(" "))
        };
        crate::time_text::parse_interval_micros(&delay)
            .map_err(|e| c.src.wrap(at, "the watermark delay", e))?;
        delay
    };
    Ok(Watermark {
        column,
        delay,
        position,
    })
}

/// `WITH (key = value, ...)`. Keys: `'quoted'`, `"quoted"` or dotted words
/// (`kafka.bootstrap.servers`); values: strings, numbers, words (`true`).
fn options(c: &mut Cursor) -> Result<Vec<OptionDef>> {
    c.expect_word("WITH", "")?;
    c.expect(
        &Token::LParen,
        "options are WITH (connector = 'filesystem', path = '...')",
    )?;
    let mut out: Vec<OptionDef> = Vec::new();
    loop {
        if c.eat(&Token::RParen) {
            break;
        }
        let key_position = c.pos();
        let key = option_key(c, "an option name, e.g. connector")?;
        if let Some(prev) = out.iter().find(|o| o.key.eq_ignore_ascii_case(&key)) {
            return Err(c.src.error(
                class::PIPELINE_SYNTAX_ERROR,
                key_position,
                format!(
                    "the option {key} is given twice (first at line {}); keep one",
                    prev.key_position.line
                ),
            ));
        }
        c.expect(&Token::Eq, "write key = 'value'")?;
        let (value, position) = option_value(c)?;
        out.push(OptionDef {
            key,
            value,
            key_position,
            position,
        });
        if c.eat(&Token::Comma) {
            continue;
        }
        if c.eat(&Token::RParen) {
            break;
        }
        return Err(c.expected(
            "`,` or `)` after the option",
            "options are separated by `,`",
        ));
    }
    Ok(out)
}

fn option_key(c: &mut Cursor, what: &str) -> Result<String> {
    match c.peek().clone() {
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => {
            c.i += 1;
            Ok(s)
        }
        Token::Word(w) => {
            c.i += 1;
            let mut key = w.value;
            // `kafka.bootstrap.servers` unquoted (RisingWave's style).
            while c.peek() == &Token::Period {
                c.i += 1;
                match c.peek().clone() {
                    Token::Word(w) => {
                        c.i += 1;
                        key.push('.');
                        key.push_str(&w.value);
                    }
                    _ => return Err(c.expected("a word after `.` in the option name", "")),
                }
            }
            Ok(key)
        }
        _ => Err(c.expected(what, "")),
    }
}

fn option_value(c: &mut Cursor) -> Result<(String, Position)> {
    let p = c.pos();
    let negative = c.eat(&Token::Minus);
    let v = match c.peek().clone() {
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) if !negative => s,
        Token::Number(n, _) => {
            if negative {
                format!("-{n}")
            } else {
                n
            }
        }
        Token::Word(w) if !negative && w.quote_style.is_none() => w.value,
        _ => {
            return Err(c.expected(
                "a value ('string', number or true/false)",
                "quote values: path = '/data/in'",
            ))
        }
    };
    c.i += 1;
    Ok((v, p))
}

/// `CREATE SINK name WITH (...) AS query`, `CREATE SINK name AS query WITH (...)` (RisingWave's
/// order), or `FROM table` instead of `AS query`.
fn sink(c: &mut Cursor) -> Result<SinkDef> {
    c.eat_words(&["IF", "NOT", "EXISTS"]);
    let name = c.name("a sink name")?;
    let mut opts = if c.is_word("WITH") {
        Some(options(c)?)
    } else {
        None
    };
    // Trailing `WITH (...)`: the statement ends with `)` whose `(` follows WITH.
    let mut query_end = c.sig.len();
    if opts.is_none() && c.tok(c.sig.len() - 1).map(|t| &t.token) == Some(&Token::RParen) {
        let mut depth = 0i32;
        for k in (c.i..c.sig.len()).rev() {
            match c.tok(k).map(|t| &t.token) {
                Some(Token::RParen) => depth += 1,
                Some(Token::LParen) => {
                    depth -= 1;
                    if depth == 0 {
                        if k > c.i
                            && matches!(c.tok(k - 1).map(|t| &t.token), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("WITH"))
                        {
                            query_end = k - 1;
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    let query = if c.eat_word("AS") {
        let q = query(c, c.i, query_end)?;
        c.i = query_end;
        q
    } else if c.eat_word("FROM") {
        let t = c.name("the table the sink reads after FROM")?;
        let raw = c.text(c.i - 1, c.i).to_string();
        QueryDef {
            sql: format!("SELECT * FROM {raw}"),
            position: t.position,
            relations: vec![t],
        }
    } else {
        return Err(c.expected(
            "AS SELECT ... or FROM table",
            "write CREATE SINK name WITH (connector = ...) AS SELECT ...",
        ));
    };
    if c.is_word("WITH") {
        if opts.is_some() {
            return Err(c.err(
                "a second WITH (...): give the sink's options once, before AS or after the query",
            ));
        }
        opts = Some(options(c)?);
    }
    c.expect_end("the sink")?;
    let Some(options) = opts else {
        return Err(c.src.error(
            class::PIPELINE_SYNTAX_ERROR,
            name.position,
            format!(
                "the sink {} has no WITH (...): say where rows go, e.g. CREATE SINK {} WITH \
                 (connector = 'console') AS SELECT ...",
                name.value, name.value
            ),
        ));
    };
    Ok(SinkDef {
        name,
        options,
        query,
    })
}

/// `CREATE VIEW name AS query`.
fn view(c: &mut Cursor) -> Result<ViewDef> {
    c.eat_words(&["IF", "NOT", "EXISTS"]);
    let name = c.name("a view name")?;
    c.expect_word("AS", "write CREATE VIEW name AS SELECT ...")?;
    let query = query(c, c.i, c.sig.len())?;
    Ok(ViewDef { name, query })
}

/// `INSERT INTO table query` (after INTO).
fn insert(c: &mut Cursor) -> Result<InsertDef> {
    let target = c.name("the sink table after INSERT INTO")?;
    if c.peek() == &Token::LParen {
        // `(SELECT ...)` is a query; `(a, b)` a column list.
        let is_query = matches!(c.tok(c.i + 1).map(|t| &t.token), Some(Token::Word(w)) if w.quote_style.is_none() && (w.value.eq_ignore_ascii_case("SELECT") || w.value.eq_ignore_ascii_case("WITH")));
        if !is_query {
            return Err(c.err(
                "column lists in INSERT INTO are not supported: the query's columns go to the \
                 table's columns by position; order and name them in the SELECT",
            ));
        }
    }
    let query = query(c, c.i, c.sig.len())?;
    Ok(InsertDef { target, query })
}

/// The query in tokens `[from, to)`, parsed by sqlparser (Spark dialect) over the file's own
/// tokens, so its errors carry file positions.
fn query(c: &Cursor, from: usize, to: usize) -> Result<QueryDef> {
    if from >= to {
        return Err(c.src.error(
            class::PIPELINE_SYNTAX_ERROR,
            c.pos_of(from),
            "expected a query (SELECT ...), found the end of the statement",
        ));
    }
    let toks = c.toks[c.sig[from]..=c.sig[to - 1]].to_vec();
    let end = pos(c.toks[c.sig[to - 1]].span.end);
    let dialect = crate::plan::sql_syntax::SparkDialect;
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(toks);
    let parsed = parser
        .parse_query()
        .map_err(|e| parser_error(c.src, e, end, &c.toks))?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(c.src.error(
            class::PIPELINE_SYNTAX_ERROR,
            pos(next.span.start),
            format!(
                "unexpected {} after the query; end the statement with `;`",
                describe(&next.token)
            ),
        ));
    }
    let position = c.pos_of(from);
    let mut v = Relations {
        names: Vec::new(),
        ctes: HashSet::new(),
        fallback: position,
    };
    let _ = parsed.visit(&mut v);
    let Relations { names, ctes, .. } = v;
    let relations = names
        .into_iter()
        .filter(|n| !ctes.contains(&n.value))
        .collect();
    Ok(QueryDef {
        sql: c.text(from, to).to_string(),
        position,
        relations,
    })
}

/// sqlparser's message ends with ` at Line: L, Column: C` (none at the end of input).
fn parser_error(
    src: &SourceText,
    e: ParserError,
    end: Position,
    toks: &[TokenWithSpan],
) -> SluiceError {
    let msg = match e {
        ParserError::ParserError(m) | ParserError::TokenizerError(m) => m,
        ParserError::RecursionLimitExceeded => "the query is nested too deeply".to_string(),
    };
    let (msg, at) = match msg.rfind(" at Line: ") {
        Some(i) => {
            let loc = &msg[i + " at Line: ".len()..];
            let mut parts = loc.split(", Column: ");
            let line = parts.next().and_then(|l| l.trim().parse().ok());
            let column = parts.next().and_then(|c| c.trim().parse().ok());
            match (line, column) {
                (Some(line), Some(column)) if line > 0 => {
                    (msg[..i].to_string(), Position { line, column })
                }
                _ => (msg, end),
            }
        }
        None => (msg, end),
    };
    // sqlparser sometimes reports the token after the one it names ("Expected an expression,
    // found: FROM" at the token after FROM): point at the named token when it is just before.
    let mut at = at;
    if let Some(found) = msg
        .rsplit("found: ")
        .next()
        .filter(|_| msg.contains("found: "))
    {
        let sig: Vec<&TokenWithSpan> = toks
            .iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_)))
            .collect();
        if let Some(k) = sig.iter().position(|t| pos(t.span.start) == at) {
            let names = |t: &TokenWithSpan| t.token.to_string().eq_ignore_ascii_case(found.trim());
            if !names(sig[k]) && k > 0 && names(sig[k - 1]) {
                at = pos(sig[k - 1].span.start);
            }
        }
    }
    let msg = msg.replace("found: EOF", "found: the end of the statement");
    src.error(
        class::PIPELINE_SYNTAX_ERROR,
        at,
        format!("syntax error in the query: {msg}"),
    )
}

/// The tables a query reads (not CTE names, not table functions).
struct Relations {
    names: Vec<Name>,
    ctes: HashSet<String>,
    fallback: Position,
}

impl Visitor for Relations {
    type Break = ();
    fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
        if let Some(with) = &q.with {
            for cte in &with.cte_tables {
                let n = &cte.alias.name;
                self.ctes.insert(normalize(&n.value, n.quote_style));
            }
        }
        ControlFlow::Continue(())
    }
    fn pre_visit_table_factor(&mut self, tf: &TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table {
            name, args: None, ..
        } = tf
        {
            if let Some(n) = object_name(name, self.fallback) {
                self.names.push(n);
            }
        }
        ControlFlow::Continue(())
    }
}

fn object_name(name: &ObjectName, fallback: Position) -> Option<Name> {
    let idents: Vec<&Ident> = name.0.iter().filter_map(|p| p.as_ident()).collect();
    let first = idents.first()?;
    let position = if first.span.start.line > 0 {
        pos(first.span.start)
    } else {
        fallback
    };
    Some(Name {
        value: idents
            .iter()
            .map(|i| normalize(&i.value, i.quote_style))
            .collect::<Vec<_>>()
            .join("."),
        position,
    })
}
