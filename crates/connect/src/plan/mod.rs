//! Spark Connect plans to Sluice frames.
//!
//! A `Relation` tree becomes a [`StreamFrame`]; expressions become Spark SQL text
//! (`expr`), planned by Sluice's own Spark SQL (one function library for SQL and
//! `pyspark.sql.functions`). Leaves that need the engine's API (reads, local data, watermarks,
//! deduplication, cached batches) are frames; an operator over a frame registers it as a
//! server-owned temp view (`__sluice_view_N`, dropped again once the plan is built: the frame
//! keeps the view's plan) and selects from it. A plan id (the DataFrame an attribute was taken
//! from) resolves to the FROM alias its columns are under; a join or `df.alias(..)` stays a
//! pending FROM clause, so the operator over it can still tell `df1.id` from `df2.id`.
//!
//! | module | concept |
//! |---|---|
//! | `errors` | the engine's planning errors in Spark's words, without the server's view names |
//! | `expr` | expressions to SQL text, with Spark's output names |
//! | `literal` | literals to SQL literals |
//! | `names` | Spark's names of SQL expression strings (`F.expr`, `selectExpr`) |
//! | `ops` | the relations that combine or reshape columns (join, set operations, ..) |
//! | `rows` | `na.fill`, `na.drop`, `sample`, `to(schema)`, `unpivot` |
//! | `read` | the leaves: reads, local data, `spark.range`, parameters of `spark.sql` |
//! | [`types`] | Spark Connect's `DataType` and Arrow's, schema strings |

use std::cell::RefCell;
use std::collections::HashMap;

use sluice::StreamFrame;

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::proto::relation::RelType;
use crate::session::ConnectSession;

pub(crate) mod errors;
pub(crate) mod expr;
pub(crate) mod literal;
pub(crate) mod names;
pub(crate) mod ops;
pub(crate) mod read;
pub(crate) mod rows;
#[cfg(test)]
mod tests;
pub mod types;

use expr::{quote, Scope, Sql};

/// The frame a relation describes, in `session`.
pub fn frame(session: &ConnectSession, relation: &proto::Relation) -> Result<StreamFrame> {
    let planner = Planner::new(session);
    let result = planner.plan(relation).map(|p| p.frame);
    planner.drop_views();
    result.map_err(errors::in_spark_words)
}

/// Registers the relation as the temp view `name` (`createTempView`,
/// `createOrReplaceTempView`); without `replace`, an existing view is an error, as in Spark.
pub fn create_temp_view(
    session: &ConnectSession,
    name: &str,
    relation: &proto::Relation,
    replace: bool,
) -> Result<()> {
    if !replace && session.sluice.context().table_exist(name)? {
        return Err(ConnectError::analysis(
            sluice::error::class::TEMP_TABLE_OR_VIEW_ALREADY_EXISTS,
            format!(
                "Cannot create the temporary view `{name}` because it already exists. Choose a \
                 different name, drop or replace the existing view (createOrReplaceTempView)."
            ),
        ));
    }
    let f = frame(session, relation)?;
    f.create_or_replace_temp_view(name)?;
    Ok(())
}

/// A relation planned: its frame, the plan ids of its subtree, and, for a join or
/// `df.alias(..)`, the FROM clause an operator over it selects from.
#[derive(Clone)]
pub(crate) struct Planned {
    pub(crate) frame: StreamFrame,
    pub(crate) ids: Vec<i64>,
    pub(crate) from: Option<From>,
}

impl Planned {
    pub(crate) fn of(frame: StreamFrame) -> Self {
        Self {
            frame,
            ids: Vec::new(),
            from: None,
        }
    }
}

/// A FROM clause kept open: a join's or an alias's, with the filters over it so far.
#[derive(Clone, Debug)]
pub(crate) struct From {
    /// `a JOIN b ON ..`, `v AS t`.
    pub(crate) text: String,
    /// WHERE conditions of filters over it.
    pub(crate) wheres: Vec<String>,
    /// Plan ids to the aliases in `text`.
    pub(crate) aliases: HashMap<i64, String>,
    /// The aliases in `text`.
    pub(crate) qualifiers: Vec<String>,
}

/// A FROM clause to select from, with the scope its plan ids resolve in and its columns.
pub(crate) struct Source {
    pub(crate) from: String,
    pub(crate) wheres: Vec<String>,
    pub(crate) scope: Scope,
    /// The input's columns as (qualifier, name).
    pub(crate) cols: Vec<(Option<String>, String)>,
}

