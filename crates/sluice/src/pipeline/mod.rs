//! Pipelines in SQL: a file that declares sources, streaming queries and sinks, run by
//! `sluice run PIPELINE.sql`.
//!
//! ```sql
//! CREATE TABLE events (
//!   ts TIMESTAMP, user STRING, amount DOUBLE,
//!   WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE
//! ) WITH (connector = 'filesystem', path = '${input}', format = 'json', 'maxFilesPerTrigger' = '1');
//!
//! CREATE SINK big WITH (connector = 'console', 'outputMode' = 'append') AS
//! SELECT ts, user, amount FROM events WHERE amount > 10;
//! ```
//!
//! ## The syntax, and why
//!
//! The DDL is Flink's / RisingWave's / Arroyo's, because it is what most people who write
//! streaming SQL already know: a source is `CREATE TABLE name (columns, WATERMARK FOR col AS
//! col - INTERVAL '..' UNIT) WITH (connector = '..', ..)`, a query is `CREATE SINK name WITH
//! (..) AS SELECT ..` (RisingWave, Arroyo; the options may also follow the query, as in
//! RisingWave, and `FROM table` may replace `AS SELECT`), or Flink's `INSERT INTO table SELECT
//! ..` into a `CREATE TABLE` whose connector is a sink. Both query forms are supported;
//! `CREATE SINK` is the one the examples use, since one statement says everything about a
//! query. `CREATE VIEW name AS SELECT ..` names an intermediate stream, and `SET 'key' =
//! 'value'` sets a session conf (`spark.sql.shuffle.partitions`, ...). Spark's own declarative
//! pipeline SQL is new in Spark 4.1 and its streaming-table DDL does not declare sources, so
//! it could not describe a whole pipeline.
//!
//! Everything inside the queries is Spark SQL, run by [`Session::sql`] with Spark's semantics:
//! each source table is registered as a temp view (its watermark applied with
//! [`StreamFrame::with_watermark`]) the first time a query reads it. Option names and values
//! are Spark's (`maxFilesPerTrigger`, `kafka.bootstrap.servers`, `subscribe`,
//! `startingOffsets`, ...), passed to the source or sink as they are. The pipeline itself
//! reads `connector`, `format`, `path`, and for sinks `outputMode` (`append`, `update`,
//! `complete`), `trigger` (`available-now`, `once`, `processing-time 10 seconds`, `default`)
//! and `checkpoint` (or `checkpointLocation`).
//!
//! | connector | reads | writes |
//! |---|---|---|
//! | `filesystem` | `format` = json, csv, parquet, text; `path`; columns required | `format` = parquet, json, csv; `path` |
//! | `kafka` | Spark's fixed columns (`key`, `value`, `topic`, ...); parse `value` in the query | a `value` (and `key`, `topic`) column |
//! | `rate`, `rate-micro-batch`, `nexmark` | generated rows (`nexmark`: `table` = person, auction, bid) | |
//! | `delta` | | a Delta Lake table at `path` (`partitionBy`, `mergeSchema`; append or complete) |
//! | `console` (Flink: `print`), `memory`, `noop` (Flink: `blackhole`) | | yes |
//!
//! A source with fixed columns (Kafka, rate, Nexmark) may leave out its column list, or list
//! some of its columns (with their types) to read only those.
//!
//! ## Variables
//!
//! `${name}` in an option value (or a `SET` value) is replaced by the variable `name`: the
//! value given to [`Pipeline::set_variable`] (`sluice run FILE.sql --set name=value`), else the
//! environment variable `name`, else the default in `${name:-default}`; with none of them it is
//! an error at the option. Paths are used as they are: a relative path is relative to the
//! working directory, as in Spark. Queries are not substituted.
//!
//! A variable whose name looks secret (`KAFKA_PASSWORD`, `S3_SECRET`, `API_TOKEN`,
//! `AWS_SECRET_ACCESS_KEY`: [`crate::redact::is_secret_variable`]) is a secret wherever it is
//! substituted, and so is every option whose key names one (`kafka.sasl.jaas.config`, ...): its
//! value is never printed, in errors, progress, `query.json`, `sluice checkpoint describe` or
//! logs (see [`crate::redact`]).
//!
//! ## Errors
//!
//! Every error in a pipeline file names `file:line:column` and shows the line: syntax errors
//! (sqlparser's, located in the file), unknown connectors, missing options, tables a query
//! reads that nothing declares, and errors of the engine while planning or starting a query
//! (located at its statement). Errors of a running query name its sink's statement.

