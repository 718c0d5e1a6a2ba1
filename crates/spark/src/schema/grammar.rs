//! Spark's type grammar, one parser for both entry points of [`super`]: DDL schema strings and
//! Spark type names.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, TimeUnit};

use super::{invalid, MAX_DECIMAL_PRECISION};
use crate::error::class;
use crate::error::{Result, SluiceError};

/// What the grammar admits: the two entry points share one parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// A DDL schema string ([`parse_ddl_schema`]): columns of scalar and nested (`ARRAY`,
    /// `STRUCT`, `MAP`) types, struct fields with `NOT NULL` and `COMMENT` as Spark's DDL
    /// allows. `VOID` and unsigned integers are not supported in schemas yet.
    Ddl,
    /// A Spark type name ([`parse_spark_type_name`]): nested `ARRAY`, `STRUCT` and `MAP`,
    /// `VOID`, `<int> UNSIGNED`.
    TypeName,
}

/// Spark's type grammar (`StructType.fromDDL`, `DataType.fromDDL`), for both dialects.
pub(super) struct TypeParser<'a> {
    src: &'a str,
    pub(super) pos: usize,
    dialect: Dialect,
}

impl<'a> TypeParser<'a> {
    pub(super) fn new(src: &'a str, dialect: Dialect) -> Self {
        Self {
            src,
            pos: 0,
            dialect,
        }
    }

    /// The error for a malformed string, naming the string.
    pub(super) fn invalid(&self, msg: impl std::fmt::Display) -> SluiceError {
        match self.dialect {
            Dialect::Ddl => invalid(self.src, msg),
            Dialect::TypeName => SluiceError::query(
                class::INVALID_SCHEMA,
                format!("cannot parse the Spark type name {:?}: {msg}", self.src),
            ),
        }
    }

