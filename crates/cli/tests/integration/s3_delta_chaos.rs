//! A file -> Delta pipeline entirely on S3 (the local S3 server of `scripts/s3-server start`,
//! `$SLUICE_S3_ENDPOINT`): input files, the checkpoint and the table in one bucket. `sluice run`
//! is SIGKILLed 30 times at random moments while files keep arriving, and restarted each time
//! on the same checkpoint (the lease of a killed process on this machine is taken over at once).
//! At the end the table holds every input row exactly once, read by the Python `deltalake`
//! package (`$SLUICE_TEST_PYTHON`, the venv of scripts/connect-venv), not by Sluice. The seed is
//! printed; replay with `SLUICE_CHAOS_SEED=<seed>`. The test name contains `s3`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{chaos_rng, endpoint, new_bucket, S3A};

fn pipeline(bucket: &str) -> String {
    let mut sql = format!("SET 'spark.hadoop.fs.s3a.endpoint' = '{}';\n", endpoint());
    for (k, v) in S3A {
        sql.push_str(&format!("SET 'spark.hadoop.{k}' = '{v}';\n"));
    }
    sql.push_str(&format!(
        "CREATE TABLE events (id BIGINT, user STRING) WITH (connector = 'filesystem', \
         path = 's3a://{bucket}/in', format = 'json', maxFilesPerTrigger = '2');\n\
         CREATE SINK t WITH (connector = 'delta', path = 's3a://{bucket}/table', \
         checkpoint = 's3a://{bucket}/ck', 'partitionBy' = 'user', trigger = '${{trigger}}') AS \
         SELECT id, user FROM events;\n"
    ));
    sql
}

#[test]
fn s3_file_to_delta_keeps_every_row_exactly_once_across_30_sigkills() {
    let python = std::env::var("SLUICE_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("$SLUICE_TEST_PYTHON is not set: scripts/test sets it (the venv with Python deltalake, scripts/connect-venv)")
    });
    let mut rng = chaos_rng();
    let seed = rng.0;
    let bucket = new_bucket("chaos");
    let conf: BTreeMap<String, String> = S3A
        .iter()
        .map(|(k, v)| (format!("spark.hadoop.{k}"), v.to_string()))
        .chain([("spark.hadoop.fs.s3a.endpoint".to_string(), endpoint())])
        .collect();
    sluice::storage::configure(conf.iter());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("chaos.sql");
    std::fs::write(&file, pipeline(&bucket)).unwrap();
    let run = |trigger: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.arg("run")
            .arg(&file)
            .arg("--set")
            .arg(format!("trigger={trigger}"));
        c.stdout(Stdio::null()).stderr(Stdio::piped());
        c
    };
    let mut id = 0i64;
    for k in 0..30 {
        let mut body = String::new();
        for _ in 0..10 {
            body.push_str(&format!(
                "{{\"id\": {id}, \"user\": \"u{}\"}}\n",
                rng.next() % 3
            ));
            id += 1;
        }
        let path = format!("s3a://{bucket}/in/{k:04}.json");
        sluice::storage::write(Path::new(&path), body.as_bytes()).unwrap();
        let mut child = run("processing-time 100 milliseconds").spawn().unwrap();
        std::thread::sleep(Duration::from_millis(150 + rng.next() % 700));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let commits = sluice::storage::list_dir(Path::new(&format!("s3a://{bucket}/ck/commits")))
        .map(|d| d.len())
        .unwrap_or(0);
    println!("30 kills, {commits} batches committed by the killed processes");
    assert!(
        commits > 0,
        "no killed process committed a batch: the kills came too early"
    );
    let out = run("available-now").output().unwrap();
    assert!(
        out.status.success(),
        "the final available-now run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Read by Python deltalake, on the same server.
    let script = format!(
        "import deltalake, json\n\
         dt = deltalake.DeltaTable('s3://{bucket}/table', storage_options={{\
         'AWS_ENDPOINT_URL': '{ep}', 'AWS_ACCESS_KEY_ID': 'test', 'AWS_SECRET_ACCESS_KEY': 'test', \
         'AWS_REGION': 'us-east-1', 'AWS_ALLOW_HTTP': 'true'}})\n\
         print(json.dumps(sorted(dt.to_pyarrow_table().column('id').to_pylist())), flush=True)\n\
         import os; os._exit(0)  # pyarrow's S3 client can abort at interpreter exit\n",
        ep = endpoint()
    );
    let py = Command::new(&python)
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "Python deltalake could not read the table: {}",
        String::from_utf8_lossy(&py.stderr)
    );
    let ids: Vec<i64> = serde_json::from_slice(&py.stdout).unwrap();
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for i in &ids {
        *counts.entry(*i).or_default() += 1;
    }
    let dupes: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dupes.is_empty(), "seed {seed}: duplicated ids {dupes:?}");
    assert_eq!(
        ids,
        (0..id).collect::<Vec<_>>(),
        "seed {seed}: every row once"
    );
}
