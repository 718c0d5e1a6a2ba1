//! Spark DDL schema strings (`"event_time TIMESTAMP, user STRING, amount DOUBLE"`) to Arrow
//! schemas, and Arrow types back to Spark SQL type names for messages.
//!
//! Type mapping (case-insensitive, as in Spark's `StructType.fromDDL`):
//!
//! | Spark | Arrow |
//! |---|---|
//! | `STRING`, `VARCHAR(n)`, `CHAR(n)` | `Utf8` |
//! | `BOOLEAN` | `Boolean` |
//! | `TINYINT`/`BYTE`, `SMALLINT`/`SHORT`, `INT`/`INTEGER`, `BIGINT`/`LONG` | `Int8`..`Int64` |
//! | `FLOAT`/`REAL`, `DOUBLE` | `Float32`, `Float64` |
//! | `DECIMAL`/`DEC`/`NUMERIC` `[(p[, s])]` | `Decimal128(p, s)` (default `(10, 0)`) |
//! | `DATE` | `Date32` |
//! | `TIMESTAMP`, `TIMESTAMP_LTZ`, `TIMESTAMP_NTZ` | `Timestamp(Microsecond, None)` (UTC micros) |
//! | `BINARY` | `Binary` |
//!
//! One grammar, two entry points: [`parse_ddl_schema`] reads a schema string, and
//! [`parse_spark_type_name`] reads one type name as [`spark_type_name`] writes it (the names
//! recorded in a state schema file). Type names also hold nested `ARRAY<t>`, `STRUCT<name: t,
//! ..>` and `MAP<k, v>`, `VOID` (`Null`) and `<int> UNSIGNED`; DDL schemas refuse nested
//! types as not supported yet. Intervals are not supported in either.

use crate::error::class;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::error::{Result, SluiceError};

/// Spark's maximum decimal precision.
pub const MAX_DECIMAL_PRECISION: u8 = 38;

/// Parses a Spark DDL schema string such as
/// `"event_time TIMESTAMP, user STRING NOT NULL, amount DECIMAL(10,2) COMMENT 'in EUR'"`.
///
/// Column names may be backquoted (`` `my col` ``, with ``` `` ``` for a literal backquote).
/// Every field is nullable unless it says `NOT NULL`. A bad string fails with the query error
/// class `class::INVALID_SCHEMA` naming the bad part; nested types fail as not supported yet.
pub fn parse_ddl_schema(ddl: &str) -> Result<SchemaRef> {
    let mut p = TypeParser::new(ddl, Dialect::Ddl);
    let mut fields: Vec<Field> = Vec::new();
    p.skip_ws();
    if p.at_end() {
        return Err(invalid(
            ddl,
            "the schema is empty; give at least one `name TYPE` column",
        ));
    }
    loop {
        let field = p.parse_field()?;
        if let Some(prev) = fields
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(field.name()))
        {
            return Err(invalid(
                ddl,
                format!(
                    "the column name `{}` appears twice (column names are case-insensitive, \
                     like `{}`)",
                    field.name(),
                    prev.name()
                ),
            ));
        }
        fields.push(field);
        p.skip_ws();
        if p.at_end() {
            break;
        }
        if p.eat(',') {
            p.skip_ws();
            if p.at_end() {
                return Err(invalid(ddl, "a trailing `,` is not followed by a column"));
            }
            continue;
        }
        return Err(invalid(
            ddl,
            format!(
                "unexpected `{}` at position {}; columns are separated by `,`",
                p.rest_excerpt(),
                p.pos
            ),
        ));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// The Spark SQL name of an Arrow type, for messages (`INT`, `STRING`, `DECIMAL(10,2)`, ...).
pub fn spark_type_name(dt: &DataType) -> String {
    match dt {
        DataType::Null => "VOID".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "TINYINT UNSIGNED".into(),
        DataType::UInt16 => "SMALLINT UNSIGNED".into(),
        DataType::UInt32 => "INT UNSIGNED".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        DataType::Float16 | DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "BINARY".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Timestamp(_, _) => "TIMESTAMP".into(),
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => format!("DECIMAL({p},{s})"),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("DECIMAL({p},{s})"),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _) => format!("ARRAY<{}>", spark_type_name(f.data_type())),
        DataType::Struct(fields) => {
            let inner: Vec<String> = fields
                .iter()
                .map(|f| {
                    format!(
                        "{}: {}",
                        quote_name(f.name()),
                        spark_type_name(f.data_type())
                    )
                })
                .collect();
            format!("STRUCT<{}>", inner.join(", "))
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "MAP<{}, {}>",
                spark_type_name(kv[0].data_type()),
                spark_type_name(kv[1].data_type())
            ),
            other => format!("MAP<{}>", spark_type_name(other)),
        },
        DataType::Interval(_) => "INTERVAL".into(),
        DataType::Duration(_) => "INTERVAL DAY TO SECOND".into(),
        DataType::Dictionary(_, v) => spark_type_name(v),
        other => other.to_string().to_ascii_uppercase(),
    }
}

