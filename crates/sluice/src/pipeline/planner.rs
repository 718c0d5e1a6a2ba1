//! From statements to running queries: sources become temp views (with their watermark) the
//! first time a query reads them, queries are Spark SQL through `Session::sql`, sinks are
//! `write_stream()` with the statement's options.

use std::collections::HashSet;
use std::time::Duration;

use datafusion::common::Column;
use datafusion::logical_expr::{cast, Expr};

use super::{
    edit_distance, option, Connector, Name, OptionDef, Pipeline, Position, QueryDef, StatementKind,
    TableDef,
};
use crate::conf::{CHECKPOINT_LOCATION, SHUFFLE_PARTITIONS};
use crate::error::class;
use crate::error::Result;
use crate::frame::StreamFrame;
use crate::query::{DataStreamWriter, StreamingQuery};
use crate::session::Session;
use crate::types::{OutputMode, Trigger};

struct Planned {
    name: String,
    position: Position,
    writer: DataStreamWriter,
}

pub(super) fn start(p: &Pipeline, session: &Session) -> Result<Vec<StreamingQuery>> {
    let planned = plan(p, session)?;
    let mut started: Vec<StreamingQuery> = Vec::new();
    for w in planned {
        match w.writer.start() {
            Ok(q) => started.push(q),
            Err(e) => {
                for q in &started {
                    q.stop();
                }
                return Err(p.wrap(w.position, format!("cannot start the sink {}", w.name), e));
            }
        }
    }
    Ok(started)
}

fn plan(p: &Pipeline, session: &Session) -> Result<Vec<Planned>> {
    // Names first: an unknown table is reported before any source is opened.
    for (i, s) in p.statements().iter().enumerate() {
        let q = match &s.kind {
            StatementKind::CreateView(v) => &v.query,
            StatementKind::CreateSink(k) => &k.query,
            StatementKind::Insert(ins) => &ins.query,
            _ => continue,
        };
        for r in &q.relations {
            let declared = p.statements()[..i].iter().any(|s| match &s.kind {
                StatementKind::CreateTable(t) => t.name.value == r.value,
                StatementKind::CreateView(v) => v.name.value == r.value,
                _ => false,
            });
            // Not the pipeline's: a table the caller registered in the session is fine.
            if !declared
                && !session
                    .context()
                    .table_exist(r.value.as_str())
                    .unwrap_or(false)
            {
                return Err(unknown_table(p, i, r));
            }
        }
    }
    let mut registered: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for s in p.statements() {
        match &s.kind {
            StatementKind::Set(set) => {
                let v = p.substitute(&set.value, set.position)?;
                if set.key.eq_ignore_ascii_case(SHUFFLE_PARTITIONS)
                    && v.trim().parse::<usize>().ok() != Some(session.shuffle_partitions())
                {
                    return Err(p.error(
                        class::PIPELINE_INVALID_OPTION,
                        set.position,
                        format!(
                            "SET spark.sql.shuffle.partitions = {v}: the session has {} \
                             partitions, fixed when it was built; build it with \
                             Pipeline::session_builder() (sluice run does)",
                            session.shuffle_partitions()
                        ),
                    ));
                }
                session.set_conf(set.key.clone(), v);
            }
            StatementKind::CreateTable(_) => {}
            StatementKind::CreateView(v) => {
                let frame = query_frame(p, session, &v.query, &mut registered)?;
                frame
                    .create_or_replace_temp_view(&v.name.value)
                    .map_err(|e| {
                        p.wrap(v.name.position, format!("the view {}", v.name.value), e)
                    })?;
                registered.insert(v.name.value.clone());
            }
            StatementKind::CreateSink(k) => {
                let frame = query_frame(p, session, &k.query, &mut registered)?;
                out.push(Planned {
                    name: k.name.value.clone(),
                    position: s.position,
                    writer: sink_writer(p, session, frame, &k.name, &k.options)?,
                });
            }
            StatementKind::Insert(ins) => {
                let frame = query_frame(p, session, &ins.query, &mut registered)?;
                let (_, t) = p.table(&ins.target.value).expect("checked by parse");
                let frame = conform(p, frame, t, &ins.query)?;
                out.push(Planned {
                    name: t.name.value.clone(),
                    position: s.position,
                    writer: sink_writer(p, session, frame, &t.name, &t.options)?,
                });
            }
        }
    }
    Ok(out)
}

