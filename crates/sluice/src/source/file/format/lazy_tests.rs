//! The lazy reader ([`read_files_lazy`]) against the whole-file reader: the same rows, counts
//! and errors whatever the piece size, and no more than about a piece of text held at a time.
//!
//! The reference is the reader as it was before files were read in pieces (the whole file read,
//! decompressed, and parsed as one text), kept here as [`reference_read`].

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow::array::RecordBatch;
use serde_json::{json, Value};

use super::test_util::rows;
use super::*;
use crate::source::file::compression::Codec;
use crate::source::file::options::Options;

/// Piece sizes every comparison runs with (the last one holds these files whole).
const CHUNKS: [usize; 6] = [1, 2, 7, 64, 4096, 1 << 20];

fn opts(format: &str, schema: &str, extra: &[(&str, &str)]) -> Arc<ParseOptions> {
    let schema = crate::schema::parse_ddl_schema(schema).unwrap();
    let m: HashMap<String, String> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(ParseOptions::new(format, &schema, &Options::new(&m)).unwrap())
}

fn to_path(uri: &str) -> PathBuf {
    PathBuf::from(uri)
}

/// What a read gave: all rows as one batch, malformed, dropped, files read; or the error text.
type Outcome = std::result::Result<(RecordBatch, u64, u64, u64), String>;

fn one_batch(opts: &ParseOptions, batches: &[RecordBatch]) -> RecordBatch {
    arrow::compute::concat_batches(&opts.schema, batches).unwrap()
}

/// The reader before pieces: each file read whole, decompressed whole, parsed as one text.
fn reference_file(path: &Path, uri: &str, context: &str, asm: &mut Assembler<'_>) -> Result<()> {
    let opts = asm.opts;
    if let FormatKind::Parquet = opts.kind {
        return read_file(path, uri, context, asm);
    }
    let bytes = match crate::storage::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if opts.ignore_missing_files {
                return Ok(());
            }
            return Err(file_not_found(uri, context));
        }
        Err(_) if opts.ignore_corrupt_files => return Ok(()),
        Err(e) => {
            return Err(SluiceError::io(
                Fault::Connector,
                format!(
                    "reading {uri}, part of {context} (make the file readable, or set the \
                     option ignoreCorruptFiles=true to skip files that cannot be read)"
                ),
                e,
            ))
        }
    };
    let bytes = match Codec::of(path) {
        Some(codec) => match codec.decode_partial(&bytes, uri) {
            (out, None) => out,
            (mut out, Some(_)) if opts.ignore_corrupt_files => {
                let by_lines = match &opts.kind {
                    FormatKind::Json(j) => !j.multi_line,
                    FormatKind::Csv(_) => true,
                    FormatKind::Text(t) => !t.whole_text,
                    FormatKind::Parquet => false,
                };
                let keep = if by_lines {
                    out.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
                } else {
                    0
                };
                out.truncate(keep);
                out
            }
            (_, Some(e)) => return Err(e),
        },
        None => bytes,
    };
    asm.files_read += 1;
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    let text = String::from_utf8_lossy(bytes);
    match &opts.kind {
        FormatKind::Json(j) => json::read(&text, uri, j, asm),
        FormatKind::Csv(c) => csv::read(&text, uri, c, asm),
        FormatKind::Text(t) => {
            if t.whole_text {
                asm.text_row(&text)
            } else {
                for_each_line(&text, t.line_sep.as_deref(), |_, line| asm.text_row(line))
            }
        }
        FormatKind::Parquet => Ok(()),
    }
}

fn reference_read(opts: &ParseOptions, files: &[String]) -> Outcome {
    let run = || -> Result<AssembledRows> {
        let mut asm = Assembler::new(opts)?;
        for f in files {
            reference_file(Path::new(f), f, "a test", &mut asm)?;
        }
        asm.finish()
    };
    outcome(opts, run())
}

fn whole_read(opts: &ParseOptions, files: &[String]) -> Outcome {
    let refs: Vec<&str> = files.iter().map(String::as_str).collect();
    outcome(opts, read_files_parallel(opts, &refs, "a test", to_path))
}

