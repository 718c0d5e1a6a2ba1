//! The librdkafka client context of every Kafka client Sluice creates (the source's consumer, the
//! sink's producer and its exactly-once marker consumer): librdkafka's log lines and global
//! errors go to the `log` crate (target `librdkafka`), so a wrong `kafka.bootstrap.servers` says
//! `Connect to ipv4#127.0.0.1:1 failed: Connection refused` as a warning at once instead of
//! nothing until the 30 s metadata timeout.
//!
//! Levels: librdkafka's emerg/alert/critical are `error`, its error and warning lines `warn`
//! (connection failures are retried, so they are warnings), notice/info `info`, debug `debug`.
//!
//! rust-rdkafka queues librdkafka's log lines on the client's main queue, served only when the
//! client is polled, and a consumer blocked in a metadata request polls nothing: its logs came
//! out when it was dropped. [`Logged`] gives a consumer a log queue of its own, served by a
//! thread for as long as the consumer lives. (A `ThreadedProducer` polls its main queue from its
//! own thread already.)
//!
//! A broker failure reaches both callbacks (a `FAIL` log line, then the same text as a global
//! error when the client is polled, and `AllBrokersDown` after each failed attempt): it is warned
//! once, from the log line; the global errors of the same failure are debug lines.
//!
//! A refused login (SASL `Authentication failed ... invalid credentials with SASL mechanism
//! SCRAM-SHA-256`) or a failed TLS handshake is retried by librdkafka forever, so a client call
//! waits out its whole timeout. The context keeps the first such failure
//! ([`KafkaLogContext::refused`]) and [`within`] runs a client call in short slices, failing as
//! soon as one is recorded: a wrong password fails in about a second, naming the broker.
//!
//! Every text it logs or keeps goes through [`crate::redact::redact_text`]: a secret setting's
//! value is never printed, whatever librdkafka writes.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

const TARGET: &str = "librdkafka";

/// Forwards librdkafka's logs and errors to the `log` crate, keeps the first refused login or
/// TLS handshake (see the module doc) and counts the records a producer failed to deliver
/// (`flush` succeeds once no record is pending, delivered or not: the sink checks
/// [`KafkaLogContext::take_undelivered`] after it).
#[derive(Debug, Clone, Default)]
pub struct KafkaLogContext {
    refused: Refused,
    undelivered: Arc<Mutex<(u64, Option<String>)>>,
}

/// The first refused login or TLS handshake of one client, as librdkafka reported it.
type Refused = Arc<Mutex<Option<String>>>;

impl KafkaLogContext {
    /// The broker's refusal of this client's credentials or TLS handshake, if one came, as
    /// librdkafka wrote it (it names the broker and the SASL mechanism, never the secret).
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().ok().and_then(|r| r.clone())
    }

    /// How many records failed delivery since the last call, and the first failure's error.
    pub fn take_undelivered(&self) -> (u64, Option<String>) {
        self.undelivered
            .lock()
            .map(|mut u| std::mem::take(&mut *u))
            .unwrap_or_default()
    }
}

/// Whether a librdkafka failure text is a refused login or TLS handshake (not a connection
/// failure, which is retried and may heal).
fn is_refusal(text: &str) -> bool {
    text.contains("SASL authentication error")
        || text.contains("Authentication failed")
        || text.contains("SSL handshake failed")
}

fn record(refused: &Refused, text: &str) {
    if let Ok(mut r) = refused.lock() {
        if r.is_none() {
            *r = Some(text.to_string());
        }
    }
}

/// How a client call run by [`within`] failed.
#[derive(Debug)]
pub enum Failure {
    /// The broker refused the client's credentials or TLS handshake (librdkafka's text).
    Refused(String),
    /// The call failed otherwise (or timed out).
    Kafka(KafkaError),
}

/// Runs `call` (a blocking client call given its timeout) in slices of at most a second until it
/// succeeds, fails with another error than a timeout, or `total` has passed; fails at once when
/// the client's broker refused its credentials (see the module doc).
pub fn within<T>(
    context: &KafkaLogContext,
    total: Duration,
    mut call: impl FnMut(Duration) -> KafkaResult<T>,
) -> Result<T, Failure> {
    let deadline = Instant::now() + total;
    loop {
        if let Some(text) = context.refused() {
            return Err(Failure::Refused(text));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match call(left.min(Duration::from_secs(1))) {
            Ok(v) => return Ok(v),
            Err(e) if is_timeout(&e) && !left.is_zero() && Instant::now() < deadline => {}
            Err(e) => {
                return Err(match context.refused() {
                    Some(text) => Failure::Refused(text),
                    None => Failure::Kafka(e),
                })
            }
        }
    }
}

/// Whether a client call failed because no broker answered (timed out, connection lost): what a
/// broker restart looks like to the client.
pub(crate) fn is_unreachable(e: &KafkaError) -> bool {
    is_timeout(e)
        || matches!(
            e.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::BrokerTransportFailure
                    | RDKafkaErrorCode::AllBrokersDown
                    | RDKafkaErrorCode::BrokerNotAvailable
                    | RDKafkaErrorCode::LeaderNotAvailable
                    | RDKafkaErrorCode::NotLeaderForPartition
                    // A partition whose broker is shutting down has no leader for a moment.
                    | RDKafkaErrorCode::UnknownPartition
            )
        )
}