mod parser;
mod planner;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use crate::error::class;
use crate::error::{Result, SluiceError};
use crate::query::StreamingQuery;
use crate::session::{Session, SessionBuilder};
#[allow(unused_imports)] // doc links
use crate::StreamFrame;

use parser::SourceText;

/// A line and column in the pipeline file, both from 1 (columns count characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    /// The line, from 1.
    pub line: u64,
    /// The column, from 1, in characters.
    pub column: u64,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A table, view or sink name. Unquoted names are lowercased (they are case-insensitive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    /// The name: lowercased if unquoted, as written if quoted; dotted parts joined with `.`.
    pub value: String,
    /// Where the name starts.
    pub position: Position,
}

/// `key = 'value'` in `WITH (...)`. The value is as written (variables not yet substituted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionDef {
    /// The option name as written, quotes removed (matched case-insensitively).
    pub key: String,
    /// The value as written, quotes removed.
    pub value: String,
    /// Where the key starts.
    pub key_position: Position,
    /// Where the value starts.
    pub position: Position,
}

/// A column of a `CREATE TABLE`: its Spark DDL text (`amount DECIMAL(10, 2) NOT NULL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDef {
    /// The column name as written.
    pub name: String,
    /// The column's Spark DDL text, name and type included.
    pub ddl: String,
    /// Where the column starts.
    pub position: Position,
}

/// `WATERMARK FOR col AS col - INTERVAL '10' MINUTE`: Spark's `withWatermark("col", "10 minute")`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermark {
    /// The event-time column, as written after `AS`.
    pub column: String,
    /// A Spark interval string, e.g. `10 minute`.
    pub delay: String,
    /// Where `WATERMARK` starts.
    pub position: Position,
}

/// `CREATE TABLE name (columns) WITH (options)`: a source, or (Flink's way) a sink that
/// `INSERT INTO` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    /// The table's name.
    pub name: Name,
    /// The declared columns, in order (may be empty for sources with fixed columns).
    pub columns: Vec<ColumnDef>,
    /// The `WATERMARK FOR` clause, if any.
    pub watermark: Option<Watermark>,
    /// The `WITH (...)` options, in order.
    pub options: Vec<OptionDef>,
}

/// A query: its Spark SQL text and the tables it reads (CTEs left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryDef {
    /// The query's text as in the file (`SELECT * FROM t` for `CREATE SINK .. FROM t`).
    pub sql: String,
    /// Where the query starts.
    pub position: Position,
    /// The tables and views the query reads, in the order they appear.
    pub relations: Vec<Name>,
}

/// `CREATE SINK name WITH (options) AS query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkDef {
    /// The sink's name, also the query's name.
    pub name: Name,
    /// The `WITH (...)` options, in order.
    pub options: Vec<OptionDef>,
    /// The query whose rows the sink writes.
    pub query: QueryDef,
}

/// `INSERT INTO table query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertDef {
    /// The `CREATE TABLE` written to (its connector must be a sink); also the query's name.
    pub target: Name,
    /// The query whose rows are inserted.
    pub query: QueryDef,
}

/// `CREATE VIEW name AS query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewDef {
    /// The view's name.
    pub name: Name,
    /// The query the view names.
    pub query: QueryDef,
}

/// `SET 'key' = 'value'`: a session conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetDef {
    /// The conf key, e.g. `spark.sql.shuffle.partitions`.
    pub key: String,
    /// The value as written (variables not yet substituted).
    pub value: String,
    /// Where the key starts.
    pub position: Position,
}

/// What a statement is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatementKind {
    /// `SET 'key' = 'value'`.
    Set(SetDef),
    /// `CREATE TABLE` (or `CREATE SOURCE`): a source, or a sink for `INSERT INTO`.
    CreateTable(TableDef),
    /// `CREATE VIEW name AS query`.
    CreateView(ViewDef),
    /// `CREATE SINK name WITH (..) AS query`.
    CreateSink(SinkDef),
    /// `INSERT INTO table query`.
    Insert(InsertDef),
}

/// One statement and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// Where the statement's first keyword starts.
    pub position: Position,
    /// The statement itself.
    pub kind: StatementKind,
}

