//! `sluice run --ui`: the dashboard under load (issue 18 part 9). The real binary runs a small
//! pipeline with `--ui 127.0.0.1:0` while this test, on 127.0.0.1 only and for a bounded time,
//! holds 5,000 idle connections, sends huge headers, asks for the whole history without ever
//! reading it and sends heads a byte at a time. Throughout, a fresh client must be answered
//! quickly, and the process must stay under a fixed memory and thread bound.
//! `benches/dashboard_load.sh` runs it and prints the figures.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Idle connections held open at once.
const IDLE: usize = 5_000;
/// The bounds the process must stay under.
const MAX_RSS_KIB: u64 = 200 * 1024;
const MAX_THREADS: u64 = 64;
/// The longest a fresh client may wait for `/api/progress` under load.
const MAX_LATENCY: Duration = Duration::from_secs(2);

/// `(VmRSS in KiB, Threads)` of process `pid`.
fn rss_and_threads(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("Threads:"))
}

/// `GET path` on a fresh connection: (status line, body, time to the complete answer).
fn get(host: &str, path: &str) -> Result<(String, String, Duration), String> {
    let started = Instant::now();
    let mut s = TcpStream::connect(host).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)
        .map_err(|e| format!("read: {e} after {:?}", started.elapsed()))?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("not an HTTP answer: {raw:?}"))?;
    let status = head.lines().next().unwrap_or_default().to_string();
    Ok((status, body.to_string(), started.elapsed()))
}

/// A connection with the smallest receive buffer, asking `n` times for the whole history and
/// reading none of it.
fn non_reader(host: &str, n: usize) -> Option<TcpStream> {
    use std::os::fd::AsRawFd;
    let s = TcpStream::connect(host).ok()?;
    let size: libc::c_int = 1;
    // SAFETY: a valid socket and a pointer to a c_int of the size given.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    let request = format!("GET /api/progress HTTP/1.1\r\nHost: {host}\r\n\r\n");
    (&s).write_all(request.repeat(n).as_bytes()).ok()?;
    Some(s)
}

/// A pipeline that runs until stopped: ten rows of `rate-micro-batch` every 100 ms into `noop`,
/// its checkpoint given as `--set checkpoint=...`.
fn rate_pipeline(root: &std::path::Path) -> std::path::PathBuf {
    let file = root.join("rate.sql");
    std::fs::write(
        &file,
        "CREATE TABLE ticks (timestamp TIMESTAMP, value BIGINT) \
         WITH (connector = 'rate-micro-batch', rowsPerBatch = '10');\n\
         CREATE SINK out WITH (connector = 'noop', 'trigger' = 'processing-time 100 milliseconds', \
         checkpoint = '${checkpoint}') AS SELECT value FROM ticks;\n",
    )
    .unwrap();
    file
}