/// Registers the tables `q` reads, then plans it.
fn query_frame(
    p: &Pipeline,
    session: &Session,
    q: &QueryDef,
    registered: &mut HashSet<String>,
) -> Result<StreamFrame> {
    for r in &q.relations {
        if registered.contains(&r.value) {
            continue;
        }
        if let Some((_, t)) = p.table(&r.value) {
            let frame = source_frame(p, session, t)?;
            frame
                .create_or_replace_temp_view(&t.name.value)
                .map_err(|e| p.wrap(t.name.position, format!("the table {}", t.name.value), e))?;
            registered.insert(t.name.value.clone());
        }
    }
    session
        .sql(&q.sql)
        .map_err(|e| p.wrap(q.position, "in the query", e))
}

fn unknown_table(p: &Pipeline, at: usize, r: &Name) -> crate::SluiceError {
    let above: Vec<&str> = p.statements()[..at]
        .iter()
        .filter_map(|s| match &s.kind {
            StatementKind::CreateTable(t) => Some(t.name.value.as_str()),
            StatementKind::CreateView(v) => Some(v.name.value.as_str()),
            _ => None,
        })
        .collect();
    let guess = above
        .iter()
        .map(|n| (edit_distance(n, &r.value), *n))
        .min()
        .filter(|(d, _)| *d <= 2)
        .map(|(_, n)| format!("did you mean {n}? "))
        .unwrap_or_default();
    let known = if above.is_empty() {
        "none is declared above this query".to_string()
    } else {
        format!("declared above: {}", above.join(", "))
    };
    p.error(
        class::PIPELINE_TABLE_NOT_FOUND,
        r.position,
        format!(
            "unknown table {}: {guess}declare it above the query with CREATE TABLE {} (...) WITH \
             (connector = ...) ({known})",
            r.value, r.value
        ),
    )
}

/// The table as a stream, with its watermark.
fn source_frame(p: &Pipeline, session: &Session, t: &TableDef) -> Result<StreamFrame> {
    let name = &t.name.value;
    let connector_opt = option(&t.options, "connector").expect("checked by parse");
    let connector = Connector::parse(&connector_opt.value).expect("checked by parse");
    let mut format = None;
    let mut path = String::new();
    let mut reader = session.read_stream();
    for o in &t.options {
        let v = p.substitute(&o.value, o.position)?;
        match o.key.to_ascii_lowercase().as_str() {
            "connector" => {}
            "format" if connector == Connector::Filesystem => format = Some((v, o.position)),
            "path" if connector == Connector::Filesystem => path = v,
            _ => reader = reader.option(o.key.clone(), v),
        }
    }
    let cannot = |e| p.wrap(t.name.position, format!("cannot read the table {name}"), e);
    let frame = match connector {
        Connector::Filesystem => {
            let (fmt, at) = format.expect("checked by parse");
            let fmt = fmt.to_ascii_lowercase();
            if !["json", "csv", "parquet", "text"].contains(&fmt.as_str()) {
                return Err(p.error(
                    class::PIPELINE_INVALID_OPTION,
                    at,
                    format!("the filesystem source reads json, csv, parquet or text, not '{fmt}'"),
                ));
            }
            reader = reader.format(&fmt);
            if !t.columns.is_empty() {
                let ddl: Vec<&str> = t.columns.iter().map(|c| c.ddl.as_str()).collect();
                reader = reader.schema(&ddl.join(", ")).map_err(cannot)?;
            } else if fmt != "text" {
                return Err(p.error(
                    class::PIPELINE_MISSING_SCHEMA,
                    t.name.position,
                    format!(
                        "the table {name} is read as a stream but declares no columns: a file \
                         stream needs its schema (Spark cannot infer one from an unbounded \
                         input); list them: CREATE TABLE {name} (ts TIMESTAMP, ...) WITH (...)"
                    ),
                ));
            }
            reader.load(&path).map_err(cannot)?
        }
        Connector::Kafka => reader.format("kafka").load_source().map_err(cannot)?,
        Connector::Rate => reader.format("rate").load_source().map_err(cannot)?,
        Connector::RateMicroBatch => reader
            .format("rate-micro-batch")
            .load_source()
            .map_err(cannot)?,
        Connector::Nexmark => reader.format("nexmark").load_source().map_err(cannot)?,
        Connector::Socket => reader.format("socket").load_source().map_err(cannot)?,
        Connector::Console | Connector::Memory | Connector::Noop | Connector::Delta => {
            unreachable!("checked by parse: sink connectors are not read")
        }
    };
    let frame = if connector != Connector::Filesystem && !t.columns.is_empty() {
        declared_columns(p, frame, t, connector)?
    } else {
        frame
    };
    match &t.watermark {
        None => Ok(frame),
        Some(w) => {
            let schema = frame.schema();
            let Some(field) = schema
                .fields()
                .iter()
                .find(|f| f.name().eq_ignore_ascii_case(&w.column))
            else {
                return Err(p.error(
                    class::PIPELINE_INVALID_WATERMARK,
                    w.position,
                    format!(
                        "WATERMARK FOR {}: the table {name} has no such column (its columns: \
                         {}); name one of its TIMESTAMP columns",
                        w.column,
                        crate::schema::schema_to_ddl(&schema)
                    ),
                ));
            };
            frame
                .with_watermark(field.name(), &w.delay)
                .map_err(|e| p.wrap(w.position, "the watermark", e))
        }
    }
}

