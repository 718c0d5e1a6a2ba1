//! Spark's values for the higher-order functions (checked on PySpark 3.5.7).