fn is_timeout(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::TimedOutQueue
        )
    ) || e.to_string().contains("timed out")
}

/// `[thrd:main]: text` -> `text` (librdkafka prefixes its thread's name).
fn without_thread(msg: &str) -> &str {
    match msg.strip_prefix("[thrd:").and_then(|m| m.split_once("]: ")) {
        Some((_, rest)) => rest,
        None => msg,
    }
}

/// One librdkafka log line (`level` is syslog's: 0 emerg .. 7 debug); a refused login is kept in
/// `refused`.
fn emit(level: i32, fac: &str, log_message: &str, refused: &Refused) {
    // Secrets are never printed (librdkafka's `debug` lines may show settings).
    let msg = crate::redact::redact_text(without_thread(log_message));
    let msg = msg.as_ref();
    if fac == "FAIL" && is_refusal(msg) {
        record(refused, msg);
    }
    match level {
        i32::MIN..=2 => log::error!(target: TARGET, "Kafka client: {msg} ({fac})"),
        3 | 4 => log::warn!(target: TARGET, "Kafka client: {msg} ({fac})"),
        5 | 6 => log::info!(target: TARGET, "Kafka client: {msg} ({fac})"),
        _ => log::debug!(target: TARGET, "Kafka client: {msg} ({fac})"),
    }
}

impl ClientContext for KafkaLogContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        emit(level as i32, fac, log_message, &self.refused);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let reason = crate::redact::redact_text(reason);
        let reason = reason.as_ref();
        let code = error.rdkafka_error_code();
        let error = crate::redact::redact_text(&error.to_string()).into_owned();
        if matches!(
            code,
            Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SSL)
        ) && is_refusal(reason)
        {
            record(&self.refused, without_thread(reason));
        }
        match code {
            // Broker failures were logged as a FAIL line already (see the module doc).
            Some(
                RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SSL
                // The end of a partition, which the source asks to be told (not an error).
                | RDKafkaErrorCode::PartitionEOF,
            ) => log::debug!(target: TARGET, "Kafka client error: {error}: {reason}"),
            Some(RDKafkaErrorCode::Fatal) => {
                log::error!(target: TARGET, "Kafka client error: {error}: {reason}")
            }
            _ => log::warn!(target: TARGET, "Kafka client error: {error}: {reason}"),
        }
    }
}

impl ConsumerContext for KafkaLogContext {}

impl ProducerContext for KafkaLogContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {
        if let Err((e, msg)) = result {
            if let Ok(mut u) = self.undelivered.lock() {
                u.0 += 1;
                if u.1.is_none() {
                    u.1 = Some(
                        crate::redact::redact_text(&format!(
                            "{e} (topic {}, partition {})",
                            msg.topic(),
                            msg.partition()
                        ))
                        .into_owned(),
                    );
                }
            }
        }
    }
}

/// A Kafka consumer whose log lines are printed as they come, also while it blocks (see the
/// module doc). Derefs to the consumer.
pub struct Logged<T> {
    // Declared first, so dropped first: the log queue goes while the client still exists.
    _forwarder: Forwarder,
    client: T,
}

impl Logged<BaseConsumer<KafkaLogContext>> {
    /// Wraps `consumer`, starting its log forwarder.
    pub fn new(consumer: BaseConsumer<KafkaLogContext>) -> Self {
        Self {
            _forwarder: Forwarder::start(
                consumer.client().native_ptr(),
                consumer.context().refused.clone(),
            ),
            client: consumer,
        }
    }
}

impl<T> std::ops::Deref for Logged<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.client
    }
}

/// A raw librdkafka pointer handed to the forwarding thread.
struct Ptr<T>(*mut T);
// SAFETY: librdkafka handles and queues may be used from any thread; the forwarder keeps the
// queue alive until its thread has been joined.
unsafe impl<T> Send for Ptr<T> {}

/// The log queue of one client and the thread that serves it.
struct Forwarder {
    rk: *mut rd::rd_kafka_t,
    queue: *mut rd::rd_kafka_queue_t,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    refused: Refused,
}

