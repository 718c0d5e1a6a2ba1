//! Spark Connect's `DataType` and Arrow's, both ways (being written on branch f-plan).

use arrow::datatypes::{Schema, SchemaRef};

use crate::error::{ConnectError, Result};
use crate::proto;

/// A schema as Spark's struct type.
pub fn schema_to_proto(schema: &Schema) -> Result<proto::DataType> {
    let _ = schema;
    Err(ConnectError::not_supported("schemas"))
}

/// A DDL or struct-JSON schema string.
pub fn parse_schema(text: &str) -> Result<SchemaRef> {
    let _ = text;
    Err(ConnectError::not_supported("schemas"))
}