fn outcome(opts: &ParseOptions, read: Result<AssembledRows>) -> Outcome {
    match read {
        Ok(r) => Ok((
            one_batch(opts, &r.batches),
            r.malformed,
            r.dropped,
            r.files_read,
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The lazy read's outcome and its batches (those before an error too).
fn lazy_read(
    opts: &Arc<ParseOptions>,
    files: &[String],
    chunk_bytes: usize,
) -> (Outcome, Vec<RecordBatch>) {
    lazy_read_with(opts, files, chunk_bytes, 1)
}

/// [`lazy_read`] parsing `fan_out` pieces of a file at a time.
fn lazy_read_with(
    opts: &Arc<ParseOptions>,
    files: &[String],
    chunk_bytes: usize,
    fan_out: usize,
) -> (Outcome, Vec<RecordBatch>) {
    let counters = Arc::new(ReadCounters::default());
    let it = read_files_lazy(
        opts.clone(),
        files.to_vec(),
        "a test".to_string(),
        to_path,
        chunk_bytes,
        fan_out,
        counters.clone(),
    );
    let mut batches = Vec::new();
    let mut error = None;
    for b in it {
        match b {
            Ok(b) => {
                assert!(
                    b.num_rows() <= BATCH_ROWS,
                    "a batch of {} rows",
                    b.num_rows()
                );
                assert!(b.num_rows() > 0, "an empty batch");
                assert_eq!(b.schema(), opts.schema);
                batches.push(b);
            }
            Err(e) => {
                assert!(error.is_none(), "the iterator went on after an error");
                error = Some(e.to_string());
            }
        }
    }
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if let Some(e) = error {
        return (Err(e), batches);
    }
    assert_eq!(counters.rows.load(Ordering::Relaxed), total as u64);
    let outcome = Ok((
        one_batch(opts, &batches),
        counters.malformed.load(Ordering::Relaxed),
        counters.dropped.load(Ordering::Relaxed),
        counters.files_read.load(Ordering::Relaxed),
    ));
    (outcome, batches)
}

fn show(o: &Outcome) -> String {
    match o {
        Ok((b, m, d, f)) => format!(
            "rows {:?}, malformed {m}, dropped {d}, files {f}",
            rows(std::slice::from_ref(b))
        ),
        Err(e) => format!("error {e}"),
    }
}

/// The lazy reader with every piece size, one piece at a time and three at a time, and the batch
/// reader, give what the reference gives. Returns the reference outcome.
fn check(opts: &Arc<ParseOptions>, files: &[String]) -> Outcome {
    let want = reference_read(opts, files);
    let whole = whole_read(opts, files);
    assert_eq!(
        whole,
        want,
        "read_files_parallel: {} != {}",
        show(&whole),
        show(&want)
    );
    for chunk in CHUNKS {
        for fan_out in [1, 3] {
            let (got, _) = lazy_read_with(opts, files, chunk, fan_out);
            assert_eq!(
                got,
                want,
                "chunk_bytes {chunk}, fan_out {fan_out}: {} != {}",
                show(&got),
                show(&want)
            );
        }
    }
    want
}

/// A piece's lines counted without parsing are the lines the parser numbers, whatever the line
/// ends (`\n`, `\r\n`, a lone `\r`, a custom `lineSep`, none at the end) and empty lines.
#[test]
fn lines_counted_before_parsing_are_the_lines_parsed() {
    let texts = [
        "",
        "a",
        "a\n",
        "a\nb",
        "\n\n",
        "a\r\nb\r\n",
        "a\rb\r",
        "\r",
        "\r\n",
        "\n\r",
        "a\r\r\nb",
        "x||y||",
        "x||y",
        "||",
        "x|||y",
        "é\nü\r\n",
        "a\n\nb\r\r\n",
    ];
    for text in texts {
        for sep in [None, Some("||"), Some("\n")] {
            let parsed = for_each_line_from(text, sep, 0, |_, _| Ok(())).unwrap();
            let counted = count_lines(text.as_bytes(), sep.map(str::as_bytes));
            assert_eq!(counted, parsed, "{text:?} with lineSep {sep:?}");
        }
    }
}

/// One file larger than a piece, its pieces parsed three at a time: the same rows in the same
/// order, and a FAILFAST error names the line the record is on, as one piece at a time.
#[test]
fn a_large_file_parsed_pieces_at_a_time_keeps_rows_and_line_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for i in 0..5000 {
        let end = ["\n", "\r\n", "\r"][i % 3];
        text.push_str(&format!("{{\"id\": {i}, \"s\": \"v{i}\"}}{end}"));
        if i % 97 == 0 {
            // A blank line (a space, so that it never joins a `\r` before it into `\r\n`).
            text.push_str(" \n");
        }
    }
    let f = file(dir.path(), "big.json", text.as_bytes());
    let o = opts("json", "id INT, s STRING", &[]);
    let want = check(&o, std::slice::from_ref(&f));
    assert_eq!(counts(&want), (0, 0, 1));
    let (got, batches) = lazy_read_with(&o, std::slice::from_ref(&f), 4096, 3);
    assert_eq!(got, want);
    assert!(batches.len() > 3, "{} batches", batches.len());
    // A bad record far into the file.
    let bad = text.replacen("{\"id\": 4321,", "{\"id\": 4321 oops,", 1);
    let f = file(dir.path(), "bad.json", bad.as_bytes());
    let o = opts("json", "id INT, s STRING", &[("mode", "FAILFAST")]);
    let err = check(&o, std::slice::from_ref(&f)).unwrap_err();
    // 4321 records and a blank line after each of records 0, 97, .., 4268 come before it.
    let line = 4321 + (4268 / 97 + 1) + 1;
    assert!(err.contains(&format!("line {line} of")), "{err}");
}

fn file(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p.to_string_lossy().into_owned()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

fn ok_rows(o: &Outcome) -> Vec<Vec<Value>> {
    match o {
        Ok((b, ..)) => rows(std::slice::from_ref(b)),
        Err(e) => panic!("{e}"),
    }
}

fn counts(o: &Outcome) -> (u64, u64, u64) {
    match o {
        Ok((_, m, d, f)) => (*m, *d, *f),
        Err(e) => panic!("{e}"),
    }
}

const JSON: &str = "\u{feff}{\"id\": 1, \"name\": \"a\"}\r\n\
    {\"id\": 2, \"name\": \"é😀ü\"}\n\
    \n\
    not json\r\
    {\"id\": \"three\", \"name\": \"c\"}\n\
    [{\"id\": 4}, {\"id\": 5, \"name\": \"x\\ny\"}]\r\n\
    \u{feff}{\"id\": 6}\n\
    {\"id\": 7, \"name\": \"no newline at the end\"}";

#[test]
fn json_lines_permissive_and_dropmalformed() {
    let dir = tempfile::tempdir().unwrap();
    let a = file(dir.path(), "a.json", JSON.as_bytes());
    let b = file(
        dir.path(),
        "b.json",
        b"{\"id\": 8}\n\xff\xfe{\"id\": 9}\n{\"id\": 10}",
    );
    let files = vec![a, b];
    let schema = "id INT, name STRING, _corrupt_record STRING";
    let got = check(&opts("json", schema, &[]), &files);
    let rows = ok_rows(&got);
    assert_eq!(rows.len(), 11, "{rows:?}");
    assert_eq!(rows[0], vec![json!(1), json!("a"), Value::Null]);
    assert_eq!(rows[1][1], json!("é😀ü"));
    assert_eq!(rows[2], vec![Value::Null, Value::Null, json!("not json")]);
    assert_eq!(rows[3][2], json!("{\"id\": \"three\", \"name\": \"c\"}"));
    assert_eq!(rows[5][1], json!("x\ny"));
    // A byte order mark starts only a file: in the middle it is text (a malformed record).
    assert_eq!(rows[6][0], Value::Null);
    assert_eq!(counts(&got), (4, 0, 2));
    let got = check(&opts("json", schema, &[("mode", "DROPMALFORMED")]), &files);
    assert_eq!(ok_rows(&got).len(), 7);
    assert_eq!(counts(&got), (4, 4, 2));
}

#[test]
fn failfast_names_the_line_in_a_later_piece() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for i in 1..=60 {
        if i == 50 {
            text.push_str("{\"id\": broken\r\n");
        } else if i % 7 == 0 {
            text.push('\n');
        } else {
            text.push_str(&format!("{{\"id\": {i}}}\r\n"));
        }
    }
    let files = vec![
        file(dir.path(), "0.json", b"{\"id\": 0}\n"),
        file(dir.path(), "1.json", text.as_bytes()),
    ];
    let o = opts("json", "id INT", &[("mode", "FAILFAST")]);
    let err = check(&o, &files).unwrap_err();
    assert!(err.contains(&format!("line 50 of {}", files[1])), "{err}");
    // The rows before the bad line come out before the error.
    let (_, batches) = lazy_read(&o, &files, 64);
    let ids = rows(&batches).len();
    assert!((1..=49).contains(&ids), "{ids}");

    // CSV: the line count goes on across pieces (the header and blank lines count).
    let mut csv_text = String::from("\n# note\nid,name\n");
    for i in 4..=40 {
        if i == 33 {
            csv_text.push_str("x,bad\n");
        } else {
            csv_text.push_str(&format!("{i},n{i}\n"));
        }
    }
    let files = vec![file(dir.path(), "a.csv", csv_text.as_bytes())];
    let o = opts(
        "csv",
        "id INT, name STRING",
        &[("mode", "FAILFAST"), ("header", "true"), ("comment", "#")],
    );
    let err = check(&o, &files).unwrap_err();
    assert!(err.contains(&format!("line 33 of {}", files[0])), "{err}");
}

#[test]
fn csv_header_per_file_quotes_and_line_sep() {
    let dir = tempfile::tempdir().unwrap();
    let a = "\r\nid,name,n\r\n1,\"quoted, with a comma\",10\r\n2,\"say \\\"hi\\\"\",20\r\n\r\n3,,x\r\n4,plain";
    let b = "\u{feff}ID,Name,N\n5,\"\",50\n6,last,60\n";
    let files = vec![
        file(dir.path(), "a.csv", a.as_bytes()),
        file(dir.path(), "b.csv", b.as_bytes()),
    ];
    let schema = "id INT, name STRING, n INT, _corrupt_record STRING";
    let got = check(&opts("csv", schema, &[("header", "true")]), &files);
    let rows = ok_rows(&got);
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert_eq!(rows[0][1], json!("quoted, with a comma"));
    assert_eq!(rows[4][0], json!(5));
    assert_eq!(counts(&got), (2, 0, 2));
    // enforceSchema=false checks the header of every file, in whichever piece it is.
    let strict = opts(
        "csv",
        "id INT, name STRING, n INT",
        &[("header", "true"), ("enforceSchema", "false")],
    );
    assert_eq!(ok_rows(&check(&strict, &files)).len(), 6);
    let bad = file(dir.path(), "c.csv", b"\n\nid,nom,n\n7,a,1\n");
    let err = check(&strict, &[files[0].clone(), bad]).unwrap_err();
    assert!(err.contains("CSV header does not conform"), "{err}");
    // A custom line separator (one character for CSV).
    let c = "id,name,n;1,a;b,2;;3,\"x;y\",3;";
    let files = vec![file(dir.path(), "d.csv", c.as_bytes())];
    let got = check(
        &opts("csv", schema, &[("header", "true"), ("lineSep", ";")]),
        &files,
    );
    assert_eq!(ok_rows(&got).len(), 4);
    // Without a header, and DROPMALFORMED.
    let got = check(
        &opts("csv", "id INT, name STRING", &[("mode", "DROPMALFORMED")]),
        &[file(dir.path(), "e.csv", b"1,a\nx,b\n3,c\r4,d")],
    );
    assert_eq!(counts(&got), (1, 1, 1));
}

#[test]
fn text_lines_crlf_and_custom_separators() {
    let dir = tempfile::tempdir().unwrap();
    let t = "\u{feff}one\r\ntwo\rthree\n\nfour\r\n\r\nfive é\r";
    let files = vec![
        file(dir.path(), "a.txt", t.as_bytes()),
        file(dir.path(), "b.txt", b"six\r\n"),
        file(dir.path(), "c.txt", b""),
        file(dir.path(), "d.txt", b"\xef\xbb"),
    ];
    let got = check(&opts("text", "value STRING", &[]), &files);
    let values: Vec<Value> = ok_rows(&got).into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(
        values,
        vec![
            json!("one"),
            json!("two"),
            json!("three"),
            json!(""),
            json!("four"),
            json!(""),
            json!("five é"),
            json!("six"),
            json!("\u{fffd}"),
        ]
    );
    assert_eq!(counts(&got).2, 4);
    // Separators found left to right: `|||` is a separator then `|`.
    let files = vec![file(dir.path(), "e.txt", b"a|||b||||c||d\n||e|")];
    let got = check(&opts("text", "value STRING", &[("lineSep", "||")]), &files);
    let values: Vec<Value> = ok_rows(&got).into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(
        values,
        vec![
            json!("a"),
            json!("|b"),
            json!(""),
            json!("c"),
            json!("d\n"),
            json!("e|")
        ]
    );
    // A separator of multi-byte characters, and JSON with a custom separator.
    let files = vec![file(dir.path(), "f.txt", "aé¶bé¶é¶cé".as_bytes())];
    let got = check(&opts("text", "value STRING", &[("lineSep", "é¶")]), &files);
    assert_eq!(ok_rows(&got).len(), 4);
    let files = vec![file(
        dir.path(),
        "g.json",
        b"{\"id\": 1}\x1e{\"id\": 2}\n\x1ebad\x1e{\"id\": 3}",
    )];
    let got = check(
        &opts(
            "json",
            "id INT, _corrupt_record STRING",
            &[("lineSep", "\u{1e}")],
        ),
        &files,
    );
    assert_eq!(ok_rows(&got).len(), 4);
    // wholetext: one row per file.
    let got = check(
        &opts("text", "value STRING", &[("wholetext", "true")]),
        &files,
    );
    assert_eq!(ok_rows(&got).len(), 1);
}

#[test]
fn compressed_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for i in 0..500 {
        text.push_str(&format!("{{\"id\": {i}, \"name\": \"name {i}\"}}\n"));
    }
    let t = text.as_bytes();
    // Two gzip members, as `cat a.gz b.gz` makes.
    let gz = [gzip(&t[..1000]), gzip(&t[1000..])].concat();
    let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
    bz.write_all(t).unwrap();
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(t).unwrap();
    let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
    lz.write_all(t).unwrap();
    let mut sn = snap::write::FrameEncoder::new(Vec::new());
    sn.write_all(t).unwrap();
    let files = vec![
        file(dir.path(), "a.json.gz", &gz),
        file(dir.path(), "b.json.bz2", &bz.finish().unwrap()),
        file(dir.path(), "c.json.deflate", &z.finish().unwrap()),
        file(
            dir.path(),
            "d.json.zst",
            &zstd::stream::encode_all(t, 3).unwrap(),
        ),
        file(dir.path(), "e.json.lz4", &lz.finish().unwrap()),
        file(dir.path(), "f.json.snappy", &sn.into_inner().unwrap()),
        file(dir.path(), "g.json.lz4", &hadoop_framed(Codec::Lz4, t, 700)),
        file(
            dir.path(),
            "h.json.snappy",
            &hadoop_framed(Codec::Snappy, t, 900),
        ),
    ];
    let o = opts("json", "id INT, name STRING", &[]);
    for f in &files {
        let got = check(&o, std::slice::from_ref(f));
        assert_eq!(ok_rows(&got).len(), 500, "{f}");
    }
    assert_eq!(counts(&check(&o, &files)), (0, 0, 8));
}

/// Hadoop's block framing: blocks of `block` bytes, each in two chunks.
fn hadoop_framed(codec: Codec, data: &[u8], block: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for b in data.chunks(block) {
        out.extend((b.len() as u32).to_be_bytes());
        for c in b.chunks(b.len().div_ceil(2)) {
            let compressed = match codec {
                Codec::Lz4 => lz4_flex::block::compress(c),
                _ => snap::raw::Encoder::new().compress_vec(c).unwrap(),
            };
            out.extend((compressed.len() as u32).to_be_bytes());
            out.extend(compressed);
        }
    }
    out
}

#[test]
fn missing_and_unreadable_files() {
    let dir = tempfile::tempdir().unwrap();
    let a = file(dir.path(), "a.json", b"{\"id\": 1}\n");
    let gone = dir.path().join("gone.json").to_string_lossy().into_owned();
    let gone_gz = dir
        .path()
        .join("gone.json.gz")
        .to_string_lossy()
        .into_owned();
    let b = file(dir.path(), "b.json", b"{\"id\": 2}");
    let files = vec![a.clone(), gone, gone_gz, b.clone()];
    let err = check(&opts("json", "id INT", &[]), &files).unwrap_err();
    assert!(err.contains("does not exist any more"), "{err}");
    let got = check(
        &opts("json", "id INT", &[("ignoreMissingFiles", "true")]),
        &files,
    );
    assert_eq!(ok_rows(&got), vec![vec![json!(1)], vec![json!(2)]]);
    assert_eq!(counts(&got), (0, 0, 2));
    // A directory where a file was listed cannot be read: an error, or skipped.
    let sub = dir.path().join("sub.json");
    std::fs::create_dir(&sub).unwrap();
    let sub_gz = dir.path().join("sub.json.lz4");
    std::fs::create_dir(&sub_gz).unwrap();
    let sub_gz2 = dir.path().join("sub.json.gz");
    std::fs::create_dir(&sub_gz2).unwrap();
    for (s, format, schema) in [
        (&sub, "json", "id INT"),
        (&sub_gz2, "json", "id INT"),
        (&sub_gz, "json", "id INT"),
        (&sub, "text", "value STRING"),
        (&sub_gz, "csv", "id INT"),
    ] {
        let files = vec![a.clone(), s.to_string_lossy().into_owned(), b.clone()];
        let err = check(&opts(format, schema, &[]), &files).unwrap_err();
        assert!(err.contains("make the file readable"), "{err}");
        let got = check(
            &opts(format, schema, &[("ignoreCorruptFiles", "true")]),
            &files,
        );
        assert_eq!(counts(&got).2, 2);
        for ws in [("wholetext", "true"), ("multiLine", "true")] {
            if (format == "text") == (ws.0 == "wholetext") {
                let o = opts(format, schema, &[ws, ("ignoreCorruptFiles", "true")]);
                assert_eq!(counts(&check(&o, &files)).2, 2);
            }
        }
    }
}

#[test]
fn damaged_gzip_keeps_the_lines_before_the_damage() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for i in 0..2000 {
        text.push_str(&format!("{{\"id\": {i}}}\r\n"));
    }
    let gz = gzip(text.as_bytes());
    let good = file(dir.path(), "z.json", b"{\"id\": -1}\n");
    for cut in [
        5,
        30,
        gz.len() / 3,
        gz.len() / 2,
        gz.len() - 9,
        gz.len() - 1,
    ] {
        let bad = file(dir.path(), &format!("t{cut}.json.gz"), &gz[..cut]);
        let files = vec![bad.clone(), good.clone()];
        let err = check(&opts("json", "id INT", &[]), &files).unwrap_err();
        assert!(err.contains("is not valid gzip data"), "{err}");
        for (format, schema, extra) in [
            ("json", "id INT, _corrupt_record STRING", None),
            ("json", "id INT", Some(("multiLine", "true"))),
            ("csv", "id STRING", None),
            ("text", "value STRING", None),
            ("text", "value STRING", Some(("wholetext", "true"))),
        ] {
            let mut o = vec![("ignoreCorruptFiles", "true")];
            o.extend(extra);
            let got = check(&opts(format, schema, &o), &files);
            let n = ok_rows(&got).len();
            assert_eq!(counts(&got).2, 2, "{format} {extra:?} cut at {cut}");
            if format == "json" && extra.is_none() && cut > gz.len() / 3 {
                assert!(n > 100, "{n} rows kept from {cut} bytes");
            }
        }
    }
    // A file that is not gzip at all.
    let files = vec![file(dir.path(), "n.json.gz", b"{\"id\": 1}\n")];
    let got = check(
        &opts("json", "id INT", &[("ignoreCorruptFiles", "true")]),
        &files,
    );
    assert_eq!(ok_rows(&got).len(), 0);
    assert!(check(&opts("json", "id INT", &[]), &files).is_err());
}

#[test]
fn damaged_hadoop_framing_decodes_as_before() {
    let mut text = String::new();
    for i in 0..300 {
        text.push_str(&format!("line {i}\n"));
    }
    for codec in [Codec::Lz4, Codec::Snappy] {
        let framed = hadoop_framed(codec, text.as_bytes(), 500);
        for cut in (0..framed.len()).step_by(37).chain([framed.len()]) {
            let (got, err) = codec.decode_partial(&framed[..cut], "x");
            let (want, want_err) = old_hadoop_blocks(codec, &framed[..cut]);
            assert_eq!(got, want, "{codec:?} cut at {cut}");
            assert_eq!(
                err.map(|e| e.to_string()),
                want_err.map(|e| codec.damaged("x", &e).to_string()),
                "{codec:?} cut at {cut}"
            );
        }
    }
}

/// The whole-file decoder of Hadoop's block framing, as it was.
fn old_hadoop_blocks(codec: Codec, mut bytes: &[u8]) -> (Vec<u8>, Option<std::io::Error>) {
    let mut out = Vec::new();
    let bad = |what: &str| std::io::Error::new(ErrorKind::InvalidData, what.to_string());
    let u32_be = |b: &mut &[u8]| -> std::io::Result<usize> {
        if b.len() < 4 {
            return Err(bad("truncated block header"));
        }
        let v = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        *b = &b[4..];
        Ok(v)
    };
    let mut run = |out: &mut Vec<u8>| -> std::io::Result<()> {
        while !bytes.is_empty() {
            let block_len = u32_be(&mut bytes)?;
            let start = out.len();
            while out.len() - start < block_len {
                let chunk_len = u32_be(&mut bytes)?;
                if chunk_len > bytes.len() {
                    return Err(bad("truncated compressed chunk"));
                }
                let (chunk, rest) = bytes.split_at(chunk_len);
                bytes = rest;
                let before = out.len();
                match codec {
                    Codec::Lz4 => {
                        let left = block_len - (out.len() - start);
                        out.resize(before + left, 0);
                        let n = lz4_flex::block::decompress_into(chunk, &mut out[before..])
                            .map_err(|e| bad(&e.to_string()))?;
                        out.truncate(before + n);
                    }
                    _ => {
                        let n =
                            snap::raw::decompress_len(chunk).map_err(|e| bad(&e.to_string()))?;
                        out.resize(before + n, 0);
                        snap::raw::Decoder::new()
                            .decompress(chunk, &mut out[before..])
                            .map_err(|e| bad(&e.to_string()))?;
                    }
                }
                if out.len() == before {
                    return Err(bad("an empty compressed chunk"));
                }
            }
            if out.len() - start != block_len {
                return Err(bad("a block longer than its header says"));
            }
        }
        Ok(())
    };
    let r = run(&mut out);
    (out, r.err())
}

#[test]
fn a_piece_holds_about_chunk_bytes() {
    let dir = tempfile::tempdir().unwrap();
    // About 5 MB of lines of 60 to 100 bytes.
    let mut text = String::new();
    let mut i = 0u64;
    while text.len() < 5_000_000 {
        let pad = "x".repeat((i % 41) as usize);
        text.push_str(&format!("{{\"id\": {i:>12}, \"name\": \"{pad}\"}}\n"));
        i += 1;
    }
    let min_line = 35;
    let files = vec![
        file(dir.path(), "big.json", text.as_bytes()),
        file(dir.path(), "big.json.gz", &gzip(text.as_bytes())),
    ];
    let o = opts("json", "id BIGINT, name STRING", &[]);
    let chunk = 64 << 10;
    for f in &files {
        let (got, batches) = lazy_read(&o, std::slice::from_ref(f), chunk);
        let (all, ..) = got.unwrap();
        assert_eq!(all.num_rows() as u64, i);
        assert!(
            batches.len() >= 5_000_000 / chunk,
            "{} batches",
            batches.len()
        );
        // Every batch comes from one piece of at most `chunk` bytes.
        for b in &batches {
            assert!(
                b.num_rows() <= chunk / min_line + 1,
                "{} rows",
                b.num_rows()
            );
        }
        let (want, ..) = whole_read(&o, std::slice::from_ref(f)).unwrap();
        assert_eq!(all, want);
    }
    // A record longer than a piece is read whole.
    let long = format!(
        "{{\"id\": 1}}\n{{\"id\": 2, \"name\": \"{}\"}}\n{{\"id\": 3}}",
        "y".repeat(300_000)
    );
    let files = vec![file(dir.path(), "long.json", long.as_bytes())];
    let (got, batches) = lazy_read(&o, &files, chunk);
    assert_eq!(got.unwrap().0.num_rows(), 3);
    assert!(batches.len() >= 2, "{} batches", batches.len());
}

#[test]
fn parquet_batches_come_as_decoded() {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]));
    let path = dir.path().join("a.parquet");
    let props = ::parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(1000))
        .build();
    let mut w = ::parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        schema.clone(),
        Some(props),
    )
    .unwrap();
    let n = 20_000i64;
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from((0..n).collect::<Vec<_>>())),
            Arc::new(StringArray::from(
                (0..n).map(|i| format!("n{i}")).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let files = vec![
        path.to_string_lossy().into_owned(),
        dir.path()
            .join("gone.parquet")
            .to_string_lossy()
            .into_owned(),
    ];
    let o = opts(
        "parquet",
        "id BIGINT, name STRING",
        &[("ignoreMissingFiles", "true")],
    );
    let (got, batches) = lazy_read(&o, &files, 1);
    assert_eq!(got, whole_read(&o, &files));
    assert_eq!(counts(&got), (0, 0, 1));
    let sizes: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
    assert_eq!(sizes, vec![BATCH_ROWS, BATCH_ROWS, 20_000 - 2 * BATCH_ROWS]);

    // On an object store, a row group's columns at a time (one column of two read here).
    let root = format!("memory://lazy-pq-{}", uuid::Uuid::new_v4().simple());
    crate::storage::register_store(&root, Arc::new(object_store::memory::InMemory::new()));
    let remote = format!("{root}/t/a.parquet");
    crate::storage::write(Path::new(&remote), std::fs::read(&path).unwrap()).unwrap();
    let files = vec![remote, format!("{root}/t/gone.parquet")];
    for schema in ["id BIGINT, name STRING", "name STRING", "nothing INT"] {
        let o = opts("parquet", schema, &[("ignoreMissingFiles", "true")]);
        let local = vec![path.to_string_lossy().into_owned()];
        let (want, _) = lazy_read(&o, &local, 1);
        let (got, batches) = lazy_read(&o, &files, 1);
        assert_eq!(got, want, "{schema}");
        assert_eq!(batches.len(), 20, "a batch per row group");
    }
    let o = opts("parquet", "id BIGINT", &[]);
    let err = lazy_read(&o, &files, 1).0.unwrap_err();
    assert!(err.contains("does not exist any more"), "{err}");
    let bad = format!("{root}/t/bad.parquet");
    crate::storage::write(Path::new(&bad), b"not parquet at all").unwrap();
    let err = lazy_read(&o, std::slice::from_ref(&bad), 1).0.unwrap_err();
    assert!(
        err.contains("CANNOT_READ_PARQUET_FILE") || err.contains("cannot read the Parquet file"),
        "{err}"
    );
    let o = opts("parquet", "id BIGINT", &[("ignoreCorruptFiles", "true")]);
    assert_eq!(counts(&lazy_read(&o, &[bad], 1).0), (0, 0, 0));
}

#[test]
fn object_store_files_read_by_ranges() {
    let root = format!("memory://lazy-{}", uuid::Uuid::new_v4().simple());
    crate::storage::register_store(&root, Arc::new(object_store::memory::InMemory::new()));
    // More than one 8 MiB request's worth, with a line across the boundary.
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 9 << 20 {
        text.push_str(&format!(
            "{{\"id\": {i}, \"name\": \"{}\"}}\r\n",
            "n".repeat(i % 50)
        ));
        i += 1;
    }
    let big = format!("{root}/in/big.json");
    crate::storage::write(Path::new(&big), text.as_bytes()).unwrap();
    let gz = format!("{root}/in/small.json.gz");
    crate::storage::write(Path::new(&gz), gzip(b"{\"id\": -1}\n{\"id\": -2}")).unwrap();
    let gone = format!("{root}/in/gone.json");
    let o = opts(
        "json",
        "id INT, name STRING",
        &[("ignoreMissingFiles", "true")],
    );
    let files = vec![big, gone, gz];
    let want = reference_read(&o, &files);
    assert_eq!(counts(&want), (0, 0, 2));
    let (got, batches) = lazy_read(&o, &files, 1 << 20);
    assert_eq!(got, want);
    assert!(batches.len() > 9);
    assert_eq!(whole_read(&o, &files), want);
}

#[test]
fn a_multiline_csv_read_whole_still_skips_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let a = file(dir.path(), "a.csv", b"id,note\n1,\"two\nlines\"\n2,plain\n");
    let b = file(dir.path(), "b.csv", b"id,note\n3,x\n");
    let o = opts(
        "csv",
        "id INT, note STRING",
        &[("header", "true"), ("multiLine", "true")],
    );
    let got = check(&o, &[a, b]);
    assert_eq!(
        ok_rows(&got),
        vec![
            vec![json!(1), json!("two\nlines")],
            vec![json!(2), json!("plain")],
            vec![json!(3), json!("x")]
        ]
    );
}
