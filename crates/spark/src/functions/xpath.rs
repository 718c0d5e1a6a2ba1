//! Spark's XPath functions: `xpath`, `xpath_boolean`, `xpath_double` / `xpath_number`,
//! `xpath_float`, `xpath_int`, `xpath_long`, `xpath_short`, `xpath_string`.
//!
//! Spark evaluates XPath 1.0 with `javax.xml` (`UDFXPathUtil`, a non-namespace-aware DOM parser);
//! Sluice uses `sxd-document` (XML 1.0 parser) and `sxd-xpath` (XPath 1.0). Spark's rules:
//! - `(xml STRING, path STRING)`, other types are `DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE`;
//!   the path must be foldable (`DATATYPE_MISMATCH.NON_FOLDABLE_INPUT`; Spark says so at
//!   analysis, Sluice when the first batch runs, since DataFusion folds `concat('a', '/b')` into
//!   a literal only after the function's type is resolved);
//! - a null or empty xml or path gives null (Spark's order: before the path is compiled);
//! - a malformed document fails the query (Spark: `RuntimeException: Error loading expression`;
//!   Sluice: `XPATH_INVALID_XML`), as does a path that does not compile (`XPATH_INVALID_PATH`);
//! - `xpath` is the array of the matched nodes' DOM node values (`getNodeValue`): the text of a
//!   text, attribute or comment node, null for an element; an expression that is not a node set
//!   fails (`XPATH_NOT_A_NODE_SET`);
//! - the numeric variants take the expression's XPath `number()` value and convert it as Java's
//!   `Double.intValue()` etc. do (NaN is 0, out of range saturates; `xpath_short` truncates the
//!   int to 16 bits); `xpath_double`/`xpath_float` keep NaN;
//! - `xpath_string` is the string value (of the first node: "" when none matches),
//!   `xpath_boolean` the boolean value (a node set is true when non-empty).
//!
//! Java's DOM is not namespace-aware here, so names are matched as written: after parsing, every
//! element and attribute is renamed to its name as written, without a namespace (`<a xmlns="u">`
//! matches `a`, `<p:b>` is named `p:b`); adjacent text nodes (sxd-document splits text at
//! entity references) are merged into one, as in Java's DOM. XPath's string-to-number conversion is XPath 1.0's
//! (digits, `.` and `-` only: `1e5` and `NaN` are NaN), as Java's, for `number()`, `sum()` and the
//! result; arithmetic and comparisons on strings inside an expression use `sxd-xpath`'s own
//! conversion, which also reads exponents.
//!
//! Not like Spark yet: entities declared in a DTD (`<!ENTITY e "x">`, `&e;`) and undeclared
//! namespace prefixes in the document are parse errors here (Java reads both); a prefix in the
//! path (`a/p:b`) is an error here, an empty match in Spark; `text()` of text next to a CDATA
//! section is the whole run here, only the part before the CDATA in Spark; numbers of 1e21 and
//! more are written as Rust writes them by `xpath_string`.
//!
//! Each thread keeps the compiled XPath of every path it has seen (the path is a literal).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Float32Builder, Float64Builder, Int16Builder,
    Int32Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use sxd_document::dom;
use sxd_xpath::nodeset::Node;
use sxd_xpath::{Context, Factory, Value, XPath};

use crate::error::{class, SluiceError};
use crate::schema::spark_type_name;

/// The nine functions.
pub(super) fn udfs() -> Vec<ScalarUDF> {
    [
        ("xpath", Kind::List),
        ("xpath_boolean", Kind::Boolean),
        ("xpath_double", Kind::Double),
        ("xpath_number", Kind::Double),
        ("xpath_float", Kind::Float),
        ("xpath_int", Kind::Int),
        ("xpath_long", Kind::Long),
        ("xpath_short", Kind::Short),
        ("xpath_string", Kind::String),
    ]
    .into_iter()
    .map(|(name, kind)| {
        ScalarUDF::new_from_impl(XPathFn {
            name,
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
        })
    })
    .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    List,
    Boolean,
    Double,
    Float,
    Int,
    Long,
    Short,
    String,
}

