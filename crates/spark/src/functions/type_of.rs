//! Spark's `typeof(x)`: Spark's `DataType.simpleString` of the argument's type as Sluice maps
//! types ([`crate::schema::spark_simple_string`]).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::rowwise::spark_err;

/// `typeof(x)`: the name of `x`'s type; never null.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TypeOf {
    signature: Signature,
}

impl ScalarUDFImpl for TypeOf {
    fn name(&self) -> &str {
        "typeof"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if arg_types.len() != 1 {
            return Err(spark_err(
                crate::error::class::WRONG_NUM_ARGS_WITHOUT_SUGGESTION,
                format!(
                    "The `typeof` requires 1 parameters but the actual number is {}: typeof(expr)",
                    arg_types.len()
                ),
            ));
        }
        Ok(arg_types.to_vec())
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, _: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(Arc::new(Field::new("typeof", DataType::Utf8, false)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let name = args
            .arg_fields
            .first()
            .map(|f| crate::schema::spark_simple_string(f.data_type()))
            .unwrap_or_default();
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// `typeof`.
pub(super) fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(TypeOf {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[cfg(test)]
mod tests {
    //! Spark's values (PySpark 3.5.7).

    use crate::functions::testing::{error, session, text};

    #[test]
    fn typeof_names_sparks_types() {
        let s = session();
        assert_eq!(
            text(
                &s,
                "SELECT typeof('a'), typeof(CAST(1.5 AS DOUBLE)), typeof(named_struct('a', 'x')),
                        typeof(map('a', true)), typeof(DATE'2020-01-01'),
                        typeof(TIMESTAMP'2020-01-01 00:00:00'), typeof(NULL),
                        typeof(CAST(1 AS TINYINT)) AS t1, typeof(CAST(1 AS INT)) AS t2, typeof(X'01'),
                        typeof(array(CAST(1 AS INT))), typeof(CAST(NULL AS STRING)) AS t3"
            ),
            [
                "string",
                "double",
                "struct<a:string>",
                "map<string,boolean>",
                "date",
                "timestamp",
                "void",
                "tinyint",
                "int",
                "binary",
                "array<int>",
                "string"
            ]
        );
        let e = error(&s, "SELECT typeof(1, 2)");
        assert!(e.contains("typeof"), "{e}");
    }
}