/// The DDL string of a schema (`a INT, b STRING NOT NULL`), the inverse of [`parse_ddl_schema`]
/// for the supported types.
pub fn schema_to_ddl(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| {
            let mut s = format!(
                "{} {}",
                quote_name(f.name()),
                spark_type_name(f.data_type())
            );
            if !f.is_nullable() {
                s.push_str(" NOT NULL");
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A column name as written in DDL: bare if it is a simple identifier, else backquoted.
fn quote_name(name: &str) -> String {
    let simple = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if simple {
        name.to_string()
    } else {
        format!("`{}`", name.replace('`', "``"))
    }
}

fn invalid(ddl: &str, msg: impl std::fmt::Display) -> SluiceError {
    SluiceError::query(
        class::INVALID_SCHEMA,
        format!("cannot parse the schema string {ddl:?}: {msg}"),
    )
}

/// An Arrow type from a Spark type name as [`spark_type_name`] writes it (the names recorded in
/// a state schema file): scalars as in DDL, `<TINYINT|SMALLINT|INT|BIGINT> UNSIGNED`, `VOID`,
/// and the nested `ARRAY<t>`, `STRUCT<name: t, ..>` (names bare or backquoted) and
/// `MAP<k, v>`. Timestamps are microseconds without a time zone.
///
/// The same grammar as [`parse_ddl_schema`], which refuses what only type names may hold.
/// A bad name fails with `class::INVALID_SCHEMA` naming the bad part.
pub fn parse_spark_type_name(name: &str) -> Result<DataType> {
    let mut p = TypeParser::new(name, Dialect::TypeName);
    p.skip_ws();
    let t = p.parse_type("")?;
    p.skip_ws();
    if !p.at_end() {
        return Err(p.invalid(format!(
            "unexpected `{}` at position {} after the type",
            p.rest_excerpt(),
            p.pos
        )));
    }
    Ok(t)
}

/// What the grammar admits: the two entry points share one parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// A DDL schema string ([`parse_ddl_schema`]): flat columns only. Nested types, `VOID` and
    /// unsigned integers are not supported in schemas yet.
    Ddl,
    /// A Spark type name ([`parse_spark_type_name`]): nested `ARRAY`, `STRUCT` and `MAP`,
    /// `VOID`, `<int> UNSIGNED`.
    TypeName,
}

/// Spark's type grammar (`StructType.fromDDL`, `DataType.fromDDL`), for both dialects.
struct TypeParser<'a> {
    src: &'a str,
    pos: usize,
    dialect: Dialect,
}

impl<'a> TypeParser<'a> {
    fn new(src: &'a str, dialect: Dialect) -> Self {
        Self {
            src,
            pos: 0,
            dialect,
        }
    }

    /// The error for a malformed string, naming the string.
    fn invalid(&self, msg: impl std::fmt::Display) -> SluiceError {
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

    fn rest_excerpt(&self) -> String {
        self.rest().chars().take(20).collect()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.pos += c.len_utf8();
            } else {
                break;
            }
        }
    }

    fn eat(&mut self, c: char) -> bool {
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

    fn parse_field(&mut self) -> Result<Field> {
        let name = self.parse_name("column", false)?;
        // Spark's DDL also accepts `name: TYPE` inside structs; be lenient at the top level too.
        self.skip_ws();
        self.eat(':');
        self.skip_ws();
        let data_type = self.parse_type(&name)?;
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
                self.parse_string_literal(&name)?;
            } else {
                break;
            }
        }
        Ok(Field::new(name, data_type, nullable))
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
    fn parse_type(&mut self, col: &str) -> Result<DataType> {
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
            // Only DDL reaches here with these (a type name parsed them above): schemas refuse
            // them until nested columns are supported (issue 14).
            "ARRAY" | "STRUCT" | "MAP" => {
                return Err(SluiceError::not_supported_yet(format!(
                    "{subject} has the nested type {upper}<...>: nested types in schemas are not \
                     supported yet; use flat columns (STRING, INT, DOUBLE, TIMESTAMP, ...)"
                )))
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

    /// The types only a type name holds, after their keyword `upper`: `ARRAY<t>`,
    /// `MAP<k, v>`, `STRUCT<name: t, ..>`, `VOID` and `<int> UNSIGNED`. `None` for any other
    /// type (a scalar, parsed as in DDL).
    fn parse_type_name_only(&mut self, upper: &str) -> Result<Option<DataType>> {
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
                let entries = Field::new_struct(
                    "entries",
                    vec![Field::new("key", k, false), Field::new("value", v, true)],
                    false,
                );
                DataType::Map(Arc::new(entries), false)
            }
            "STRUCT" => {
                self.expect('<')?;
                let mut fields = Vec::new();
                self.skip_ws();
                if !self.eat('>') {
                    loop {
                        let name = self.parse_name("field", true)?;
                        self.expect(':')?;
                        let t = self.parse_type(&name)?;
                        fields.push(Field::new(name, t, true));
                        self.skip_ws();
                        if self.eat('>') {
                            break;
                        }
                        self.expect(',')?;
                    }
                }
                DataType::Struct(fields.into())
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Fault;

    fn ts() -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, None)
    }

    #[test]
    fn parses_the_usual_schema() {
        let s = parse_ddl_schema("event_time TIMESTAMP, user STRING, action STRING, amount DOUBLE")
            .unwrap();
        assert_eq!(s.fields().len(), 4);
        assert_eq!(s.field(0).name(), "event_time");
        assert_eq!(s.field(0).data_type(), &ts());
        assert_eq!(s.field(1).data_type(), &DataType::Utf8);
        assert_eq!(s.field(3).data_type(), &DataType::Float64);
        assert!(s.fields().iter().all(|f| f.is_nullable()));
    }

    #[test]
    fn all_types_case_insensitive() {
        let s = parse_ddl_schema(
            "a string, b varchar(10), c Char(3), d boolean, e tinyint, f byte, g smallint, \
             h short, i int, j integer, k bigint, l long, m float, n real, o double, \
             p decimal, q decimal(12), r DECIMAL( 5 , 2 ), s date, t timestamp, \
             u timestamp_ntz, v binary, w numeric(38,38)",
        )
        .unwrap();
        let types: Vec<DataType> = s.fields().iter().map(|f| f.data_type().clone()).collect();
        assert_eq!(
            types,
            vec![
                DataType::Utf8,
                DataType::Utf8,
                DataType::Utf8,
                DataType::Boolean,
                DataType::Int8,
                DataType::Int8,
                DataType::Int16,
                DataType::Int16,
                DataType::Int32,
                DataType::Int32,
                DataType::Int64,
                DataType::Int64,
                DataType::Float32,
                DataType::Float32,
                DataType::Float64,
                DataType::Decimal128(10, 0),
                DataType::Decimal128(12, 0),
                DataType::Decimal128(5, 2),
                DataType::Date32,
                ts(),
                ts(),
                DataType::Binary,
                DataType::Decimal128(38, 38),
            ]
        );
    }

    #[test]
    fn backquotes_not_null_and_comments() {
        let s = parse_ddl_schema(
            "`my col` INT NOT NULL COMMENT 'the id', `we``ird` STRING COMMENT \"x, y\", z DATE",
        )
        .unwrap();
        assert_eq!(s.field(0).name(), "my col");
        assert!(!s.field(0).is_nullable());
        assert_eq!(s.field(1).name(), "we`ird");
        assert!(s.field(1).is_nullable());
        assert_eq!(s.field(2).data_type(), &DataType::Date32);
    }

    #[test]
    fn bad_strings_name_the_bad_part() {
        for (ddl, needle) in [
            ("a INT, b FOO", "FOO"),
            ("a", "no type"),
            ("a INT,", "trailing"),
            ("a INT b STRING", "b STRING"),
            ("a DECIMAL(40,2)", "precision 40"),
            ("a DECIMAL(5,6)", "scale"),
            ("a INT, A STRING", "twice"),
            ("", "empty"),
            ("`a INT", "not closed"),
            ("a INT NOT", "NULL"),
            ("a VARCHAR", "length"),
        ] {
            let err = parse_ddl_schema(ddl).unwrap_err();
            assert_eq!(err.class(), "INVALID_SCHEMA", "{ddl}");
            assert_eq!(err.fault(), Fault::Query);
            assert!(err.message().contains(needle), "{ddl}: {}", err.message());
        }
    }

    #[test]
    fn nested_types_are_not_supported_yet() {
        for ddl in ["a ARRAY<INT>", "a STRUCT<b: INT>", "a map<string, int>"] {
            let err = parse_ddl_schema(ddl).unwrap_err();
            assert_eq!(err.fault(), Fault::NotSupportedYet, "{ddl}");
        }
    }

    #[test]
    fn type_names_round_trip() {
        let ddl = "a STRING, b BOOLEAN, c TINYINT, d SMALLINT, e INT, f BIGINT, g FLOAT, \
                   h DOUBLE, i DECIMAL(7,3), j DATE, k TIMESTAMP, l BINARY NOT NULL, `m n` INT";
        let s = parse_ddl_schema(ddl).unwrap();
        assert_eq!(
            schema_to_ddl(&s),
            ddl.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        assert_eq!(spark_type_name(&DataType::Int32), "INT");
        assert_eq!(
            spark_type_name(&DataType::Decimal128(10, 2)),
            "DECIMAL(10,2)"
        );
        assert_eq!(
            spark_type_name(&DataType::List(Arc::new(Field::new(
                "item",
                DataType::Utf8,
                true
            )))),
            "ARRAY<STRING>"
        );
    }

    #[test]
    fn type_names_parse_nested_types_that_ddl_refuses() {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        let window = DataType::Struct(
            vec![
                Field::new("start", ts.clone(), true),
                Field::new("end", ts.clone(), true),
            ]
            .into(),
        );
        let map = |k: DataType, v: DataType| {
            DataType::Map(
                Arc::new(Field::new_struct(
                    "entries",
                    vec![Field::new("key", k, false), Field::new("value", v, true)],
                    false,
                )),
                false,
            )
        };
        for (name, t) in [
            ("STRUCT<start: TIMESTAMP, end: TIMESTAMP>", window.clone()),
            (
                " array < struct<start:timestamp,end:timestamp> > ",
                DataType::new_list(window, true),
            ),
            (
                "MAP<STRING, ARRAY<BIGINT>>",
                map(DataType::Utf8, DataType::new_list(DataType::Int64, true)),
            ),
            ("STRUCT<>", DataType::Struct(Vec::<Field>::new().into())),
            (
                "STRUCT<`a``b`: INT, ``: VOID>",
                DataType::Struct(
                    vec![
                        Field::new("a`b", DataType::Int32, true),
                        Field::new("", DataType::Null, true),
                    ]
                    .into(),
                ),
            ),
            ("TINYINT UNSIGNED", DataType::UInt8),
            ("smallint unsigned", DataType::UInt16),
            ("INT UNSIGNED", DataType::UInt32),
            ("DECIMAL(38, 10)", DataType::Decimal128(38, 10)),
        ] {
            assert_eq!(parse_spark_type_name(name).unwrap(), t, "{name}");
            // What spark_type_name writes parses back to the same type.
            assert_eq!(
                parse_spark_type_name(&spark_type_name(&t)).unwrap(),
                t,
                "{name}"
            );
        }
        // The DDL entry point keeps refusing nested types (and VOID, UNSIGNED) as before.
        for ddl in [
            "a ARRAY<INT>",
            "a STRUCT<start: TIMESTAMP, end: TIMESTAMP>",
            "a MAP<STRING, INT>",
        ] {
            let err = parse_ddl_schema(ddl).unwrap_err();
            assert_eq!(err.fault(), Fault::NotSupportedYet, "{ddl}");
            assert!(
                err.message()
                    .contains("nested types in schemas are not supported yet"),
                "{ddl}: {err}"
            );
        }
        assert_eq!(
            parse_ddl_schema("a VOID").unwrap_err().fault(),
            Fault::NotSupportedYet
        );
        assert_eq!(
            parse_ddl_schema("a INT UNSIGNED").unwrap_err().class(),
            "INVALID_SCHEMA"
        );
        // Errors name the type name and the bad part.
        for (name, needle) in [
            ("ARRAY<INT", "expected `>`"),
            ("STRUCT<a INT>", "expected `:`"),
            ("MAP<INT>", "expected `,`"),
            (
                "STRUCT<a: NOPE>",
                "struct field `a` has the unknown type `NOPE`",
            ),
            ("DECIMAL(40, 2)", "precision 40"),
            ("INT INT", "unexpected `INT`"),
            ("", "expected a type"),
        ] {
            let err = parse_spark_type_name(name).unwrap_err();
            assert_eq!(err.class(), "INVALID_SCHEMA", "{name}");
            assert!(err.message().contains(needle), "{name}: {err}");
            assert!(
                err.message().contains(&format!("{name:?}")),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn spark_type_names_rebuild_arrow_types() {
        use arrow::datatypes::Fields;
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        assert_eq!(parse_spark_type_name("BIGINT").unwrap(), DataType::Int64);
        assert_eq!(
            parse_spark_type_name("BIGINT UNSIGNED").unwrap(),
            DataType::UInt64
        );
        assert_eq!(parse_spark_type_name("string").unwrap(), DataType::Utf8);
        assert_eq!(
            parse_spark_type_name("DECIMAL(10,2)").unwrap(),
            DataType::Decimal128(10, 2)
        );
        assert_eq!(
            parse_spark_type_name("STRUCT<start: TIMESTAMP, `the end`: TIMESTAMP>").unwrap(),
            DataType::Struct(Fields::from(vec![
                Field::new("start", ts.clone(), true),
                Field::new("the end", ts, true),
            ]))
        );
        assert_eq!(
            parse_spark_type_name("ARRAY<INT>").unwrap(),
            DataType::new_list(DataType::Int32, true)
        );
        // Every name the engine writes for the supported types parses back to a type that
        // spark_type_name names the same way.
        for t in [
            DataType::Int8,
            DataType::UInt32,
            DataType::Float64,
            DataType::Boolean,
            DataType::Date32,
            DataType::Binary,
            DataType::Decimal128(7, 3),
        ] {
            let name = crate::schema::spark_type_name(&t);
            assert_eq!(
                crate::schema::spark_type_name(&parse_spark_type_name(&name).unwrap()),
                name
            );
        }
        for bad in ["", "STRUCT<a INT>", "INT INT", "NOPE", "ARRAY<INT"] {
            assert!(parse_spark_type_name(bad).is_err(), "{bad}");
        }
    }
}