#[test]
fn the_dashboard_under_load_answers_within_bounds() {
    let root = tempfile::tempdir().unwrap();
    let file = rate_pipeline(root.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", &file.display().to_string(), "--progress", "none"])
        .args(["--ui", "127.0.0.1:0"])
        .arg("--set")
        .arg(format!("checkpoint={}", root.path().join("ckpt").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("sluice ended before announcing its dashboard")
            .unwrap();
        if let Some(rest) = line.split("dashboard at ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // The rest of stderr, drained so the child never blocks on it.
    let stderr = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((_, body, _)) = get(&host, "/api/progress") {
            if body.contains("\"batchId\"") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no batch within a minute");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (rss0, threads0) = rss_and_threads(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let attack_for = Duration::from_secs(8);
    // Bytes of header written (into socket buffers) and connections, until each was cut off.
    let huge_bytes = Arc::new(AtomicU64::new(0));
    let huge_conns = Arc::new(AtomicU64::new(0));
    let mut attackers = Vec::new();
    // 8 clients sending 64 MiB headers, again and again.
    for _ in 0..8 {
        let (host, stop) = (host.clone(), stop.clone());
        let (huge_bytes, huge_conns) = (huge_bytes.clone(), huge_conns.clone());
        attackers.push(std::thread::spawn(move || {
            let chunk = vec![b'a'; 64 * 1024];
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(&host) else {
                    continue;
                };
                s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
                if s.write_all(b"GET /api/progress HTTP/1.1\r\nX-Huge: ")
                    .is_err()
                {
                    continue;
                }
                let mut sent = 0u64;
                while sent < 64 << 20 && !stop.load(Ordering::Relaxed) {
                    match s.write(&chunk) {
                        Ok(n) => sent += n as u64,
                        Err(_) => break,
                    }
                }
                huge_bytes.fetch_add(sent, Ordering::Relaxed);
                huge_conns.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // 8 heads sent a byte every 50 ms (slowloris), reconnecting when closed.
    for _ in 0..8 {
        let (host, stop) = (host.clone(), stop.clone());
        attackers.push(std::thread::spawn(move || {
            let head =
                b"GET /api/progress HTTP/1.1\r\nHost: slow\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa";
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(&host) else {
                    continue;
                };
                for b in head.iter().cycle() {
                    if stop.load(Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }));
    }
    // 4 clients asking for the history 50 times and never reading, renewed every second.
    {
        let (host, stop) = (host.clone(), stop.clone());
        attackers.push(std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                held.truncate(16);
                for _ in 0..4 {
                    held.extend(non_reader(&host, 50));
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }));
    }
    // 5,000 idle connections (the server closes the oldest beyond its cap; they stay open here).
    let idle = {
        let (host, stop) = (host.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut idle = Vec::with_capacity(IDLE);
            while idle.len() < IDLE && !stop.load(Ordering::Relaxed) {
                match TcpStream::connect(&host) {
                    Ok(s) => idle.push(s),
                    Err(e) => panic!("connection {} of {IDLE}: {e}", idle.len()),
                }
            }
            idle
        })
    };

    let started = Instant::now();
    let (mut max_rss, mut max_threads) = (rss0, threads0);
    let mut latencies = Vec::new();
    while started.elapsed() < attack_for {
        let (status, body, took) = get(&host, "/api/progress")
            .unwrap_or_else(|e| panic!("no answer under load after {:?}: {e}", started.elapsed()));
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert!(body.contains("\"batchId\""), "{body}");
        latencies.push(took);
        let (rss, threads) = rss_and_threads(pid);
        max_rss = max_rss.max(rss);
        max_threads = max_threads.max(threads);
        std::thread::sleep(Duration::from_millis(100));
    }
    let idle = idle.join().unwrap();
    let idle_opened = idle.len();
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().unwrap();
    }
    let (status, _, after) = get(&host, "/api/progress").expect("no answer after the load");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    drop(idle);
    let (rss_end, threads_end) = rss_and_threads(pid);
    max_rss = max_rss.max(rss_end);
    max_threads = max_threads.max(threads_end);

    let _ = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    let exit = child.wait().unwrap();
    let stderr = stderr.join().unwrap();

    latencies.sort();
    let p50 = latencies[latencies.len() / 2];
    let max = *latencies.last().unwrap();
    let (huge_n, huge_mib) = (
        huge_conns.load(Ordering::Relaxed).max(1),
        huge_bytes.load(Ordering::Relaxed) >> 20,
    );
    eprintln!(
        "dashboard under load for {attack_for:?}: {idle_opened} idle connections, 8 huge-header \
         senders ({huge_n} connections cut off after {} MiB each on average, socket buffers \
         included), 8 slowloris, 4 clients never reading; {} requests answered, latency p50 \
         {p50:?} max {max:?}, after the load {after:?}; sluice RSS {} MiB before, {} MiB max, \
         {} MiB after; threads {threads0} before, {max_threads} max, {threads_end} after",
        huge_mib / huge_n,
        latencies.len(),
        rss0 / 1024,
        max_rss / 1024,
        rss_end / 1024,
    );
    assert_eq!(
        idle_opened, IDLE,
        "the idle connections were not all opened"
    );
    assert!(max < MAX_LATENCY, "a request took {max:?} under load");
    assert!(
        max_rss < MAX_RSS_KIB,
        "sluice reached {} MiB under load",
        max_rss / 1024
    );
    assert!(
        max_threads < MAX_THREADS,
        "sluice ran {max_threads} threads under load"
    );
    assert!(exit.success(), "{exit}\n{}", stderr.join("\n"));
}

/// `--ui 0.0.0.0:PORT` is refused without a token, saying how to give one; with
/// `SLUICE_UI_TOKEN` (or `--ui-token`) it serves, and every request needs the token.
#[test]
fn a_dashboard_beyond_loopback_needs_a_token() {
    let root = tempfile::tempdir().unwrap();
    let file = rate_pipeline(root.path());
    let run = |token_flag: Option<&str>, token_env: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.args(["run", &file.display().to_string(), "--progress", "none"])
            .args(["--ui", "0.0.0.0:0"])
            .arg("--set")
            .arg(format!("checkpoint={}", root.path().join("ckpt").display()))
            .env_remove("SLUICE_UI_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(t) = token_flag {
            c.args(["--ui-token", t]);
        }
        if let Some(t) = token_env {
            c.env("SLUICE_UI_TOKEN", t);
        }
        c
    };
    let refused = run(None, None).output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    for part in [
        "--ui 0.0.0.0:0",
        "--ui-token TOKEN",
        "SLUICE_UI_TOKEN",
        "127.0.0.1:PORT",
    ] {
        assert!(stderr.contains(part), "{part:?} not in {stderr}");
    }

    for (flag, env) in [(Some("flag-token"), None), (None, Some("flag-token"))] {
        let mut child = run(flag, env).spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let line = loop {
            let line = lines
                .next()
                .expect("sluice ended before announcing its dashboard")
                .unwrap();
            if line.contains("dashboard at ") {
                break line;
            }
        };
        // The URL to open here, and the address really bound.
        assert!(line.contains("listening on 0.0.0.0:"), "{line}");
        let url = line.split("dashboard at ").nth(1).unwrap();
        let host = url
            .split_whitespace()
            .next()
            .unwrap()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let (status, _, _) = get(&host, "/metrics").unwrap();
        assert!(status.starts_with("HTTP/1.1 401"), "{status}");
        let (status, _, _) = get(&host, "/metrics?token=flag-token").unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        assert!(child.wait().unwrap().success());
    }
}
