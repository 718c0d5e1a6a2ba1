//! Reading a file sink's output back as a batch (`Session::read`, tests, tools): the committed
//! files of the `_spark_metadata` manifest, or every visible data file of a plain directory.

use super::*;

/// The data files committed to the file sink output `path`, in commit order: the `add` entries
/// of `<path>/_spark_metadata` minus `delete` entries. `None` if `path` has no manifest
/// directory (it was not written by a file sink: a reader then lists the directory).
pub fn committed_files(path: &Path) -> Result<Option<Vec<PathBuf>>> {
    let log_dir = path.join(MANIFEST_DIR);
    if !log_dir.is_dir() {
        return Ok(None);
    }
    let entries = manifest_log(path, DEFAULT_COMPACT_INTERVAL).all_entries()?;
    let deleted: HashSet<&str> = entries
        .iter()
        .filter(|e| e.action == "delete")
        .map(|e| e.path.as_str())
        .collect();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for e in &entries {
        if e.action != "add" || e.is_dir || deleted.contains(e.path.as_str()) {
            continue;
        }
        if seen.insert(e.path.as_str()) {
            files.push(entry_path(&e.path, path));
        }
    }
    Ok(Some(files))
}

/// Reads the committed output of a file sink (or, without a manifest, every visible data file
/// under `path`; or the single file `path`). JSON and CSV are read with `schema`, inferred
/// when `None`; parquet files are read with their own schema, conformed to `schema` when given
/// (columns by name, cast). CSV uses the defaults (no header, `,`); see
/// [`read_sink_output_with_options`].
pub fn read_sink_output(
    path: &Path,
    format: &str,
    schema: Option<SchemaRef>,
) -> Result<Vec<RecordBatch>> {
    read_sink_output_with_options(path, format, schema, &HashMap::new())
}

/// [`read_sink_output`] with format options (`header`, `sep` for CSV).
pub fn read_sink_output_with_options(
    path: &Path,
    format: &str,
    schema: Option<SchemaRef>,
    options: &HashMap<String, String>,
) -> Result<Vec<RecordBatch>> {
    let options = FileOptions::parse(FileFormat::parse(format)?, options)?;
    let files = if path.is_file() {
        vec![path.to_path_buf()]
    } else {
        match committed_files(path)? {
            Some(files) => files,
            None => list_data_files(path)?,
        }
    };
    if files.is_empty() {
        return Ok(Vec::new());
    }
    match options.format {
        FileFormat::Parquet => {
            let mut out = Vec::new();
            for f in &files {
                let reader = ParquetRecordBatchReaderBuilder::try_new(open(f)?)
                    .and_then(|b| b.build())
                    .map_err(|e| read_err(f, e))?;
                for b in reader {
                    let b = b.map_err(|e| read_err(f, e))?;
                    out.push(match &schema {
                        Some(s) => conform_by_name(&b, s).map_err(|e| e.context(f.display()))?,
                        None => b,
                    });
                }
            }
            Ok(out)
        }
        FileFormat::Json => {
            let schema = match schema {
                Some(s) => s,
                None => {
                    let mut schemas = Vec::new();
                    for f in &files {
                        let (s, _) = arrow::json::reader::infer_json_schema_from_seekable(
                            BufReader::new(open(f)?),
                            None,
                        )
                        .map_err(|e| read_err(f, e))?;
                        schemas.push(s);
                    }
                    Arc::new(Schema::try_merge(schemas)?)
                }
            };
            let mut out = Vec::new();
            for f in &files {
                let reader = arrow::json::ReaderBuilder::new(schema.clone())
                    .build(BufReader::new(open(f)?))
                    .map_err(|e| read_err(f, e))?;
                for b in reader {
                    out.push(b.map_err(|e| read_err(f, e))?);
                }
            }
            Ok(out)
        }
        FileFormat::Csv => {
            let schema = match schema {
                Some(s) => s,
                None => {
                    let fmt = arrow::csv::reader::Format::default()
                        .with_header(options.csv_header)
                        .with_delimiter(options.csv_sep)
                        .with_escape(b'\\');
                    let mut schemas = Vec::new();
                    for f in &files {
                        let (s, _) = fmt
                            .infer_schema(open(f)?, None)
                            .map_err(|e| read_err(f, e))?;
                        schemas.push(s);
                    }
                    Arc::new(Schema::try_merge(schemas)?)
                }
            };
            let mut out = Vec::new();
            for f in &files {
                let reader = arrow::csv::ReaderBuilder::new(schema.clone())
                    .with_header(options.csv_header)
                    .with_delimiter(options.csv_sep)
                    .with_escape(b'\\')
                    .build(open(f)?)
                    .map_err(|e| read_err(f, e))?;
                for b in reader {
                    out.push(b.map_err(|e| read_err(f, e))?);
                }
            }
            Ok(out)
        }
    }
}

fn open(f: &Path) -> Result<File> {
    File::open(f).map_err(|e| SluiceError::io(Fault::Input, format!("opening {}", f.display()), e))
}

fn read_err(f: &Path, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::input(
        class::FAILED_READ_FILE,
        format!("reading {}: {e}", f.display()),
    )
}

/// Every data file under `dir` (recursively), skipping hidden names (`_*`, `.*`), sorted.
fn list_data_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = match fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && d == dir => {
                return Err(SluiceError::input(
                    class::PATH_NOT_FOUND,
                    format!("path does not exist: {}", dir.display()),
                ))
            }
            Err(e) => {
                return Err(SluiceError::io(
                    Fault::Input,
                    format!("listing {}", d.display()),
                    e,
                ))
            }
        };
        for ent in rd {
            let ent = ent.map_err(|e| {
                SluiceError::io(Fault::Input, format!("listing {}", d.display()), e)
            })?;
            let name = ent.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('_') || name.starts_with('.') {
                continue;
            }
            let p = ent.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `batch` reshaped to `schema`: columns matched by name (exact, then case-insensitive), cast
/// when the type differs, all-null when missing.
fn conform_by_name(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().as_ref() == schema.as_ref() {
        return Ok(batch.clone());
    }
    let bs = batch.schema();
    let mut columns = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let idx = bs.index_of(f.name()).ok().or_else(|| {
            bs.fields()
                .iter()
                .position(|g| g.name().eq_ignore_ascii_case(f.name()))
        });
        let col = match idx {
            Some(i) => {
                let c = batch.column(i);
                if c.data_type() == f.data_type() {
                    c.clone()
                } else {
                    arrow::compute::cast(c, f.data_type())?
                }
            }
            None => arrow::array::new_null_array(f.data_type(), batch.num_rows()),
        };
        columns.push(col);
    }
    // Keep the given schema unless a non-nullable field received nulls.
    let nullable: Vec<Field> = schema
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| {
            f.as_ref()
                .clone()
                .with_nullable(f.is_nullable() || c.null_count() > 0)
        })
        .collect();
    let target = if nullable
        .iter()
        .zip(schema.fields())
        .all(|(a, b)| a.is_nullable() == b.is_nullable())
    {
        schema.clone()
    } else {
        Arc::new(Schema::new_with_metadata(
            nullable,
            schema.metadata().clone(),
        ))
    };
    Ok(RecordBatch::try_new(target, columns)?)
}