impl Source {
    /// `FROM .. [WHERE ..]`.
    pub(crate) fn clause(&self) -> String {
        let mut s = format!("FROM {}", self.from);
        if !self.wheres.is_empty() {
            s.push_str(" WHERE ");
            s.push_str(&self.wheres.join(" AND "));
        }
        s
    }
    /// A reference to column `i`.
    pub(crate) fn col_ref(&self, i: usize) -> String {
        let (q, n) = &self.cols[i];
        match q {
            Some(q) => format!("{}.{}", quote(q), quote(n)),
            None => quote(n),
        }
    }
}

/// The struct columns of `frame` (by their position in `cols`) and their field names, for
/// `select("data.*")`.
fn struct_fields(
    frame: &StreamFrame,
    cols: &[(Option<String>, String)],
) -> Vec<(usize, Vec<String>)> {
    frame
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter_map(|(i, f)| match f.data_type() {
            arrow::datatypes::DataType::Struct(fs) if i < cols.len() => {
                Some((i, fs.iter().map(|f| f.name().clone()).collect()))
            }
            _ => None,
        })
        .collect()
}

pub(crate) struct Planner<'a> {
    pub(crate) session: &'a ConnectSession,
    views: RefCell<Vec<String>>,
}

fn input<'r>(r: &'r Option<Box<proto::Relation>>, node: &str) -> Result<&'r proto::Relation> {
    r.as_deref().ok_or_else(|| {
        ConnectError::illegal_argument(format!("the {node} relation was sent without its input"))
    })
}

impl<'a> Planner<'a> {
    pub(crate) fn new(session: &'a ConnectSession) -> Self {
        Self {
            session,
            views: RefCell::new(Vec::new()),
        }
    }

    /// Drops the server's views registered while planning (the frames keep their plans).
    pub(crate) fn drop_views(&self) {
        for v in self.views.borrow_mut().drain(..) {
            let _ = self.session.sluice.context().deregister_table(v.as_str());
        }
    }

    /// Registers `frame` as a fresh view, dropped after planning.
    pub(crate) fn view(&self, frame: &StreamFrame) -> Result<String> {
        let name = self.session.fresh_name("view");
        frame.create_or_replace_temp_view(&name)?;
        self.views.borrow_mut().push(name.clone());
        Ok(name)
    }

    /// Drops the view `name` after planning.
    pub(crate) fn own_view(&self, name: &str) {
        self.views.borrow_mut().push(name.to_string());
    }

    /// Registers batches as a fresh table, dropped after planning, and its frame.
    pub(crate) fn batches(
        &self,
        schema: arrow::datatypes::SchemaRef,
        batches: Vec<arrow::array::RecordBatch>,
    ) -> Result<StreamFrame> {
        let name = self.session.fresh_name("local");
        self.session
            .sluice
            .register_batches(&name, schema, batches)?;
        self.views.borrow_mut().push(name.clone());
        Ok(self.session.sluice.table(&name)?)
    }

    /// Runs SQL in the session.
    pub(crate) fn sql(&self, text: &str) -> Result<StreamFrame> {
        log::debug!("plan SQL: {}", sluice::redact::redact_text(text));
        Ok(self.session.sluice.sql(text)?)
    }

    /// The FROM clause to select from `p`.
    pub(crate) fn source(&self, p: &Planned) -> Result<Source> {
        if let Some(f) = &p.from {
            let cols: Vec<(Option<String>, String)> = p
                .frame
                .logical_plan()
                .schema()
                .iter()
                .map(|(q, field)| {
                    let q = q
                        .map(|q| q.table().to_string())
                        .filter(|q| f.qualifiers.contains(q));
                    (q, field.name().clone())
                })
                .collect();
            return Ok(Source {
                from: f.text.clone(),
                wheres: f.wheres.clone(),
                scope: Scope {
                    aliases: f.aliases.clone(),
                    cols: cols.clone(),
                    structs: struct_fields(&p.frame, &cols),
                },
                cols,
            });
        }
        let name = self.view(&p.frame)?;
        let cols: Vec<(Option<String>, String)> = p
            .frame
            .schema()
            .fields()
            .iter()
            .map(|f| (Some(name.clone()), f.name().clone()))
            .collect();
        Ok(Source {
            from: name.clone(),
            wheres: Vec::new(),
            scope: Scope {
                aliases: p.ids.iter().map(|id| (*id, name.clone())).collect(),
                structs: struct_fields(&p.frame, &cols),
                cols: cols.clone(),
            },
            cols,
        })
    }

    /// `SELECT items FROM source`, a plain frame of the ids.
    pub(crate) fn select(&self, src: &Source, items: &[String], ids: Vec<i64>) -> Result<Planned> {
        if items.is_empty() {
            return Err(ConnectError::analysis(
                sluice::error::class::UNSUPPORTED_FEATURE,
                "the result would have no columns, which Sluice's frames cannot have yet",
            ));
        }
        let f = self.sql(&format!("SELECT {} {}", items.join(", "), src.clause()))?;
        Ok(Planned {
            frame: f,
            ids,
            from: None,
        })
    }