    /// Who a type error is about: the DDL column, or in a type name the struct field (or the
    /// type itself, outside structs).
    fn subject(&self, col: &str) -> String {
        match (self.dialect, col) {
            (Dialect::Ddl, _) => format!("column `{col}`"),
            (Dialect::TypeName, "") => "the type".to_string(),
            (Dialect::TypeName, _) => format!("struct field `{col}`"),
        }
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    pub(super) fn rest_excerpt(&self) -> String {
        self.rest().chars().take(20).collect()
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    pub(super) fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.pos += c.len_utf8();
            } else {
                break;
            }
        }
    }

    pub(super) fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    /// Skips whitespace, then requires `c`.
    fn expect(&mut self, c: char) -> Result<()> {
        self.skip_ws();
        if self.eat(c) {
            return Ok(());
        }
        let found = if self.at_end() {
            "the end of the string".to_string()
        } else {
            format!("`{}`", self.rest_excerpt())
        };
        Err(self.invalid(format!(
            "expected `{c}` at position {}, found {found}",
            self.pos
        )))
    }

    /// An identifier: letters, digits and `_`.
    fn word(&mut self) -> &'a str {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_alphanumeric() || c == '_' {
                self.pos += c.len_utf8();
            } else {
                break;
            }
        }
        &self.src[start..self.pos]
    }

    /// A keyword (case-insensitive) followed by a non-identifier character.
    fn keyword(&mut self, kw: &str) -> bool {
        let save = self.pos;
        let w = self.word();
        if w.eq_ignore_ascii_case(kw) {
            true
        } else {
            self.pos = save;
            false
        }
    }

    /// A DDL column name (`noun` "column", never empty) or a struct field name (`noun`
    /// "field"; a backquoted one may be empty): bare, or backquoted with ``` `` ``` for a
    /// backquote.
    fn parse_name(&mut self, noun: &str, allow_empty: bool) -> Result<String> {
        self.skip_ws();
        if self.eat('`') {
            let mut name = String::new();
            loop {
                match self.peek() {
                    None => {
                        return Err(self.invalid(format!(
                            "the backquoted name `{name} is not closed with a backquote"
                        )))
                    }
                    Some('`') => {
                        self.pos += 1;
                        if self.eat('`') {
                            name.push('`');
                        } else {
                            break;
                        }
                    }
                    Some(c) => {
                        name.push(c);
                        self.pos += c.len_utf8();
                    }
                }
            }
            if name.is_empty() && !allow_empty {
                return Err(self.invalid(format!("a {noun} name is empty (``)")));
            }
            return Ok(name);
        }
        let w = self.word();
        if w.is_empty() {
            let what = if self.at_end() {
                "the end of the string".to_string()
            } else {
                format!("`{}`", self.rest_excerpt())
            };
            return Err(self.invalid(format!(
                "expected a {noun} name at position {}, found {what}; backquote names with \
                 special characters",
                self.pos
            )));
        }
        Ok(w.to_string())
    }

    pub(super) fn parse_field(&mut self) -> Result<Field> {
        let name = self.parse_name("column", false)?;
        // Spark's DDL also accepts `name: TYPE` inside structs; be lenient at the top level too.
        self.skip_ws();
        self.eat(':');
        self.skip_ws();
        let data_type = self.parse_type(&name)?;
        let nullable = self.parse_column_options(&name)?;
        Ok(Field::new(name, data_type, nullable))
    }

    /// `[NOT NULL] [COMMENT '..']` after a column's or struct field's type; returns whether
    /// it is nullable (comments are read and dropped).
    fn parse_column_options(&mut self, name: &str) -> Result<bool> {
        let mut nullable = true;
        loop {
            self.skip_ws();
            if self.keyword("NOT") {
                self.skip_ws();
                if !self.keyword("NULL") {
                    return Err(
                        self.invalid(format!("column `{name}`: `NOT` must be followed by `NULL`"))
                    );
                }
                nullable = false;
            } else if self.keyword("COMMENT") {
                self.skip_ws();
                self.parse_string_literal(name)?;
            } else {
                break;
            }
        }
        Ok(nullable)
    }

    fn parse_string_literal(&mut self, col: &str) -> Result<String> {
        let quote = match self.peek() {
            Some(q @ ('\'' | '"')) => q,
            _ => {
                return Err(self.invalid(format!(
                    "column `{col}`: COMMENT must be followed by a quoted string"
                )))
            }
        };
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => {
                    return Err(
                        self.invalid(format!("column `{col}`: the COMMENT string is not closed"))
                    )
                }
                Some('\\') => {
                    self.pos += 1;
                    if let Some(c) = self.peek() {
                        out.push(c);
                        self.pos += c.len_utf8();
                    }
                }
                Some(c) if c == quote => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(c) => {
                    out.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    /// `(n[, m])` after a type name; returns the numbers.
    fn parse_type_args(&mut self, col: &str, type_name: &str) -> Result<Option<Vec<u32>>> {
        self.skip_ws();
        if !self.eat('(') {
            return Ok(None);
        }
        let subject = self.subject(col);
        let mut args = Vec::new();
        loop {
            self.skip_ws();
            let start = self.pos;
            while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                self.pos += 1;
            }
            let digits = &self.src[start..self.pos];
            let n: u32 = digits.parse().map_err(|_| {
                self.invalid(format!(
                    "{subject}: `{type_name}(...)` expects whole numbers, found `{}`",
                    self.rest_excerpt()
                ))
            })?;
            args.push(n);
            self.skip_ws();
            if self.eat(',') {
                continue;
            }
            if self.eat(')') {
                return Ok(Some(args));
            }
            return Err(self.invalid(format!("{subject}: `{type_name}(` is not closed with `)`")));
        }
    }

    /// A type (`col`: the DDL column or struct field it is for, for messages; empty elsewhere).
    pub(super) fn parse_type(&mut self, col: &str) -> Result<DataType> {
        self.skip_ws();
        let type_start = self.pos;
        let word = self.word();
        if word.is_empty() {
            return Err(self.invalid(match self.dialect {
                Dialect::Ddl => format!(
                    "column `{col}` has no type (expected e.g. `{col} STRING`), found `{}`",
                    self.rest_excerpt()
                ),
                Dialect::TypeName => format!(
                    "expected a type at position {}, found `{}`",
                    self.pos,
                    self.rest_excerpt()
                ),
            }));
        }
        let upper = word.to_ascii_uppercase();
        if let Some(t) = self.parse_nested(&upper)? {
            return Ok(t);
        }
        if self.dialect == Dialect::TypeName {
            if let Some(t) = self.parse_type_name_only(&upper)? {
                return Ok(t);
            }
        }
        let subject = self.subject(col);
        let dt = match upper.as_str() {
            "STRING" => DataType::Utf8,
            "VARCHAR" | "CHAR" | "CHARACTER" => {
                match self.parse_type_args(col, &upper)? {
                    Some(args) if args.len() == 1 && args[0] > 0 => {}
                    _ => {
                        return Err(self.invalid(format!(
                            "{subject}: {upper} needs a length, like {upper}(20)"
                        )))
                    }
                }
                DataType::Utf8
            }
            "BOOLEAN" | "BOOL" => DataType::Boolean,
            "TINYINT" | "BYTE" => DataType::Int8,
            "SMALLINT" | "SHORT" => DataType::Int16,
            "INT" | "INTEGER" => DataType::Int32,
            "BIGINT" | "LONG" => DataType::Int64,
            "FLOAT" | "REAL" => DataType::Float32,
            "DOUBLE" => DataType::Float64,
            "DATE" => DataType::Date32,
            "TIMESTAMP" | "TIMESTAMP_LTZ" | "TIMESTAMP_NTZ" => {
                DataType::Timestamp(TimeUnit::Microsecond, None)
            }
            "BINARY" => DataType::Binary,
            "DECIMAL" | "DEC" | "NUMERIC" => {
                let (p, s) = match self.parse_type_args(col, &upper)?.as_deref() {
                    None => (10, 0),
                    Some([p]) => (*p, 0),
                    Some([p, s]) => (*p, *s),
                    Some(_) => {
                        return Err(self.invalid(format!(
                            "{subject}: DECIMAL takes (precision) or (precision, scale)"
                        )))
                    }
                };
                if p == 0 || p > MAX_DECIMAL_PRECISION as u32 {
                    return Err(self.invalid(format!(
                        "{subject}: DECIMAL precision {p} is out of range 1..={}",
                        MAX_DECIMAL_PRECISION
                    )));
                }
                if s > p {
                    return Err(self.invalid(format!(
                        "{subject}: DECIMAL({p},{s}) has a scale larger than its precision"
                    )));
                }
                DataType::Decimal128(p as u8, s as i8)
            }
            "INTERVAL" | "VOID" | "VARIANT" | "OBJECT" => {
                return Err(SluiceError::not_supported_yet(format!(
                    "{subject} has the type {upper}, which is not supported in schemas yet"
                )))
            }
            _ => {
                return Err(self.invalid(format!(
                    "{subject} has the unknown type `{}`; use STRING, BOOLEAN, TINYINT, \
                     SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p,s), DATE, TIMESTAMP or \
                     BINARY",
                    &self.src[type_start..self.pos]
                )))
            }
        };
        // A stray `<` after a simple type means a nested declaration we do not understand.
        self.skip_ws();
        if self.peek() == Some('<') {
            return Err(self.invalid(format!("{subject}: the type {upper} does not take `<...>`")));
        }
        Ok(dt)
    }

    /// The nested types after their keyword `upper`, in both dialects: `ARRAY<t>`,
    /// `MAP<k, v>` and `STRUCT<name[:] t [NOT NULL] [COMMENT '..'], ..>` (a type name's
    /// struct fields need the `:`, as [`spark_type_name`](super::spark_type_name) writes
    /// them). `None` for any other type.
    fn parse_nested(&mut self, upper: &str) -> Result<Option<DataType>> {
        Ok(Some(match upper {
            "ARRAY" => {
                self.expect('<')?;
                let item = self.parse_type("")?;
                self.expect('>')?;
                DataType::new_list(item, true)
            }
            "MAP" => {
                self.expect('<')?;
                let k = self.parse_type("")?;
                self.expect(',')?;
                let v = self.parse_type("")?;
                self.expect('>')?;
                DataType::Map(Arc::new(map_entries(k, v)), false)
            }
            "STRUCT" => {
                self.expect('<')?;
                let mut fields = Vec::new();
                self.skip_ws();
                if !self.eat('>') {
                    loop {
                        fields.push(self.parse_struct_field()?);
                        self.skip_ws();
                        if self.eat('>') {
                            break;
                        }
                        self.expect(',')?;
                    }
                }
                DataType::Struct(fields.into())
            }
            _ => return Ok(None),
        }))
    }

    /// One field of a `STRUCT<..>`.
    fn parse_struct_field(&mut self) -> Result<Field> {
        let name = self.parse_name("field", true)?;
        match self.dialect {
            Dialect::TypeName => self.expect(':')?,
            Dialect::Ddl => {
                self.skip_ws();
                self.eat(':');
            }
        }
        let t = self.parse_type(&name)?;
        let mut nullable = true;
        if self.dialect == Dialect::Ddl {
            nullable = self.parse_column_options(&name)?;
        }
        Ok(Field::new(name, t, nullable))
    }

    /// The types only a type name holds, after their keyword `upper`: `VOID` and
    /// `<int> UNSIGNED`. `None` for any other type (a scalar, parsed as in DDL).
    fn parse_type_name_only(&mut self, upper: &str) -> Result<Option<DataType>> {
        Ok(Some(match upper {
            "VOID" => DataType::Null,
            "TINYINT" | "SMALLINT" | "INT" | "BIGINT" => {
                let save = self.pos;
                self.skip_ws();
                if !self.keyword("UNSIGNED") {
                    self.pos = save;
                    return Ok(None);
                }
                match upper {
                    "TINYINT" => DataType::UInt8,
                    "SMALLINT" => DataType::UInt16,
                    "INT" => DataType::UInt32,
                    _ => DataType::UInt64,
                }
            }
            _ => return Ok(None),
        }))
    }
}

/// The entries field of Spark's `MAP<k, v>`: keys never null, values nullable
/// (`valueContainsNull`), named as DataFusion's `map()` names them.
pub(super) fn map_entries(k: DataType, v: DataType) -> Field {
    Field::new_struct(
        "entries",
        vec![Field::new("key", k, false), Field::new("value", v, true)],
        false,
    )
}
