//! Helpers shared by the integration tests of the `sluice` command (`tests/integration/`).

use std::path::Path;
use std::time::{Duration, SystemTime};

use sluice::Session;

/// Adds a file to `dir` atomically: written beside `dir` under a hidden name, then renamed in.
///
/// `seq: Some(n)` (or just `n`) sets its modification time `n` seconds after a fixed base (an
/// hour ago), so files are ordered by `n` whenever they were written. `None` keeps the time it
/// was written at, and waits 20 ms after the rename so that files added one after another have
/// increasing modification times.
pub fn add_file(dir: &Path, name: &str, body: &str, seq: impl Into<Option<u64>>) {
    std::fs::create_dir_all(dir).unwrap();
    let tmp = dir.parent().unwrap().join(format!(".staging-{name}"));
    std::fs::write(&tmp, body).unwrap();
    let seq = seq.into();
    if let Some(seq) = seq {
        let t = SystemTime::now() - Duration::from_secs(3600) + Duration::from_secs(seq);
        std::fs::File::options()
            .write(true)
            .open(&tmp)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    std::fs::rename(&tmp, dir.join(name)).unwrap();
    if seq.is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A session with two shuffle partitions.
pub fn session() -> Session {
    Session::builder().shuffle_partitions(2).build().unwrap()
}

/// `{"ts": "2026-09-15T<t>:00Z"}` lines, one per `hh:mm`.
pub fn ts_events(times: &[&str]) -> String {
    times
        .iter()
        .map(|t| format!("{{\"ts\": \"2026-09-15T{t}:00Z\"}}\n"))
        .collect()
}

/// A chaos test's seed: `$SLUICE_CHAOS_SEED`, or the clock (never 0).
pub fn chaos_seed() -> u64 {
    std::env::var("SLUICE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        .max(1)
}

/// A random generator for a chaos test, seeded by [`chaos_seed`]; the seed is printed so that a
/// failure can be replayed.
#[cfg(any(feature = "delta", feature = "distributed"))]
pub fn chaos_rng() -> Rng {
    let seed = chaos_seed();
    println!("chaos seed {seed} (replay with SLUICE_CHAOS_SEED={seed})");
    Rng(seed)
}

/// A xorshift generator: the chaos tests' random kill times and inputs, replayable by seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[cfg(any(feature = "delta", feature = "distributed"))]
/// The local S3 server (`scripts/s3-server start`): `$SLUICE_S3_ENDPOINT`.
pub fn endpoint() -> String {
    std::env::var("SLUICE_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9000".into())
}

#[cfg(any(feature = "delta", feature = "distributed"))]
/// A new bucket on the local S3 server, named `<prefix>-<pid>`.
pub fn new_bucket(prefix: &str) -> String {
    use std::io::{Read, Write};
    let ep = endpoint();
    let addr = ep
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let Ok(mut s) = std::net::TcpStream::connect(&addr) else {
        panic!("no S3 server answers at {ep}: run `scripts/s3-server start` first (the README's test command does)");
    };
    let b = format!("{prefix}-{}", std::process::id());
    write!(
        s,
        "PUT /{b} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    b
}

#[cfg(any(feature = "delta", feature = "distributed"))]
/// The Hadoop keys (after `spark.hadoop.`) of the local S3 server's test account.
pub const S3A: [(&str, &str); 4] = [
    ("fs.s3a.access.key", "test"),
    ("fs.s3a.secret.key", "test"),
    ("fs.s3a.path.style.access", "true"),
    ("fs.s3a.endpoint.region", "us-east-1"),
];
