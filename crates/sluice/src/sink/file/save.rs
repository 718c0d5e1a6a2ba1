//! Batch writes of files (Spark's `DataFrameWriter.save(path)`: `df.write.parquet(..)`,
//! `.json(..)`, `.csv(..)`), in the same formats and file names as the streaming file sink but
//! without a `_spark_metadata` manifest: a batch write is one job, marked done by `_SUCCESS`.

use std::path::{Path, PathBuf};

use super::partition::{partition_by_option, PartitionColumns};
use super::writer::write_files;
use super::{check_csv_columns, FileFormat, FileOptions};
use crate::error::{class, Fault, Result, SluiceError};
use crate::types::BatchData;

/// What a batch write does when the path exists (Spark's `SaveMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveMode {
    /// Adds files next to the existing ones.
    Append,
    /// Replaces the directory's contents.
    Overwrite,
    /// Fails when the path exists (Spark's default).
    ErrorIfExists,
    /// Writes nothing when the path exists.
    Ignore,
}

/// Writes `data` under `path` as `format` files (one per non-empty partition, and per
/// `col=value/` folder with the `partitionBy` option) and `_SUCCESS`. Returns the data files
/// written.
pub fn save_files(
    path: &Path,
    format: &str,
    options: &std::collections::HashMap<String, String>,
    mode: SaveMode,
    data: &BatchData,
) -> Result<Vec<PathBuf>> {
    let format = FileFormat::parse(format)?;
    let file_options = FileOptions::parse(format, options)?;
    let partitioning = PartitionColumns::resolve(&data.schema, &partition_by_option(options)?)?;
    if format == FileFormat::Csv {
        check_csv_columns(partitioning.data_schema())?;
    }
    if crate::storage::exists(path) {
        match mode {
            SaveMode::ErrorIfExists => {
                return Err(SluiceError::query(
                    class::PATH_ALREADY_EXISTS,
                    format!(
                        "Path {} already exists. Set mode as \"overwrite\" \
                         to overwrite the existing path.",
                        path.display()
                    ),
                ))
            }
            SaveMode::Ignore => return Ok(Vec::new()),
            SaveMode::Overwrite => {
                let remove = if crate::storage::is_dir(path) {
                    crate::storage::remove_dir_all(path)
                } else {
                    crate::storage::remove_file(path)
                };
                remove.map_err(|e| {
                    SluiceError::io(
                        Fault::Connector,
                        format!("overwriting {}", path.display()),
                        e,
                    )
                })?;
            }
            SaveMode::Append => {}
        }
    }
    crate::storage::create_dir_all(path).map_err(|e| {
        SluiceError::io(Fault::Connector, format!("creating {}", path.display()), e)
    })?;
    let mut created = Vec::new();
    let rows = crate::sink::BatchStreams::from_data(data.clone());
    let written = match write_files(
        path,
        &file_options,
        &partitioning,
        rows,
        crate::conf::MemoryBudget::default(),
        &mut created,
    ) {
        Ok(files) => files.into_iter().map(|(f, _)| f).collect::<Vec<_>>(),
        Err(e) => {
            for f in created {
                let _ = crate::storage::remove_file(f);
            }
            return Err(e);
        }
    };
    let success = path.join("_SUCCESS");
    crate::storage::write(&success, b"").map_err(|e| {
        SluiceError::io(
            Fault::Connector,
            format!("writing {}", success.display()),
            e,
        )
    })?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::fs;
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn data(values: &[i64]) -> BatchData {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(values.to_vec()))],
        )
        .unwrap();
        BatchData {
            schema,
            partitions: vec![vec![batch]],
        }
    }

    fn data_files(dir: &Path) -> usize {
        fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with("part-")
            })
            .count()
    }

    #[test]
    fn save_modes_behave_as_sparks() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let opts = HashMap::new();
        save_files(&out, "json", &opts, SaveMode::ErrorIfExists, &data(&[1, 2])).unwrap();
        assert!(out.join("_SUCCESS").exists());
        assert_eq!(data_files(&out), 1);
        let err =
            save_files(&out, "json", &opts, SaveMode::ErrorIfExists, &data(&[3])).unwrap_err();
        assert!(err.is(class::PATH_ALREADY_EXISTS), "{err}");
        save_files(&out, "json", &opts, SaveMode::Append, &data(&[3])).unwrap();
        assert_eq!(data_files(&out), 2);
        assert!(
            save_files(&out, "json", &opts, SaveMode::Ignore, &data(&[4]))
                .unwrap()
                .is_empty()
        );
        assert_eq!(data_files(&out), 2);
        save_files(&out, "json", &opts, SaveMode::Overwrite, &data(&[5])).unwrap();
        assert_eq!(data_files(&out), 1);
        let text: String = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .map(|p| fs::read_to_string(p).unwrap())
            .collect();
        assert_eq!(text, "{\"id\":5}\n");
    }
}