impl Kind {
    fn data_type(self) -> DataType {
        match self {
            Kind::List => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            Kind::Boolean => DataType::Boolean,
            Kind::Double => DataType::Float64,
            Kind::Float => DataType::Float32,
            Kind::Int => DataType::Int32,
            Kind::Long => DataType::Int64,
            Kind::Short => DataType::Int16,
            Kind::String => DataType::Utf8,
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct XPathFn {
    name: &'static str,
    kind: Kind,
    signature: Signature,
}

fn query_err(class: &'static str, msg: String) -> DataFusionError {
    DataFusionError::External(Box::new(SluiceError::query(class, msg)))
}

fn non_foldable(name: &str) -> DataFusionError {
    query_err(
        class::DATATYPE_MISMATCH_NON_FOLDABLE_INPUT,
        format!(
            "Cannot resolve \"{name}\" due to data type mismatch: the input path should be a \
             foldable \"STRING\" expression; however, it is computed per row. Write the path \
             as a string literal, e.g. {name}(xml, 'a/b')."
        ),
    )
}

impl ScalarUDFImpl for XPathFn {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        // DataFusion hides a coercion error's class in its own message: the types are checked
        // again in `return_field_from_args`, whose error reaches the user as it is.
        Ok(self
            .checked_types(arg_types)
            .unwrap_or_else(|_| arg_types.to_vec()))
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.kind.data_type())
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        // The path's foldability is checked when the function runs: here a constant expression
        // such as concat('a', '/b') is not folded into a literal yet, and Spark accepts it.
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        self.checked_types(&types)?;
        Ok(Arc::new(Field::new(
            self.name(),
            self.kind.data_type(),
            true,
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.invoke(args)
    }
}

impl XPathFn {
    /// The types `arg_types` are coerced to, or Spark's error for them.
    fn checked_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let name = self.name;
        if arg_types.len() != 2 {
            return Err(query_err(
                class::WRONG_NUM_ARGS,
                format!(
                    "The `{name}` requires 2 parameters but the actual number is {}: \
                     {name}(xml, path).",
                    arg_types.len()
                ),
            ));
        }
        arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| match t {
                DataType::Null | DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                    Ok(DataType::Utf8)
                }
                other => Err(query_err(
                    class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                    format!(
                        "Cannot resolve \"{name}\" due to data type mismatch: Parameter {} \
                         requires the \"STRING\" type, however it has the type \"{}\". Pass a \
                         STRING, e.g. CAST(x AS STRING).",
                        i + 1,
                        spark_type_name(other)
                    ),
                )),
            })
            .collect()
    }

    fn invoke(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let path = match args.args.get(1) {
            Some(ColumnarValue::Scalar(v)) => match v {
                ScalarValue::Utf8(p) | ScalarValue::LargeUtf8(p) | ScalarValue::Utf8View(p) => {
                    p.clone()
                }
                _ => None,
            },
            _ => return Err(non_foldable(self.name)),
        };
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let n = if scalar { 1 } else { args.number_rows };
        let xml = cast(&args.args[0].to_array(n)?, &DataType::Utf8)?;
        let xml = xml.as_string::<i32>();
        let path = path.unwrap_or_default();
        let context = context();
        let mut out = Out::new(self.kind, n);
        // Compiled at the first row that needs it, as Spark does (a null or empty xml or path
        // is null before the path is looked at).
        let mut xp: Option<Rc<XPath>> = None;
        for row in 0..n {
            if path.is_empty() || xml.is_null(row) || xml.value(row).is_empty() {
                out.null();
                continue;
            }
            let xp = match &xp {
                Some(x) => x.clone(),
                None => {
                    let x = compiled(&path).map_err(|e| {
                        query_err(
                            class::XPATH_INVALID_PATH,
                            format!(
                                "{}: Invalid XPath '{path}': {e}. Write an XPath 1.0 expression, \
                                 e.g. 'a/b/text()' or 'sum(a/b)'.",
                                self.name
                            ),
                        )
                    })?;
                    xp = Some(x.clone());
                    x
                }
            };
            let package = sxd_document::parser::parse(xml.value(row)).map_err(|e| {
                DataFusionError::External(Box::new(SluiceError::input(
                    class::XPATH_INVALID_XML,
                    format!(
                        "{}: the xml is not a well-formed XML document ({e} in {:?}), so \
                         XPath '{path}' cannot be evaluated (Spark fails the same way: \"Error \
                         loading expression '{path}'\"). Clean the input, or keep such rows \
                         away from the call with a filter.",
                        self.name,
                        short(xml.value(row)),
                    ),
                )))
            })?;
            let doc = package.as_document();
            as_java_dom(doc);
            let value = xp.evaluate(&context, doc.root()).map_err(|e| {
                query_err(
                    class::XPATH_INVALID_PATH,
                    format!(
                        "{}: XPath '{path}' cannot be evaluated: {e}. Use XPath 1.0's functions \
                         and no namespace prefixes.",
                        self.name
                    ),
                )
            })?;
            out.push(self.name, &path, value)?;
        }
        super::columnar(out.finish(), scalar)
    }
}

fn short(s: &str) -> String {
    if s.chars().count() <= 60 {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(60).collect::<String>())
    }
}