// SAFETY: see `Ptr`; the pointers are only used by `drop`, after the thread has ended.
unsafe impl Send for Forwarder {}
// SAFETY: as for `Send`: no method reads the pointers through a shared reference.
unsafe impl Sync for Forwarder {}

/// Serves the events waiting on `queue` for up to `timeout_ms` (then until none is waiting);
/// logs the log lines among them.
///
/// # Safety
/// `queue` must be a live librdkafka queue.
unsafe fn serve(queue: *mut rd::rd_kafka_queue_t, mut timeout_ms: c_int, refused: &Refused) {
    loop {
        // SAFETY: the caller keeps `queue` alive; an event returned is ours until destroyed.
        let ev = unsafe { rd::rd_kafka_queue_poll(queue, timeout_ms) };
        if ev.is_null() {
            return;
        }
        timeout_ms = 0;
        // SAFETY: `ev` is a live event; librdkafka sets `fac` and `text` to NUL-terminated strings
        // owned by the event (checked for null), read before the event is destroyed, once.
        unsafe {
            if rd::rd_kafka_event_type(ev) == rd::RD_KAFKA_EVENT_LOG {
                let (mut fac, mut text, mut level): (*const c_char, *const c_char, c_int) =
                    (std::ptr::null(), std::ptr::null(), 0);
                if rd::rd_kafka_event_log(ev, &mut fac, &mut text, &mut level) == 0
                    && !fac.is_null()
                    && !text.is_null()
                {
                    emit(
                        level,
                        &CStr::from_ptr(fac).to_string_lossy(),
                        &CStr::from_ptr(text).to_string_lossy(),
                        refused,
                    );
                }
            }
            rd::rd_kafka_event_destroy(ev);
        }
    }
}

impl Forwarder {
    fn start(rk: *mut rd::rd_kafka_t, refused: Refused) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let none = |stop| Forwarder {
            rk,
            queue: std::ptr::null_mut(),
            stop,
            thread: None,
            refused: refused.clone(),
        };
        // SAFETY: `rk` is a live client (its owner outlives the forwarder, see `Logged`).
        let queue = unsafe { rd::rd_kafka_queue_new(rk) };
        if queue.is_null() {
            return none(stop);
        }
        // SAFETY: both live; librdkafka keeps its own reference to the queue while forwarding.
        if unsafe { rd::rd_kafka_set_log_queue(rk, queue) }
            != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            // SAFETY: ours, unused.
            unsafe { rd::rd_kafka_queue_destroy(queue) };
            return none(stop);
        }
        let (q, flag, seen) = (Ptr(queue), stop.clone(), refused.clone());
        let thread = std::thread::Builder::new()
            .name("kafka-log".into())
            .spawn(move || {
                let q = q;
                while !flag.load(Ordering::Relaxed) {
                    // SAFETY: the queue is destroyed only after this thread is joined.
                    unsafe { serve(q.0, 100, &seen) };
                }
            });
        let mut f = none(stop);
        f.queue = queue;
        f.thread = thread.ok();
        f
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if !self.queue.is_null() {
            // SAFETY: the client is still alive (see `Logged`) and the thread has ended: send
            // its logs back to the main queue, print what is left on ours, then destroy it.
            unsafe {
                rd::rd_kafka_set_log_queue(self.rk, std::ptr::null_mut());
                serve(self.queue, 0, &self.refused);
                rd::rd_kafka_queue_destroy(self.queue);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_thread_prefix_is_dropped() {
        assert_eq!(
            super::without_thread(
                "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed"
            ),
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed"
        );
        assert_eq!(super::without_thread("no prefix"), "no prefix");
    }

    #[test]
    fn a_refused_login_is_kept_and_a_connection_failure_is_not() {
        let ctx = super::KafkaLogContext::default();
        super::emit(3, "FAIL", "[thrd:sasl_ssl://127.0.0.1:9094/bootstrap]: sasl_ssl://127.0.0.1:9094/bootstrap: Connect to ipv4#127.0.0.1:9094 failed: Connection refused", &ctx.refused);
        assert_eq!(ctx.refused(), None);
        super::emit(3, "FAIL", "[thrd:sasl_ssl://127.0.0.1:9094/bootstrap]: sasl_ssl://127.0.0.1:9094/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256", &ctx.refused);
        let got = ctx.refused().unwrap();
        assert!(
            got.starts_with("sasl_ssl://127.0.0.1:9094/bootstrap: SASL"),
            "{got}"
        );
        // `within` fails at once, not after its timeout.
        let t = std::time::Instant::now();
        let r: Result<(), _> = super::within(&ctx, std::time::Duration::from_secs(30), |_| {
            Err(rdkafka::error::KafkaError::MetadataFetch(
                rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
            ))
        });
        assert!(matches!(r, Err(super::Failure::Refused(_))));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }
}