/// What a `connector` option names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connector {
    /// `filesystem`: Spark's file source and file sink (`format`, `path`).
    Filesystem,
    /// `kafka`: Spark's Kafka source and sink.
    Kafka,
    /// `rate`: Spark's rate source (`rowsPerSecond`).
    Rate,
    /// `rate-micro-batch`: Spark's rate-per-micro-batch source (`rowsPerBatch`).
    RateMicroBatch,
    /// `nexmark`: the Nexmark benchmark's generator (`table` = person, auction, bid).
    Nexmark,
    /// `socket`: lines from a TCP server (`host`, `port`, `includeTimestamp`); not
    /// fault-tolerant, as in Spark.
    Socket,
    /// `console` (Flink: `print`): Spark's console sink.
    Console,
    /// `memory`: Spark's memory sink, a table named after the query.
    Memory,
    /// `noop` (Flink: `blackhole`): Spark's noop sink, which discards rows.
    Noop,
    /// `delta`: a Delta Lake table (`path`), the `delta` sink format a session registers
    /// (`sluice_delta::register`; the `sluice` binary does).
    Delta,
}

const CONNECTORS: &[(&str, Connector)] = &[
    ("filesystem", Connector::Filesystem),
    ("kafka", Connector::Kafka),
    ("rate", Connector::Rate),
    ("rate-micro-batch", Connector::RateMicroBatch),
    ("nexmark", Connector::Nexmark),
    ("socket", Connector::Socket),
    ("console", Connector::Console),
    ("print", Connector::Console),
    ("memory", Connector::Memory),
    ("noop", Connector::Noop),
    ("blackhole", Connector::Noop),
    ("delta", Connector::Delta),
];

impl Connector {
    /// The connector a `connector` value names (case-insensitive, Flink's aliases included).
    pub fn parse(name: &str) -> Option<Self> {
        CONNECTORS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.trim()))
            .map(|(_, c)| *c)
    }
    /// The connector's `connector` value (the first of its names).
    pub fn name(self) -> &'static str {
        CONNECTORS
            .iter()
            .find(|(_, c)| *c == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }
    /// Whether the connector can be a source.
    pub fn can_read(self) -> bool {
        matches!(
            self,
            Connector::Filesystem
                | Connector::Kafka
                | Connector::Rate
                | Connector::RateMicroBatch
                | Connector::Nexmark
                | Connector::Socket
        )
    }
    /// Whether the connector can be a sink.
    pub fn can_write(self) -> bool {
        matches!(
            self,
            Connector::Filesystem
                | Connector::Kafka
                | Connector::Console
                | Connector::Memory
                | Connector::Noop
                | Connector::Delta
        )
    }
}

const SOURCE_CONNECTORS: &str = "filesystem, kafka, rate, rate-micro-batch or nexmark";
const SINK_CONNECTORS: &str = "filesystem, kafka, delta, console, memory or noop";

/// A parsed pipeline file. [`Pipeline::start`] runs it on a session.
#[derive(Debug, Clone)]
pub struct Pipeline {
    src: SourceText,
    statements: Vec<Statement>,
    variables: HashMap<String, String>,
}

impl Pipeline {
    /// Parses and checks a pipeline: syntax, names (each table, view and sink declared once; a
    /// query reads tables declared above it), connectors and their required options. Errors
    /// are `file_name:line:column: ...`.
    pub fn parse(text: &str, file_name: &str) -> Result<Pipeline> {
        let src = SourceText::new(text, file_name);
        let statements = parser::parse_statements(&src)?;
        let p = Pipeline {
            src,
            statements,
            variables: HashMap::new(),
        };
        p.check()?;
        Ok(p)
    }