thread_local! {
    /// Compiled XPaths by path text, per thread (`XPath` is not `Send`).
    static COMPILED: RefCell<HashMap<String, Rc<XPath>>> = RefCell::new(HashMap::new());
}

/// The compiled `path`, from this thread's cache.
fn compiled(path: &str) -> Result<Rc<XPath>, String> {
    if let Some(xp) = COMPILED.with(|c| c.borrow().get(path).cloned()) {
        return Ok(xp);
    }
    // A blank path is Java's "Empty expression!" (an empty one never gets here).
    let Some(xp) = Factory::new().build(path).map_err(|e| e.to_string())? else {
        return Err("Empty expression!".into());
    };
    let xp = Rc::new(xp);
    COMPILED.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= 256 {
            c.clear();
        }
        c.insert(path.to_string(), xp.clone());
    });
    Ok(xp)
}

/// XPath 1.0's core functions, with `number()` and `sum()` converting strings as Java does.
fn context() -> Context<'static> {
    let mut c = Context::new();
    c.set_function("number", NumberFn);
    c.set_function("sum", SumFn);
    c
}

/// A string as an XPath 1.0 number, as Java's `XString.toDouble`: after trimming, only digits,
/// `.` and `-` may appear (no exponent, no `NaN`/`Infinity`, no `+`), else NaN.
fn xpath_number(s: &str) -> f64 {
    let t = s.trim_matches(|c: char| c <= ' ');
    if t.is_empty()
        || !t
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '-')
    {
        return f64::NAN;
    }
    t.parse().unwrap_or(f64::NAN)
}

/// The XPath number value of `v`.
fn number_of(v: &Value) -> f64 {
    match v {
        Value::String(s) => xpath_number(s),
        Value::Nodeset(_) => xpath_number(&v.string()),
        other => other.number(),
    }
}

fn too_many(expected: usize, actual: usize) -> sxd_xpath::function::Error {
    sxd_xpath::function::Error::TooManyArguments { expected, actual }
}

struct NumberFn;

impl sxd_xpath::function::Function for NumberFn {
    fn evaluate<'c, 'd>(
        &self,
        context: &sxd_xpath::context::Evaluation<'c, 'd>,
        args: Vec<Value<'d>>,
    ) -> Result<Value<'d>, sxd_xpath::function::Error> {
        match args.as_slice() {
            [] => Ok(Value::Number(xpath_number(&context.node.string_value()))),
            [v] => Ok(Value::Number(number_of(v))),
            _ => Err(too_many(1, args.len())),
        }
    }
}

struct SumFn;

impl sxd_xpath::function::Function for SumFn {
    fn evaluate<'c, 'd>(
        &self,
        _context: &sxd_xpath::context::Evaluation<'c, 'd>,
        args: Vec<Value<'d>>,
    ) -> Result<Value<'d>, sxd_xpath::function::Error> {
        match args.as_slice() {
            [Value::Nodeset(ns)] => Ok(Value::Number(
                ns.iter().map(|n| xpath_number(&n.string_value())).sum(),
            )),
            [other] => Err(sxd_xpath::function::Error::ArgumentNotANodeset {
                actual: other.into(),
            }),
            [] => Err(sxd_xpath::function::Error::NotEnoughArguments {
                expected: 1,
                actual: 0,
            }),
            _ => Err(too_many(1, args.len())),
        }
    }
}