    /// Plans a relation.
    pub(crate) fn plan(&self, rel: &proto::Relation) -> Result<Planned> {
        let mut p = self.plan_node(rel)?;
        if let Some(id) = rel.common.as_ref().and_then(|c| c.plan_id) {
            if !p.ids.contains(&id) {
                p.ids.push(id);
            }
        }
        Ok(p)
    }

    fn child(&self, r: &Option<Box<proto::Relation>>, node: &str) -> Result<Planned> {
        self.plan(input(r, node)?)
    }

    fn plan_node(&self, rel: &proto::Relation) -> Result<Planned> {
        let rt = rel.rel_type.as_ref().ok_or_else(|| {
            ConnectError::illegal_argument("a relation without its type was sent")
        })?;
        match rt {
            RelType::Read(r) => read::read(self, r).map(Planned::of),
            RelType::Sql(s) => read::sql(self, s).map(Planned::of),
            RelType::WithRelations(w) => read::with_relations(self, w),
            RelType::LocalRelation(l) => read::local_relation(self, l).map(Planned::of),
            RelType::Range(r) => read::range(self, r).map(Planned::of),
            RelType::CachedRemoteRelation(c) => {
                let f = self.session.cached_frame(&c.relation_id).ok_or_else(|| {
                    ConnectError::analysis(
                        sluice::error::class::INVALID_HANDLE,
                        format!(
                            "the cached DataFrame {} is gone (its foreachBatch call ended)",
                            c.relation_id
                        ),
                    )
                })?;
                Ok(Planned::of(f))
            }
            RelType::Project(p) => {
                let items = &p.expressions;
                match p.input.as_deref() {
                    Some(child) => {
                        // `orderBy(..).select(..)`: one query, so the order holds.
                        let (c, order) = match &child.rel_type {
                            Some(RelType::Sort(s)) => {
                                (self.child(&s.input, "Sort")?, Some(s.order.as_slice()))
                            }
                            _ => (self.plan(child)?, None),
                        };
                        let src = self.source(&c)?;
                        let items = items
                            .iter()
                            .map(|e| Ok(expr::sql(&src.scope, e)?.select_item()))
                            .collect::<Result<Vec<_>>>()?;
                        match order {
                            None => self.select(&src, &items, c.ids),
                            Some(order) => {
                                let keys = self.sort_keys(&src, order)?;
                                let f = self.sql(&format!(
                                    "SELECT {} {} ORDER BY {}",
                                    items.join(", "),
                                    src.clause(),
                                    keys.join(", ")
                                ))?;
                                Ok(Planned {
                                    frame: f,
                                    ids: c.ids,
                                    from: None,
                                })
                            }
                        }
                    }
                    None => {
                        let items = items
                            .iter()
                            .map(|e| Ok(expr::sql(&Scope::default(), e)?.select_item()))
                            .collect::<Result<Vec<_>>>()?;
                        Ok(Planned::of(
                            self.sql(&format!("SELECT {}", items.join(", ")))?,
                        ))
                    }
                }
            }
            RelType::Filter(f) => {
                let c = self.child(&f.input, "Filter")?;
                let src = self.source(&c)?;
                let cond = expr::sql(
                    &src.scope,
                    f.condition.as_ref().ok_or_else(|| {
                        ConnectError::illegal_argument("a filter without its condition")
                    })?,
                )?
                .text;
                let mut wheres = src.wheres.clone();
                wheres.push(cond);
                let filtered = Source { wheres, ..src };
                let frame = self.sql(&format!("SELECT * {}", filtered.clause()))?;
                let from = c.from.map(|mut f| {
                    f.wheres = filtered.wheres.clone();
                    f
                });
                Ok(Planned {
                    frame,
                    ids: c.ids,
                    from,
                })
            }
            RelType::Aggregate(a) => ops::aggregate(self, a),
            RelType::Join(j) => ops::join(self, j),
            RelType::SetOp(s) => ops::set_op(self, s),
            RelType::WithColumns(w) => ops::with_columns(self, w),
            RelType::WithColumnsRenamed(w) => ops::with_columns_renamed(self, w),
            RelType::Drop(d) => ops::drop(self, d),
            RelType::ToDf(t) => ops::to_df(self, t),
            RelType::SubqueryAlias(s) => {
                let c = self.child(&s.input, "SubqueryAlias")?;
                let view = match &c.from {
                    None => self.view(&c.frame)?,
                    Some(_) => {
                        let src = self.source(&c)?;
                        let inner = self.select(&src, &["*".into()], Vec::new())?;
                        self.view(&inner.frame)?
                    }
                };
                let text = format!("{view} AS {}", quote(&s.alias));
                let frame = self.sql(&format!("SELECT * FROM {text}"))?;
                Ok(Planned {
                    frame,
                    from: Some(From {
                        text,
                        wheres: Vec::new(),
                        aliases: c.ids.iter().map(|id| (*id, s.alias.clone())).collect(),
                        qualifiers: vec![s.alias.clone()],
                    }),
                    ids: c.ids,
                })
            }
            RelType::WithWatermark(w) => {
                let c = self.child(&w.input, "WithWatermark")?;
                let f = c.frame.clone();
                Ok(Planned {
                    frame: f.with_watermark(&w.event_time, &w.delay_threshold)?,
                    ids: c.ids,
                    from: None,
                })
            }
            RelType::Deduplicate(d) => {
                let c = self.child(&d.input, "Deduplicate")?;
                let f = c.frame.clone();
                let keys: Vec<String> = if d.all_columns_as_keys.unwrap_or(false) {
                    Vec::new()
                } else {
                    d.column_names.clone()
                };
                let frame = if d.within_watermark.unwrap_or(false) {
                    f.drop_duplicates_within_watermark(keys)?
                } else {
                    f.drop_duplicates(keys)?
                };
                Ok(Planned {
                    frame,
                    ids: c.ids,
                    from: None,
                })
            }
            RelType::Sort(s) => self.sorted(s, ""),
            RelType::Limit(l) => {
                self.suffix(&l.input, "Limit", &format!("LIMIT {}", l.limit.max(0)))
            }
            RelType::Offset(o) => {
                self.suffix(&o.input, "Offset", &format!("OFFSET {}", o.offset.max(0)))
            }
            RelType::Tail(t) => ops::tail(self, t),
            RelType::ShowString(s) => ops::show_string(self, s),
            RelType::FillNa(f) => rows::fill_na(self, f),
            RelType::DropNa(d) => rows::drop_na(self, d),
            RelType::Sample(s) => rows::sample(self, s),
            RelType::ToSchema(t) => rows::to_schema(self, t),
            RelType::Unpivot(u) => rows::unpivot(self, u),
            RelType::Hint(h) => self.child(&h.input, "Hint"),
            RelType::Repartition(r) => self.child(&r.input, "Repartition"),
            RelType::RepartitionByExpression(r) => self.child(&r.input, "RepartitionByExpression"),
            other => Err(ConnectError::not_supported(format!(
                "the {} relation",
                rel_name(other)
            ))),
        }
    }