/// A fixed-schema source (Kafka, rate, Nexmark) with a column list: the listed columns, which
/// must be the source's, with its types.
fn declared_columns(
    p: &Pipeline,
    frame: StreamFrame,
    t: &TableDef,
    connector: Connector,
) -> Result<StreamFrame> {
    let schema = frame.schema();
    let mut names = Vec::new();
    for c in &t.columns {
        let declared = crate::schema::parse_ddl_schema(&c.ddl)
            .map_err(|e| p.wrap(c.position, format!("the column {}", c.name), e))?;
        let declared = declared.field(0);
        let Some(actual) = schema
            .fields()
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(&c.name))
        else {
            return Err(p.error(
                class::PIPELINE_INVALID_COLUMN,
                c.position,
                format!(
                    "the {} source has no column {}: its columns are fixed ({}); list some of \
                     them or none, and derive other columns in the query or a CREATE VIEW",
                    connector.name(),
                    c.name,
                    crate::schema::schema_to_ddl(&schema)
                ),
            ));
        };
        if actual.data_type() != declared.data_type() {
            return Err(p.error(
                class::PIPELINE_INVALID_COLUMN,
                c.position,
                format!(
                    "the column {} of the {} source is {}, not {}: declare it as {}",
                    c.name,
                    connector.name(),
                    crate::schema::spark_type_name(actual.data_type()),
                    crate::schema::spark_type_name(declared.data_type()),
                    crate::schema::spark_type_name(actual.data_type()),
                ),
            ));
        }
        names.push(actual.name().clone());
    }
    frame
        .select(names)
        .map_err(|e| p.wrap(t.name.position, format!("the table {}", t.name.value), e))
}

/// `INSERT INTO t`: the query's columns go to t's declared columns by position (Flink's and
/// Spark's rule), cast to their types.
fn conform(p: &Pipeline, frame: StreamFrame, t: &TableDef, q: &QueryDef) -> Result<StreamFrame> {
    if t.columns.is_empty() {
        return Ok(frame);
    }
    let plan = frame.logical_plan().clone();
    let fields: Vec<_> = plan.schema().iter().collect();
    if fields.len() != t.columns.len() {
        let got: Vec<&str> = fields.iter().map(|(_, f)| f.name().as_str()).collect();
        let want: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        return Err(p.error(
            class::PIPELINE_INVALID_COLUMN,
            q.position,
            format!(
                "INSERT INTO {}: the query gives {} columns ({}) but the table declares {} ({}); \
                 the query's columns go to the table's by position",
                t.name.value,
                got.len(),
                got.join(", "),
                want.len(),
                want.join(", ")
            ),
        ));
    }
    let mut exprs = Vec::new();
    for ((qualifier, field), c) in fields.into_iter().zip(&t.columns) {
        let target = crate::schema::parse_ddl_schema(&c.ddl)
            .map_err(|e| p.wrap(c.position, format!("the column {}", c.name), e))?;
        let target = target.field(0);
        let mut e = Expr::Column(Column::new(qualifier.cloned(), field.name()));
        if field.data_type() != target.data_type() {
            e = cast(e, target.data_type().clone());
        }
        exprs.push(e.alias(target.name()));
    }
    frame
        .select_exprs(exprs)
        .map_err(|e| p.wrap(q.position, format!("INSERT INTO {}", t.name.value), e))
}