/// Makes the document the DOM Java's parser builds: every element and attribute named as
/// written, without a namespace (not namespace-aware), and adjacent text nodes merged.
fn as_java_dom(doc: dom::Document) {
    fn written(prefix: Option<&str>, local: &str) -> String {
        match prefix {
            Some(p) => format!("{p}:{local}"),
            None => local.to_string(),
        }
    }
    fn walk(e: dom::Element) {
        let name = e.name();
        if name.namespace_uri().is_some() {
            let new = written(e.preferred_prefix(), name.local_part());
            e.set_name(new.as_str());
        }
        for a in e.attributes() {
            let name = a.name();
            if name.namespace_uri().is_some() {
                let new = written(a.preferred_prefix(), name.local_part());
                let value = a.value().to_string();
                e.remove_attribute(name);
                e.set_attribute_value(new.as_str(), &value);
            }
        }
        // One text node per run of text, as Java's parser makes (sxd-document splits text at
        // entity references such as `&amp;`).
        let mut run: Option<(dom::Text, String)> = None;
        for child in e.children() {
            match child {
                dom::ChildOfElement::Text(t) => match &mut run {
                    Some((_, text)) => {
                        text.push_str(t.text());
                        t.remove_from_parent();
                    }
                    None => run = Some((t, t.text().to_string())),
                },
                other => {
                    if let Some((first, text)) = run.take() {
                        first.set_text(&text);
                    }
                    if let dom::ChildOfElement::Element(c) = other {
                        walk(c);
                    }
                }
            }
        }
        if let Some((first, text)) = run {
            first.set_text(&text);
        }
    }
    for child in doc.root().children() {
        if let dom::ChildOfRoot::Element(e) = child {
            walk(e);
        }
    }
}

/// A node's DOM `getNodeValue`: null for elements and the document.
fn node_value(n: Node) -> Option<String> {
    match n {
        Node::Root(_) | Node::Element(_) => None,
        Node::Attribute(a) => Some(a.value().to_string()),
        Node::Text(t) => Some(t.text().to_string()),
        Node::Comment(c) => Some(c.text().to_string()),
        Node::ProcessingInstruction(p) => Some(p.value().unwrap_or("").to_string()),
        Node::Namespace(ns) => Some(ns.uri().to_string()),
    }
}

/// The result column being built.
enum Out {
    List(ListBuilder<StringBuilder>),
    Boolean(BooleanBuilder),
    Double(Float64Builder),
    Float(Float32Builder),
    Int(Int32Builder),
    Long(Int64Builder),
    Short(Int16Builder),
    String(StringBuilder),
}