    /// The ORDER BY keys of sort orders over `src`.
    fn sort_keys(
        &self,
        src: &Source,
        order: &[proto::expression::SortOrder],
    ) -> Result<Vec<String>> {
        order
            .iter()
            .map(|o| {
                let e = proto::Expression {
                    common: None,
                    expr_type: Some(proto::expression::ExprType::SortOrder(Box::new(o.clone()))),
                };
                Ok(expr::sql(&src.scope, &e)?.text)
            })
            .collect()
    }

    /// `SELECT * .. ORDER BY keys suffix` (a sort and the limit or offset after it in one
    /// query, so the order holds for the limit).
    fn sorted(&self, s: &proto::Sort, suffix: &str) -> Result<Planned> {
        let c = self.child(&s.input, "Sort")?;
        let src = self.source(&c)?;
        let keys = self.sort_keys(&src, &s.order)?;
        let f = self.sql(&format!(
            "SELECT * {} ORDER BY {} {suffix}",
            src.clause(),
            keys.join(", ")
        ))?;
        Ok(Planned {
            frame: f,
            ids: c.ids,
            from: None,
        })
    }

    fn suffix(
        &self,
        r: &Option<Box<proto::Relation>>,
        node: &str,
        suffix: &str,
    ) -> Result<Planned> {
        let child = input(r, node)?;
        if let Some(RelType::Sort(s)) = &child.rel_type {
            let mut p = self.sorted(s, suffix)?;
            if let Some(id) = child.common.as_ref().and_then(|c| c.plan_id) {
                p.ids.push(id);
            }
            return Ok(p);
        }
        let c = self.plan(child)?;
        let src = self.source(&c)?;
        let f = self.sql(&format!("SELECT * {} {suffix}", src.clause()))?;
        Ok(Planned {
            frame: f,
            ids: c.ids,
            from: None,
        })
    }

    /// The SQL of an expression over `src`.
    pub(crate) fn expr(&self, src: &Source, e: &proto::Expression) -> Result<Sql> {
        expr::sql(&src.scope, e)
    }
}

/// Spark's name of a relation type, for not-supported errors.
fn rel_name(r: &RelType) -> String {
    let debug = format!("{r:?}");
    debug
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or("unknown")
        .to_string()
}