/// `write_stream()` with the sink's options.
fn sink_writer(
    p: &Pipeline,
    session: &Session,
    frame: StreamFrame,
    name: &Name,
    options: &[OptionDef],
) -> Result<DataStreamWriter> {
    let connector_opt = option(options, "connector").expect("checked by parse");
    let connector = Connector::parse(&connector_opt.value).expect("checked by parse");
    let mut w = frame.write_stream().query_name(name.value.clone());
    w = match connector {
        Connector::Console => w.format("console"),
        Connector::Memory => w.format("memory"),
        Connector::Noop => w.format("noop"),
        Connector::Kafka => w.format("kafka"),
        Connector::Delta => w.format("delta"),
        _ => w,
    };
    let mut checkpoint = false;
    for o in options {
        let v = p.substitute(&o.value, o.position)?;
        match o.key.to_ascii_lowercase().as_str() {
            "connector" => {}
            "format" if connector == Connector::Filesystem => {
                let f = v.to_ascii_lowercase();
                if !["parquet", "json", "csv"].contains(&f.as_str()) {
                    return Err(p.error(
                        class::PIPELINE_INVALID_OPTION,
                        o.position,
                        format!("the filesystem sink writes parquet, json or csv, not '{v}'"),
                    ));
                }
                w = w.format(f);
            }
            "outputmode" => {
                let mode: OutputMode =
                    v.parse().map_err(|e| p.wrap(o.position, "outputMode", e))?;
                w = w.output_mode(mode);
            }
            "trigger" => {
                let trigger = parse_trigger(&v).map_err(|why| {
                    p.error(
                        class::PIPELINE_INVALID_OPTION,
                        o.position,
                        format!(
                            "trigger '{v}': {why}; use 'available-now', 'once', \
                             'processing-time 10 seconds' or 'default'"
                        ),
                    )
                })?;
                w = w.trigger(trigger);
            }
            "checkpoint" | "checkpointlocation" => {
                checkpoint = true;
                w = w.option("checkpointLocation", v);
            }
            _ => w = w.option(o.key.clone(), v),
        }
    }
    if !checkpoint
        && matches!(
            connector,
            Connector::Filesystem | Connector::Kafka | Connector::Delta
        )
        && session.conf(CHECKPOINT_LOCATION).is_none()
    {
        return Err(p.error(
            class::PIPELINE_MISSING_OPTION,
            name.position,
            format!(
                "the sink {} needs checkpoint = '/path/to/checkpoint' (where its progress and \
                 state are kept, so a restart goes on exactly once), or SET \
                 'spark.sql.streaming.checkpointLocation' = '/path' for every sink",
                name.value
            ),
        ));
    }
    Ok(w)
}

/// `available-now`, `once`, `processing-time 10 seconds` (also `processingTime=10 seconds`),
/// `continuous 1 second`, `default`.
pub(super) fn parse_trigger(v: &str) -> std::result::Result<Trigger, String> {
    let s = v.trim().to_ascii_lowercase().replace('_', "-");
    match s.as_str() {
        "available-now" | "availablenow" => return Ok(Trigger::AvailableNow),
        "once" => return Ok(Trigger::Once),
        "default" | "" => return Ok(Trigger::default()),
        _ => {}
    }
    let interval = |rest: &str| {
        let rest = rest.trim_start_matches([' ', '=', ':']).trim();
        crate::time_text::parse_interval_micros(rest)
            .map(|us| Duration::from_micros(us.max(0) as u64))
            .map_err(|e| e.message().to_string())
    };
    if let Some(rest) = s
        .strip_prefix("processing-time")
        .or_else(|| s.strip_prefix("processingtime"))
    {
        return interval(rest).map(Trigger::ProcessingTime);
    }
    if let Some(rest) = s.strip_prefix("continuous") {
        return interval(rest).map(Trigger::Continuous);
    }
    Err("unknown trigger".into())
}