impl Out {
    fn new(kind: Kind, n: usize) -> Out {
        match kind {
            Kind::List => Out::List(
                ListBuilder::with_capacity(StringBuilder::new(), n)
                    .with_field(Arc::new(Field::new("item", DataType::Utf8, true))),
            ),
            Kind::Boolean => Out::Boolean(BooleanBuilder::with_capacity(n)),
            Kind::Double => Out::Double(Float64Builder::with_capacity(n)),
            Kind::Float => Out::Float(Float32Builder::with_capacity(n)),
            Kind::Int => Out::Int(Int32Builder::with_capacity(n)),
            Kind::Long => Out::Long(Int64Builder::with_capacity(n)),
            Kind::Short => Out::Short(Int16Builder::with_capacity(n)),
            Kind::String => Out::String(StringBuilder::with_capacity(n, 0)),
        }
    }
    fn null(&mut self) {
        match self {
            Out::List(b) => b.append_null(),
            Out::Boolean(b) => b.append_null(),
            Out::Double(b) => b.append_null(),
            Out::Float(b) => b.append_null(),
            Out::Int(b) => b.append_null(),
            Out::Long(b) => b.append_null(),
            Out::Short(b) => b.append_null(),
            Out::String(b) => b.append_null(),
        }
    }
    fn push(&mut self, name: &str, path: &str, v: Value) -> DfResult<()> {
        // Java's Double.intValue() etc.: NaN is 0, out of range saturates (Rust's `as` does the
        // same); shortValue() is (short) of the int.
        match self {
            Out::List(b) => {
                let Value::Nodeset(ns) = v else {
                    let what = match v {
                        Value::Boolean(_) => "BOOLEAN",
                        Value::Number(_) => "NUMBER",
                        _ => "STRING",
                    };
                    return Err(query_err(
                        class::XPATH_NOT_A_NODE_SET,
                        format!(
                            "{name}: XPath '{path}' evaluates to a {what}, not a node set \
                             (Spark: \"Can not convert #{what} to a NodeList!\"). Use \
                             xpath_string, xpath_double or xpath_boolean for a single value, \
                             or a location path such as 'a/b/text()'."
                        ),
                    ));
                };
                for n in ns.document_order() {
                    b.values().append_option(node_value(n));
                }
                b.append(true);
            }
            Out::Boolean(b) => b.append_value(v.boolean()),
            Out::Double(b) => b.append_value(number_of(&v)),
            Out::Float(b) => b.append_value(number_of(&v) as f32),
            Out::Int(b) => b.append_value(number_of(&v) as i32),
            Out::Long(b) => b.append_value(number_of(&v) as i64),
            Out::Short(b) => b.append_value(number_of(&v) as i32 as i16),
            // Java writes negative zero as "0".
            Out::String(b) => match v {
                Value::Number(0.0) => b.append_value("0"),
                v => b.append_value(v.string()),
            },
        }
        Ok(())
    }
    fn finish(self) -> ArrayRef {
        match self {
            Out::List(mut b) => Arc::new(b.finish()),
            Out::Boolean(mut b) => Arc::new(b.finish()),
            Out::Double(mut b) => Arc::new(b.finish()),
            Out::Float(mut b) => Arc::new(b.finish()),
            Out::Int(mut b) => Arc::new(b.finish()),
            Out::Long(mut b) => Arc::new(b.finish()),
            Out::Short(mut b) => Arc::new(b.finish()),
            Out::String(mut b) => Arc::new(b.finish()),
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::DataType;

    use crate::error::{class, SluiceError};

    fn session() -> sluice::Session {
        sluice::Session::builder().build().unwrap()
    }

    /// The first column of `sql`'s result, each value as text (`None` for null).
    fn column(sql: &str) -> Vec<Option<String>> {
        let batches = session().sql(sql).unwrap().collect().unwrap();
        let mut out = Vec::new();
        for b in &batches {
            let c = b.column(0);
            let text = match c.data_type() {
                DataType::List(_) => {
                    let l = c.as_list::<i32>();
                    (0..l.len())
                        .map(|i| {
                            (!l.is_null(i)).then(|| {
                                let v = l.value(i);
                                let v = v.as_string::<i32>();
                                let items: Vec<String> = (0..v.len())
                                    .map(|j| {
                                        if v.is_null(j) {
                                            "null".to_string()
                                        } else {
                                            format!("{:?}", v.value(j))
                                        }
                                    })
                                    .collect();
                                format!("[{}]", items.join(","))
                            })
                        })
                        .collect::<Vec<_>>()
                }
                _ => {
                    let s = arrow::compute::cast(c, &DataType::Utf8).unwrap();
                    let s = s.as_string::<i32>();
                    (0..s.len())
                        .map(|i| (!s.is_null(i)).then(|| s.value(i).to_string()))
                        .collect()
                }
            };
            out.extend(text);
        }
        out
    }

    fn one(sql: &str) -> Option<String> {
        column(sql).into_iter().next().flatten()
    }

    fn err(sql: &str) -> SluiceError {
        match session().sql(sql) {
            Err(e) => e,
            Ok(df) => df.collect().unwrap_err(),
        }
    }

    // Expected values: PySpark 3.5.7.
    #[test]
    fn xpath_lists_node_values() {
        let x = "'<a><b>b1</b><b>b2</b><b>b3</b><c>c1</c><c>c2</c></a>'";
        assert_eq!(
            one(&format!("SELECT xpath({x}, 'a/b/text()')")).as_deref(),
            Some(r#"["b1","b2","b3"]"#)
        );
        // Elements have no node value.
        assert_eq!(
            one(&format!("SELECT xpath({x}, 'a/b')")).as_deref(),
            Some("[null,null,null]")
        );
        assert_eq!(
            one(&format!("SELECT xpath({x}, 'a/x')")).as_deref(),
            Some("[]")
        );
        assert_eq!(
            one("SELECT xpath('<a><b id=\"1\">b1</b><b id=\"2\">b2</b></a>', 'a/b/@id')")
                .as_deref(),
            Some(r#"["1","2"]"#)
        );
        assert_eq!(
            one("SELECT xpath('<a>t1<b>1</b>t2</a>', 'a/node()')").as_deref(),
            Some(r#"["t1",null,"t2"]"#)
        );
        assert_eq!(
            one("SELECT xpath('<a><?pi data?><!--c--></a>', 'a/node()')").as_deref(),
            Some(r#"["data","c"]"#)
        );
        assert_eq!(
            one("SELECT xpath('<a>x&amp;y</a>', 'a/text()')").as_deref(),
            Some(r#"["x&y"]"#)
        );
        // Names as written (Java's DOM here is not namespace-aware).
        assert_eq!(
            one("SELECT xpath('<a xmlns=\"urn:x\"><b>1</b></a>', 'a/b/text()')").as_deref(),
            Some(r#"["1"]"#)
        );
        assert_eq!(
            one("SELECT xpath_string('<a xmlns:p=\"urn:x\"><p:b>1</p:b></a>', 'name(a/*)')")
                .as_deref(),
            Some("p:b")
        );
    }

    #[test]
    fn numbers_convert_as_java_does() {
        let q = |f: &str, x: &str, p: &str| one(&format!("SELECT {f}('{x}', '{p}')"));
        assert_eq!(
            q("xpath_int", "<a><b>1</b><b>2</b></a>", "sum(a/b)").as_deref(),
            Some("3")
        );
        assert_eq!(q("xpath_int", "<a>x</a>", "a").as_deref(), Some("0"));
        assert_eq!(q("xpath_int", "<a>3.7</a>", "a").as_deref(), Some("3"));
        assert_eq!(q("xpath_int", "<a>-3.7</a>", "a").as_deref(), Some("-3"));
        // No exponents in XPath 1.0 numbers: NaN, so 0.
        assert_eq!(q("xpath_long", "<a>1e20</a>", "a").as_deref(), Some("0"));
        assert_eq!(q("xpath_long", "<a>NaN</a>", "a").as_deref(), Some("0"));
        assert_eq!(
            q("xpath_short", "<a>70000</a>", "a").as_deref(),
            Some("4464")
        );
        assert_eq!(q("xpath_double", "<a>x</a>", "a").as_deref(), Some("NaN"));
        assert_eq!(q("xpath_float", "<a>x</a>", "a").as_deref(), Some("NaN"));
        assert_eq!(q("xpath_number", "<a></a>", "a").as_deref(), Some("NaN"));
        assert_eq!(
            q("xpath_double", "<a> 12 </a>", "a").as_deref(),
            Some("12.0")
        );
        assert_eq!(q("xpath_double", "<a>+5</a>", "a").as_deref(), Some("NaN"));
        assert_eq!(
            q("xpath_double", "<a>-.5</a>", "a").as_deref(),
            Some("-0.5")
        );
        assert_eq!(
            q("xpath_double", "<a><b>1e1</b></a>", "sum(a/b)").as_deref(),
            Some("NaN")
        );
        assert_eq!(
            q("xpath_double", "<a>Infinity</a>", "a").as_deref(),
            Some("NaN")
        );
    }

    #[test]
    fn strings_and_booleans() {
        let q = |f: &str, x: &str, p: &str| one(&format!("SELECT {f}('{x}', '{p}')"));
        assert_eq!(
            q("xpath_string", "<a><b>b</b><c>cc</c></a>", "a/c").as_deref(),
            Some("cc")
        );
        assert_eq!(
            q("xpath_string", "<a><b>x</b><b>y</b></a>", "a/b").as_deref(),
            Some("x")
        );
        assert_eq!(
            q("xpath_string", "<a><b>x</b></a>", "a/c").as_deref(),
            Some("")
        );
        assert_eq!(
            q("xpath_string", "<a><b>x<c>y</c></b></a>", "a/b").as_deref(),
            Some("xy")
        );
        assert_eq!(
            q("xpath_string", "<a><b>1</b></a>", "count(a/b)").as_deref(),
            Some("1")
        );
        assert_eq!(
            q("xpath_string", "<a/>", "1 div 0").as_deref(),
            Some("Infinity")
        );
        assert_eq!(q("xpath_string", "<a/>", "-0").as_deref(), Some("0"));
        assert_eq!(
            q("xpath_boolean", "<a><b>1</b></a>", "a/b").as_deref(),
            Some("true")
        );
        assert_eq!(
            q("xpath_boolean", "<a><b>1</b></a>", "a/c").as_deref(),
            Some("false")
        );
        assert_eq!(
            q("xpath_boolean", "<a><b>1</b></a>", "a/b = 1").as_deref(),
            Some("true")
        );
        assert_eq!(
            q("xpath_boolean", "<a>0</a>", "number(a)").as_deref(),
            Some("false")
        );
    }

    #[test]
    fn nulls_and_empty_strings_give_null() {
        for sql in [
            "SELECT xpath(NULL, 'a')",
            "SELECT xpath('<a/>', NULL)",
            "SELECT xpath('', 'a')",
            "SELECT xpath_string('', 'a')",
            "SELECT xpath_int('', 'a')",
            "SELECT xpath_string('<a>1</a>', '')",
            "SELECT xpath_int('<a>1</a>', CAST(NULL AS STRING))",
            // The path is not compiled for a null document.
            "SELECT xpath_int(CAST(NULL AS STRING), 'a[')",
        ] {
            assert_eq!(one(sql), None, "{sql}");
        }
    }

    #[test]
    fn over_a_column_of_several_rows() {
        assert_eq!(
            column(
                "SELECT xpath_int(x, 'sum(a/b)') FROM VALUES ('<a><b>1</b><b>2</b></a>'), \
                 ('<a><b>5</b></a>'), (NULL), ('<a/>') AS t(x)"
            ),
            [Some("3".into()), Some("5".into()), None, Some("0".into())]
        );
        assert_eq!(
            column(
                "SELECT xpath(x, 'a/b/text()') FROM VALUES ('<a><b>1</b><b>2</b></a>'), \
                 (NULL), ('<a><c/></a>') AS t(x)"
            ),
            [Some(r#"["1","2"]"#.into()), None, Some("[]".into())]
        );
    }

    #[test]
    fn errors_name_the_function_and_say_what_is_wrong() {
        let e = err("SELECT xpath('<a><b>', 'a')");
        assert!(e.is(class::XPATH_INVALID_XML), "{e}");
        assert!(e.message().contains("Error loading expression 'a'"), "{e}");
        let e = err("SELECT xpath_string('not xml', 'a')");
        assert!(e.is(class::XPATH_INVALID_XML), "{e}");
        let e = err("SELECT xpath_string('<a>1</a>', 'a[')");
        assert!(e.is(class::XPATH_INVALID_PATH), "{e}");
        assert!(e.message().contains("Invalid XPath 'a['"), "{e}");
        let e = err("SELECT xpath_int('<a>1</a>', '  ')");
        assert!(e.is(class::XPATH_INVALID_PATH), "{e}");
        let e = err("SELECT xpath('<a><b>b1</b></a>', 'count(a/b)')");
        assert!(e.is(class::XPATH_NOT_A_NODE_SET), "{e}");
        assert!(e.message().contains("#NUMBER"), "{e}");
        let e = err("SELECT xpath_int('<a>1</a>', x) FROM VALUES ('a') AS t(x)");
        assert!(e.is(class::DATATYPE_MISMATCH_NON_FOLDABLE_INPUT), "{e}");
        let e = err("SELECT xpath_int('<a><b>1</b></a>', 5)");
        assert!(e.is(class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE), "{e}");
        assert!(e.message().contains("Parameter 2"), "{e}");
        let e = err("SELECT xpath_int(1, 'a')");
        assert!(e.is(class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE), "{e}");
        let e = err("SELECT xpath_int('<a><b>1</b></a>', 'sum(a/b)', 1)");
        assert!(e.is(class::WRONG_NUM_ARGS), "{e}");
        assert!(
            e.message().contains("`xpath_int` requires 2 parameters"),
            "{e}"
        );
    }

    #[test]
    fn a_constant_path_expression_is_foldable() {
        assert_eq!(
            one("SELECT xpath_int('<a>1</a>', concat('a', ''))").as_deref(),
            Some("1")
        );
    }
}
