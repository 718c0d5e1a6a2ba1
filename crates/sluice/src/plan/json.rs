//! `from_json(value, 'ddl schema')` and `to_json(struct)`, as in Spark SQL: the typical Kafka
//! pipeline (parse JSON values, aggregate, write JSON back) in a few lines of SQL or Rust.
//! `from_json` parses with the file source's Spark PERMISSIVE rules (a malformed document or a
//! wrongly typed field gives nulls, never an error).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, StructArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{exec_err, plan_err, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::prelude::{lit, Expr};

fn ddl_arg(args: &[Option<&ScalarValue>]) -> DfResult<Arc<arrow::datatypes::Schema>> {
    match args.get(1) {
        Some(Some(ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)))) => {
            let schema = crate::schema::parse_ddl_schema(s)
                .map_err(|e| datafusion::error::DataFusionError::Plan(format!("from_json: {}", e.message())))?;
            Ok(crate::source::file::nullable_schema(&schema))
        }
        _ => plan_err!("from_json(value, schema): the schema must be a DDL string literal such as 'user STRING, amount DOUBLE'"),
    }
}

/// `from_json(value, 'user STRING, amount DOUBLE')` -> struct.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct FromJson {
    signature: Signature,
}

impl Default for FromJson {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for FromJson {
    fn name(&self) -> &str {
        "from_json"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if !(2..=3).contains(&arg_types.len()) {
            return plan_err!("from_json takes (value, schema[, options])");
        }
        Ok(arg_types.iter().map(|_| DataType::Utf8).collect())
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        plan_err!("from_json needs its schema argument")
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let schema = ddl_arg(args.scalar_arguments)?;
        Ok(Arc::new(Field::new(
            "from_json",
            DataType::Struct(schema.fields().clone()),
            true,
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let DataType::Struct(fields) = args.return_field.data_type().clone() else {
            return exec_err!("from_json: unexpected return type");
        };
        let values = args.args[0].to_array(args.number_rows)?;
        let values = arrow::compute::cast(&values, &DataType::Utf8)?;
        let strings = values
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| {
                datafusion::error::DataFusionError::Internal("from_json input".into())
            })?;
        let docs: Vec<Option<&str>> = strings.iter().collect();
        let schema = Arc::new(arrow::datatypes::Schema::new(fields.clone()));
        let batch = crate::source::file::parse_json_documents(&docs, &schema)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let nulls = NullBuffer::from(docs.iter().map(|d| d.is_some()).collect::<Vec<bool>>());
        let arr = StructArray::try_new(fields, batch.columns().to_vec(), Some(nulls))?;
        Ok(ColumnarValue::Array(Arc::new(arr)))
    }
}

/// `to_json(struct)` -> a JSON object string per row (null fields omitted, as Spark).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ToJson {
    signature: Signature,
}

impl Default for ToJson {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ToJson {
    fn name(&self) -> &str {
        "to_json"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(DataType::Struct(_)) => Ok(DataType::Utf8),
            other => plan_err!(
                "to_json takes a struct (e.g. named_struct('a', x) or struct(x, y)), got {other:?}"
            ),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arr: ArrayRef = args.args[0].to_array(args.number_rows)?;
        let s = arr
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| datafusion::error::DataFusionError::Internal("to_json input".into()))?;
        let batch = RecordBatch::from(s.clone());
        let mut buf = Vec::new();
        {
            let mut w = arrow::json::LineDelimitedWriter::new(&mut buf);
            w.write(&batch)?;
            w.finish()?;
        }
        let text = String::from_utf8_lossy(&buf);
        let mut lines = text.lines();
        let out: StringArray = (0..s.len())
            .map(|i| {
                let line = lines.next();
                if s.is_null(i) {
                    None
                } else {
                    line.map(str::to_string)
                }
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

pub(crate) fn json_udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(FromJson::default()),
        ScalarUDF::new_from_impl(ToJson::default()),
    ]
}

/// `from_json(col("value"), "user STRING, amount DOUBLE")` for the DataFrame API.
pub fn from_json(value: Expr, ddl: &str) -> Expr {
    ScalarUDF::new_from_impl(FromJson::default()).call(vec![value, lit(ddl)])
}

/// `to_json(struct_expr)` for the DataFrame API.
pub fn to_json(value: Expr) -> Expr {
    ScalarUDF::new_from_impl(ToJson::default()).call(vec![value])
}
