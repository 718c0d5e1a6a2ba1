//! Spark Connect's `DataType` and Arrow's, both ways.