    /// Reads and parses a pipeline file; errors name the path as given.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Pipeline> {
        let path = path.as_ref();
        let text = crate::storage::read_to_string(path).map_err(|e| {
            SluiceError::io(
                crate::Fault::Query,
                format!("cannot read the pipeline file {}", path.display()),
                e,
            )
        })?;
        Pipeline::parse(&text, &path.display().to_string())
    }

    /// Sets the variable `name` for `${name}` in option values (wins over the environment).
    pub fn set_variable(&mut self, name: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.variables.insert(name.into(), value.into());
        self
    }

    /// The parsed statements, in file order.
    pub fn statements(&self) -> &[Statement] {
        &self.statements
    }

    /// The file name errors show, as given to [`Pipeline::parse`].
    pub fn file_name(&self) -> &str {
        &self.src.file_name
    }

    /// The names of the pipeline's queries (its sinks; for `INSERT INTO`, the table), in order.
    pub fn query_names(&self) -> Vec<&str> {
        self.statements
            .iter()
            .filter_map(|s| match &s.kind {
                StatementKind::CreateSink(k) => Some(k.name.value.as_str()),
                StatementKind::Insert(i) => Some(i.target.value.as_str()),
                _ => None,
            })
            .collect()
    }

    /// A session builder with the pipeline's `SET` confs (so `SET
    /// 'spark.sql.shuffle.partitions' = '4'` takes effect).
    pub fn session_builder(&self) -> Result<SessionBuilder> {
        let mut b = Session::builder();
        for s in &self.statements {
            if let StatementKind::Set(set) = &s.kind {
                b = b.config(set.key.clone(), self.substitute(&set.value, set.position)?);
            }
        }
        Ok(b)
    }

    /// Registers the sources, plans every query and starts them, in file order. Nothing runs
    /// unless every query plans; if a query fails to start, those already started are stopped.
    pub fn start(&self, session: &Session) -> Result<Vec<StreamingQuery>> {
        planner::start(self, session)
    }

    /// Waits until every query has ended (available-now and once triggers end by themselves),
    /// or until `should_stop()` says so, then stops them all after their current batch. A
    /// query that fails stops the others; its error names its statement.
    pub fn await_termination(
        &self,
        queries: &[StreamingQuery],
        should_stop: impl Fn() -> bool,
    ) -> Result<()> {
        loop {
            if should_stop() {
                for q in queries {
                    q.stop();
                }
                return Ok(());
            }
            let mut active = false;
            for q in queries {
                if q.is_active() {
                    active = true;
                } else if let Some(e) = q.exception() {
                    for other in queries {
                        other.stop();
                    }
                    return Err(self.query_error(q, e));
                }
            }
            if !active {
                for q in queries {
                    q.await_termination().map_err(|e| self.query_error(q, e))?;
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A running query's error, located at its statement.
    fn query_error(&self, q: &StreamingQuery, e: SluiceError) -> SluiceError {
        let name = q.name().unwrap_or_default();
        let at = self
            .statements
            .iter()
            .find(|s| match &s.kind {
                StatementKind::CreateSink(k) => k.name.value == name,
                StatementKind::Insert(i) => i.target.value == name,
                _ => false,
            })
            .map(|s| s.position)
            .unwrap_or_default();
        self.src
            .wrap(at, format!("the query of sink {name} failed"), e)
    }

    pub(crate) fn error(
        &self,
        class: &'static str,
        at: Position,
        msg: impl std::fmt::Display,
    ) -> SluiceError {
        self.src.error(class, at, msg)
    }

    pub(crate) fn wrap(
        &self,
        at: Position,
        context: impl std::fmt::Display,
        e: SluiceError,
    ) -> SluiceError {
        self.src.wrap(at, context, e)
    }

    /// `${name}`, `${name:-default}` in `value`, from the variables, then the environment.
    pub(crate) fn substitute(&self, value: &str, at: Position) -> Result<String> {
        let mut out = String::new();
        let mut rest = value;
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            let Some(close) = after.find('}') else {
                return Err(self.error(
                    class::PIPELINE_UNDEFINED_VARIABLE,
                    at,
                    format!("`${{` without a closing `}}` in '{value}': write ${{name}}"),
                ));
            };
            let inner = &after[..close];
            let (name, default) = match inner.find(":-") {
                Some(d) => (&inner[..d], Some(&inner[d + 2..])),
                None => (inner, None),
            };
            let name = name.trim();
            let v = self
                .variables
                .get(name)
                .cloned()
                .or_else(|| std::env::var(name).ok())
                .or_else(|| default.map(str::to_string));
            match v {
                Some(v) => {
                    // A secret by its name: never printed (see `redact`).
                    if crate::redact::is_secret_variable(name) {
                        crate::redact::remember(&v);
                    }
                    out.push_str(&v)
                }
                None => {
                    return Err(self.error(
                        class::PIPELINE_UNDEFINED_VARIABLE,
                        at,
                        format!(
                            "the variable {name} is not set: pass --set {name}=VALUE to sluice \
                             run, set the environment variable {name}, or give a default: \
                             ${{{name}:-VALUE}}"
                        ),
                    ))
                }
            }
            rest = &after[close + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    pub(crate) fn table(&self, name: &str) -> Option<(usize, &TableDef)> {
        self.statements
            .iter()
            .enumerate()
            .find_map(|(i, s)| match &s.kind {
                StatementKind::CreateTable(t) if t.name.value == name => Some((i, t)),
                _ => None,
            })
    }

    /// Checks that need no session: names, connectors, required options, who reads what.
    fn check(&self) -> Result<()> {
        let mut declared: HashMap<&str, (usize, Position, &'static str)> = HashMap::new();
        let mut written: HashSet<&str> = HashSet::new();
        for (i, s) in self.statements.iter().enumerate() {
            let (name, what) = match &s.kind {
                StatementKind::CreateTable(t) => (&t.name, "table"),
                StatementKind::CreateView(v) => (&v.name, "view"),
                StatementKind::CreateSink(k) => (&k.name, "sink"),
                _ => continue,
            };
            if let Some((_, prev, prev_what)) = declared.get(name.value.as_str()) {
                return Err(self.error(
                    class::PIPELINE_DUPLICATE_NAME,
                    name.position,
                    format!(
                        "{} is already declared as a {prev_what} at line {}: tables, views and \
                         sinks share one namespace; rename one",
                        name.value, prev.line
                    ),
                ));
            }
            declared.insert(&name.value, (i, name.position, what));
        }
        let mut queries = 0;
        for (i, s) in self.statements.iter().enumerate() {
            match &s.kind {
                StatementKind::Set(_) => {}
                StatementKind::CreateTable(t) => self.check_table(t)?,
                StatementKind::CreateView(v) => self.check_reads(i, &v.query, &declared)?,
                StatementKind::CreateSink(k) => {
                    queries += 1;
                    self.check_reads(i, &k.query, &declared)?;
                    let c = self.connector(&k.options, &k.name, "sink")?;
                    if !c.can_write() {
                        let at = option(&k.options, "connector").map(|o| o.position);
                        return Err(self.error(
                            class::PIPELINE_UNKNOWN_CONNECTOR,
                            at.unwrap_or(k.name.position),
                            format!(
                                "{} is a source connector; a sink writes to {SINK_CONNECTORS}",
                                c.name()
                            ),
                        ));
                    }
                    self.check_sink_options(c, &k.options, &k.name)?;
                }
                StatementKind::Insert(ins) => {
                    queries += 1;
                    self.check_reads(i, &ins.query, &declared)?;
                    let t = &ins.target;
                    let Some((_, table)) = self.table(&t.value) else {
                        let hint = match declared.get(t.value.as_str()) {
                            Some((_, _, what)) => format!("{} is a {what}, not a table", t.value),
                            None => format!("no CREATE TABLE declares {}", t.value),
                        };
                        return Err(self.error(
                            class::PIPELINE_TABLE_NOT_FOUND,
                            t.position,
                            format!(
                                "INSERT INTO {}: {hint}; declare it with CREATE TABLE {} WITH \
                                 (connector = ...), or write the query as CREATE SINK {} WITH \
                                 (...) AS SELECT ...",
                                t.value, t.value, t.value
                            ),
                        ));
                    };
                    if !written.insert(&t.value) {
                        return Err(self.error(
                            class::PIPELINE_DUPLICATE_NAME,
                            t.position,
                            format!(
                                "a second INSERT INTO {}: each sink table takes one query; \
                                 combine the queries with UNION ALL, or declare another table",
                                t.value
                            ),
                        ));
                    }
                    let c = self.connector(&table.options, &table.name, "table")?;
                    if !c.can_write() {
                        return Err(self.error(
                            class::PIPELINE_UNKNOWN_CONNECTOR,
                            t.position,
                            format!(
                                "INSERT INTO {}: its connector {} only reads; a sink table \
                                 writes to {SINK_CONNECTORS}",
                                t.value,
                                c.name()
                            ),
                        ));
                    }
                    self.check_sink_options(c, &table.options, &table.name)?;
                }
            }
        }
        if queries == 0 {
            let at = self
                .statements
                .last()
                .map(|s| s.position)
                .unwrap_or(Position { line: 1, column: 1 });
            return Err(self.error(
                class::PIPELINE_NO_QUERY,
                at,
                "the pipeline runs no query: add CREATE SINK name WITH (connector = 'console') \
                 AS SELECT ... (or INSERT INTO a sink table)",
            ));
        }
        Ok(())
    }

    fn connector(&self, options: &[OptionDef], name: &Name, what: &str) -> Result<Connector> {
        let Some(o) = option(options, "connector") else {
            return Err(self.error(
                class::PIPELINE_MISSING_OPTION,
                name.position,
                format!(
                    "the {what} {} has no connector: add connector = '...' to its WITH (...) \
                     (sources: {SOURCE_CONNECTORS}; sinks: {SINK_CONNECTORS})",
                    name.value
                ),
            ));
        };
        Connector::parse(&o.value).ok_or_else(|| {
            let v = o.value.to_ascii_lowercase();
            let file_format = ["parquet", "json", "csv", "text", "orc", "avro", "delta"];
            let guess = if file_format.contains(&v.as_str()) {
                format!("{v} is a format: write connector = 'filesystem', format = '{v}'; ")
            } else {
                CONNECTORS
                    .iter()
                    .map(|(n, _)| (edit_distance(n, &o.value.to_ascii_lowercase()), *n))
                    .min()
                    .filter(|(d, _)| *d <= 2)
                    .map(|(_, n)| format!("did you mean '{n}'? "))
                    .unwrap_or_default()
            };
            self.error(
                class::PIPELINE_UNKNOWN_CONNECTOR,
                o.position,
                format!(
                    "unknown connector '{}': {guess}sources are {SOURCE_CONNECTORS}; sinks are \
                     {SINK_CONNECTORS}",
                    o.value
                ),
            )
        })
    }

    fn check_table(&self, t: &TableDef) -> Result<()> {
        let c = self.connector(&t.options, &t.name, "table")?;
        if c == Connector::Filesystem {
            self.required(&t.options, "path", t, "path = '/data/in'")?;
            self.required(&t.options, "format", t, "format = 'json'")?;
        }
        if c == Connector::Kafka {
            self.required(
                &t.options,
                "kafka.bootstrap.servers",
                t,
                "'kafka.bootstrap.servers' = 'localhost:9092'",
            )?;
        }
        Ok(())
    }

    fn required(
        &self,
        options: &[OptionDef],
        key: &str,
        t: &TableDef,
        example: &str,
    ) -> Result<()> {
        if option(options, key).is_none() {
            return Err(self.error(
                class::PIPELINE_MISSING_OPTION,
                t.name.position,
                format!(
                    "the table {} needs the option {key}: add {example} to its WITH (...)",
                    t.name.value
                ),
            ));
        }
        Ok(())
    }

    fn check_sink_options(&self, c: Connector, options: &[OptionDef], name: &Name) -> Result<()> {
        let need = |key: &str, example: &str| -> Result<()> {
            if option(options, key).is_none() {
                return Err(self.error(
                    class::PIPELINE_MISSING_OPTION,
                    name.position,
                    format!(
                        "the sink {} needs the option {key}: add {example} to its WITH (...)",
                        name.value
                    ),
                ));
            }
            Ok(())
        };
        match c {
            Connector::Filesystem => {
                need("path", "path = '/data/out'")?;
                need("format", "format = 'parquet'")?;
            }
            Connector::Kafka => {
                need(
                    "kafka.bootstrap.servers",
                    "'kafka.bootstrap.servers' = 'localhost:9092'",
                )?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A query reads tables and views declared above it, or sink tables never.
    fn check_reads(
        &self,
        at: usize,
        q: &QueryDef,
        declared: &HashMap<&str, (usize, Position, &'static str)>,
    ) -> Result<()> {
        for r in &q.relations {
            let Some((i, p, what)) = declared.get(r.value.as_str()) else {
                continue; // maybe a table of the session; checked at start
            };
            if *i >= at {
                return Err(self.error(
                    class::PIPELINE_TABLE_NOT_FOUND,
                    r.position,
                    format!(
                        "{} is declared below this query (line {}): move its CREATE {} above \
                         the query",
                        r.value,
                        p.line,
                        what.to_ascii_uppercase()
                    ),
                ));
            }
            match *what {
                "sink" => {
                    return Err(self.error(
                        class::PIPELINE_TABLE_NOT_FOUND,
                        r.position,
                        format!(
                            "{} is a sink, and a sink cannot be read: read the tables it reads, \
                             or name its query with CREATE VIEW",
                            r.value
                        ),
                    ))
                }
                "table" => {
                    let (_, t) = self.table(&r.value).expect("declared table");
                    let c = self.connector(&t.options, &t.name, "table")?;
                    if !c.can_read() {
                        return Err(self.error(
                            class::PIPELINE_UNKNOWN_CONNECTOR,
                            r.position,
                            format!(
                                "{} cannot be read: its connector {} only writes; sources are \
                                 {SOURCE_CONNECTORS}",
                                r.value,
                                c.name()
                            ),
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The option `key` (case-insensitive, as Spark's options are).
pub(crate) fn option<'a>(options: &'a [OptionDef], key: &str) -> Option<&'a OptionDef> {
    options.iter().find(|o| o.key.eq_ignore_ascii_case(key))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests;
