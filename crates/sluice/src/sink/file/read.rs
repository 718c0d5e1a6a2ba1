//! Reading a file sink's output back as a batch (`Session::read`, tests, tools): the committed
//! files of the `_spark_metadata` manifest, or every visible data file of a plain directory.

use super::*;

/// The data files committed to the file sink output `path`, in commit order: the `add` entries
/// of `<path>/_spark_metadata` minus `delete` entries. `None` if `path` has no manifest
/// directory (it was not written by a file sink: a reader then lists the directory).
pub fn committed_files(path: &Path) -> Result<Option<Vec<PathBuf>>> {
    let log_dir = path.join(MANIFEST_DIR);
    if !crate::storage::is_dir(&log_dir) {
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
/// (columns by name, cast). `col=value/` partition folders become columns after the data
/// columns. CSV uses the defaults (no header, `,`); see [`read_sink_output_with_options`].
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
    Ok(read_output(path, format, schema, options)?.1)
}

/// A batch read of `path` (Spark's `spark.read.format(..).load(path)`): the schema of the
/// rows (the given one with partition columns moved last; inferred without one; `None` when
/// there is nothing to infer it from) and the rows. With `schema` and a datetime option
/// (`timestampFormat`, `dateFormat`, ..), JSON and CSV go through the file source's parsers,
/// which know Spark's pattern letters.
pub(crate) fn read_output(
    path: &Path,
    format: &str,
    schema: Option<SchemaRef>,
    options: &HashMap<String, String>,
) -> Result<(Option<SchemaRef>, Vec<RecordBatch>)> {
    let file_options = FileOptions::parse(FileFormat::parse(format)?, options)?;
    let files = if crate::storage::is_file(path) {
        vec![path.to_path_buf()]
    } else {
        match committed_files(path)? {
            Some(files) => files,
            None => list_data_files(path)?,
        }
    };
    if files.is_empty() {
        return Ok((schema, Vec::new()));
    }
    let parts = if crate::storage::is_dir(path) {
        partition::discover(path, &files, schema.as_deref())?
    } else {
        None
    };
    // The columns the data files hold: the given schema without the partition columns.
    let data_schema = match (&schema, &parts) {
        (Some(s), Some(p)) => Some(Arc::new(Schema::new_with_metadata(
            s.fields()
                .iter()
                .filter(|f| !p.has(f.name()))
                .map(|f| f.as_ref().clone())
                .collect::<Vec<_>>(),
            s.metadata().clone(),
        ))),
        (s, _) => s.clone(),
    };
    // Files with the same partition values are read together.
    let groups: Vec<Vec<usize>> = match &parts {
        None => vec![(0..files.len()).collect()],
        Some(p) => {
            let mut groups: Vec<Vec<usize>> = Vec::new();
            let mut slot: HashMap<&Vec<Option<String>>, usize> = HashMap::new();
            for (i, v) in p.values.iter().enumerate() {
                let g = *slot.entry(v).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[g].push(i);
            }
            groups
        }
    };
    let source_parsers = data_schema.is_some() && spark_datetime_read(format, options);
    let data_schema = match data_schema {
        Some(s) => Some(s),
        None if file_options.format == FileFormat::Parquet => None,
        None => Some(infer_text_schema(&files, &file_options)?),
    };
    let mut out = Vec::new();
    for group in &groups {
        let group_files: Vec<PathBuf> = group.iter().map(|&i| files[i].clone()).collect();
        let batches = match (&data_schema, source_parsers) {
            (Some(s), true) => {
                crate::source::file::read_files(format, &group_files, s, options)?.batches
            }
            _ => read_files(&group_files, &file_options, data_schema.as_ref())?,
        };
        match &parts {
            None => out.extend(batches),
            Some(p) => {
                for b in batches {
                    let full = p.full_schema(b.schema_ref());
                    out.push(p.append(&b, group[0], &full)?);
                }
            }
        }
    }
    let schema = match (&data_schema, &parts, out.first()) {
        (Some(s), Some(p), _) => Some(p.full_schema(s)),
        (Some(s), None, _) => Some(s.clone()),
        (None, _, Some(b)) => Some(b.schema()),
        (None, _, None) => None,
    };
    // Batches of a parquet read without a schema keep their files' own types.
    Ok((schema, out))
}

/// Whether a batch JSON/CSV read sets a datetime option (`timestampFormat`, `dateFormat`,
/// `timestampNTZFormat`, `enableDateTimeParsingFallback`), read by the file source's parsers.
fn spark_datetime_read(format: &str, options: &HashMap<String, String>) -> bool {
    matches!(format.to_ascii_lowercase().as_str(), "json" | "csv")
        && options.keys().any(|k| {
            [
                "timestampFormat",
                "dateFormat",
                "timestampNTZFormat",
                "enableDateTimeParsingFallback",
            ]
            .iter()
            .any(|o| k.eq_ignore_ascii_case(o))
        })
}

/// The schema of JSON or CSV `files`, inferred from all of them.
fn infer_text_schema(files: &[PathBuf], options: &FileOptions) -> Result<SchemaRef> {
    let mut schemas = Vec::new();
    for f in files {
        let s = match options.format {
            FileFormat::Json => {
                arrow::json::reader::infer_json_schema_from_seekable(
                    BufReader::new(open_text(f)?),
                    None,
                )
                .map_err(|e| read_err(f, e))?
                .0
            }
            _ => {
                arrow::csv::reader::Format::default()
                    .with_header(options.csv_header)
                    .with_delimiter(options.csv_sep)
                    .with_escape(b'\\')
                    .infer_schema(open_text(f)?, None)
                    .map_err(|e| read_err(f, e))?
                    .0
            }
        };
        schemas.push(s);
    }
    Ok(Arc::new(Schema::try_merge(schemas)?))
}

/// Reads `files` with Arrow's readers: parquet with the files' schema (conformed to `schema`
/// when given), JSON and CSV with `schema` (given or inferred).
fn read_files(
    files: &[PathBuf],
    options: &FileOptions,
    schema: Option<&SchemaRef>,
) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    for f in files {
        match (options.format, schema) {
            (FileFormat::Parquet, _) => {
                let reader = ParquetRecordBatchReaderBuilder::try_new(open(f)?)
                    .and_then(|b| b.build())
                    .map_err(|e| read_err(f, e))?;
                for b in reader {
                    let b = b.map_err(|e| read_err(f, e))?;
                    out.push(match schema {
                        Some(s) => conform_by_name(&b, s).map_err(|e| e.context(f.display()))?,
                        None => b,
                    });
                }
            }
            (FileFormat::Json, Some(schema)) => {
                let reader = arrow::json::ReaderBuilder::new(schema.clone())
                    .build(BufReader::new(open_text(f)?))
                    .map_err(|e| read_err(f, e))?;
                for b in reader {
                    out.push(b.map_err(|e| read_err(f, e))?);
                }
            }
            (FileFormat::Csv, Some(schema)) => {
                let reader = arrow::csv::ReaderBuilder::new(schema.clone())
                    .with_header(options.csv_header)
                    .with_delimiter(options.csv_sep)
                    .with_escape(b'\\')
                    .build(open_text(f)?)
                    .map_err(|e| read_err(f, e))?;
                for b in reader {
                    out.push(b.map_err(|e| read_err(f, e))?);
                }
            }
            (_, None) => {
                return Err(SluiceError::internal(
                    "a JSON or CSV read without a schema (it is inferred first)",
                ))
            }
        }
    }
    Ok(out)
}

fn open(f: &Path) -> Result<crate::storage::ReadFile> {
    crate::storage::open(f)
        .map_err(|e| SluiceError::io(Fault::Input, format!("opening {}", f.display()), e))
}

/// A JSON or CSV file's text bytes, decompressed when its extension names a codec (`.gz`,
/// `.bz2`, `.zst`, ..), as Spark's readers do.
fn open_text(f: &Path) -> Result<std::io::Cursor<Vec<u8>>> {
    let bytes = crate::storage::read(f)
        .map_err(|e| SluiceError::io(Fault::Input, format!("reading {}", f.display()), e))?;
    Ok(std::io::Cursor::new(
        match crate::source::file::compression::Codec::of(f) {
            Some(codec) => codec.decode(&bytes, &f.display().to_string())?,
            None => bytes,
        },
    ))
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
        let rd = match crate::storage::list_dir(&d) {
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
            if ent.name.starts_with('_') || ent.name.starts_with('.') {
                continue;
            }
            if ent.is_dir {
                stack.push(ent.path);
            } else {
                out.push(ent.path);
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
