//! Secrets are never printed: the one home of what a secret is and how it is hidden (issue 18
//! part 10).
//!
//! **What is a secret.** An option or conf whose *key* matches Spark's
//! `spark.redaction.regex` default, `(?i)secret|password|token|access[.]key`, extended with
//! `jaas` (`kafka.sasl.jaas.config` holds the password), `credential`, `ssl[.]key([.]|$)`
//! (`kafka.ssl.key.password`, `ssl.key.pem`; not `ssl.keystore.location`), `keystore[.]key`, `private[.]key`,
//! `account[.]key` (Azure's `fs.azure.account.key.*`), `sas[.]` (Azure SAS tokens),
//! and `oauthbearer[.]config`; a key that says where a secret is or what kind it is (ending in
//! `.location`, `.type`, `.provider` or `.enabled`) is not one ([`is_secret_key`]). A user-set
//! `spark.redaction.regex` (a session conf) adds its keys to these; it never removes one. In a
//! pipeline file, a `${NAME}` variable is a secret when its name is one by the same rule or ends
//! in `_KEY` (`S3_SECRET`, `KAFKA_PASSWORD`, `API_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `SAS_KEY`:
//! [`is_secret_variable`]); the value of a variable substituted into a secret option is a
//! secret too, since the whole option value is.
//!
//! **How it is hidden.** Every secret value the process is given (the options of readers and
//! writers, session confs, the Kafka settings derived from them, secret pipeline variables) is
//! remembered ([`remember_option`], [`remember`]), and text on its way out goes through
//! [`redact_text`]: each remembered value is replaced by Spark's `*********(redacted)`, and so
//! is the value of any `secret-key=value` written in the text (a JAAS text's `password="..."`).
//! The exits: every [`SluiceError`](crate::SluiceError) message, librdkafka's log lines and
//! errors (`kafka::log`), the source and sink descriptions that progress, `query.json` and the
//! status lines show, `sluice checkpoint describe`, the `sluice` command's log lines, and the
//! `Debug` of the Kafka source's and sink's client settings ([`Pairs`]).
//!
//! Values shorter than [`MIN_SECRET_LEN`] characters are not searched for in text (replacing
//! every `1` or `ab` in a message would hide everything else); their keys still redact them
//! wherever a key and its value are printed together.

use std::borrow::Cow;
use std::fmt;
use std::sync::{LazyLock, RwLock};

use regex::Regex;

use crate::sync::RwLockExt;

/// What a secret value is replaced by (Spark's text).
pub const REDACTED: &str = "*********(redacted)";

/// The conf whose regex adds keys to the secret ones (Spark's name).
pub const REDACTION_REGEX: &str = "spark.redaction.regex";

/// Spark's default `spark.redaction.regex`, extended (see the module doc).
pub const DEFAULT_REGEX: &str = "(?i)secret|password|token|access[.]key|jaas|credential|ssl[.]key([.]|$)|keystore[.]key|private[.]key|account[.]key|sas[.]|oauthbearer[.]config";

/// Remembered values shorter than this are not searched for in text (see the module doc).
pub const MIN_SECRET_LEN: usize = 4;

static DEFAULT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(DEFAULT_REGEX).expect("the default redaction regex is valid"));

/// `key=value` in text where the key names a secret: the key (`password`, `sasl.password`,
/// `kafka.ssl.key.password`) then `=` and a quoted or bare value.
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"([A-Za-z0-9_.\-]+)(\s*=\s*)("(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;)\]}"']+)"#)
        .expect("the assignment regex is valid")
});

/// The keys a user's `spark.redaction.regex` adds, and the secret values remembered so far
/// (longest first, so a secret that contains another is replaced whole).
#[derive(Default)]
struct Known {
    user: Vec<Regex>,
    values: Vec<String>,
}

static KNOWN: LazyLock<RwLock<Known>> = LazyLock::new(|| RwLock::new(Known::default()));

/// Whether an option or conf key names a secret (see the module doc): `kafka.sasl.jaas.config`,
/// `kafka.ssl.key.password`, `spark.hadoop.fs.s3a.secret.key`, `fs.s3a.access.key`,
/// `fs.s3a.session.token`, `fs.azure.account.key.<account>...`, ...
pub fn is_secret_key(key: &str) -> bool {
    if KNOWN.read_unpoisoned().user.iter().any(|r| r.is_match(key)) {
        return true;
    }
    // Where a secret is, or what kind it is, is not one (`ssl.key.location`, a PEM file's
    // path; `fs.s3a.aws.credentials.provider`, a class name).
    let lower = key.to_ascii_lowercase();
    let about = [".location", ".type", ".provider", ".enabled"]
        .iter()
        .any(|end| lower.ends_with(end));
    DEFAULT.is_match(key) && !about
}

/// Whether a pipeline variable's value is a secret by its name: a secret key's name
/// ([`is_secret_key`]), or a key's (`KEY`, `*_KEY`, `*APIKEY`: `AWS_SECRET_ACCESS_KEY`,
/// `API_KEY`, `SAS_KEY`).
pub fn is_secret_variable(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    is_secret_key(name)
        || upper == "KEY"
        || ["_KEY", "-KEY", ".KEY", "APIKEY", "ACCESSKEY"]
            .iter()
            .any(|end| upper.ends_with(end))
}

/// Adds the keys of a user's `spark.redaction.regex` to the secret ones, for the whole process
/// (redaction only ever grows). A regex that does not compile is refused.
pub fn add_redaction_regex(pattern: &str) -> Result<(), regex::Error> {
    if pattern.trim().is_empty() {
        return Ok(());
    }
    let re = Regex::new(pattern)?;
    let mut k = KNOWN.write_unpoisoned();
    if !k.user.iter().any(|r| r.as_str() == re.as_str()) {
        k.user.push(re);
    }
    Ok(())
}

/// Remembers `value` as a secret: from now on [`redact_text`] hides it.
pub fn remember(value: &str) {
    let value = value.trim();
    if value.chars().count() < MIN_SECRET_LEN {
        return;
    }
    if KNOWN.read_unpoisoned().values.iter().any(|v| v == value) {
        return;
    }
    let mut k = KNOWN.write_unpoisoned();
    if !k.values.iter().any(|v| v == value) {
        k.values.push(value.to_string());
        k.values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    }
}

/// Remembers `value` if `key` names a secret (call it for every option and conf a user sets).
pub fn remember_option(key: &str, value: &str) {
    if key == REDACTION_REGEX {
        // Its own value is not a secret; a bad one is refused where the conf is read.
        let _ = add_redaction_regex(value);
    } else if is_secret_key(key) {
        remember(value);
    }
}

/// `value`, or [`REDACTED`] if `key` names a secret.
pub fn redact_value<'a>(key: &str, value: &'a str) -> Cow<'a, str> {
    if is_secret_key(key) {
        Cow::Borrowed(REDACTED)
    } else {
        Cow::Borrowed(value)
    }
}

/// `text` with every remembered secret, and the value of every `secret-key=value` in it,
/// replaced by [`REDACTED`].
pub fn redact_text(text: &str) -> Cow<'_, str> {
    // Cheap when there is nothing to hide (errors may be built per record): only the secrets
    // the text holds are copied (the key checks below take the lock again).
    let values: Vec<String> = KNOWN
        .read_unpoisoned()
        .values
        .iter()
        .filter(|v| text.contains(v.as_str()))
        .cloned()
        .collect();
    if values.is_empty() && !text.contains('=') {
        return Cow::Borrowed(text);
    }
    let known: Vec<&str> = values.iter().map(String::as_str).collect();
    let out = redact_text_with(text, &known);
    if out == text {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(out)
    }
}

/// [`redact_text`] of an owned string (descriptions, messages).
pub fn redacted(text: String) -> String {
    match redact_text(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(o) => o,
    }
}

/// `text` with each of `known_secrets` (longest first) and the value of every
/// `secret-key=value` in it replaced by [`REDACTED`].
pub fn redact_text_with(text: &str, known_secrets: &[&str]) -> String {
    let mut out = text.to_string();
    let mut secrets: Vec<&str> = known_secrets
        .iter()
        .map(|s| s.trim())
        .filter(|s| s.chars().count() >= MIN_SECRET_LEN)
        .collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for s in secrets {
        if out.contains(s) {
            out = out.replace(s, REDACTED);
        }
    }
    if out.contains('=') && ASSIGNMENT.is_match(&out) {
        out = ASSIGNMENT
            .replace_all(&out, |c: &regex::Captures<'_>| {
                let (key, eq, value) = (&c[1], &c[2], &c[3]);
                let placeholder = value
                    .trim_matches(|ch| ch == '"' || ch == '\'')
                    .chars()
                    .all(|ch| ch == '.')
                    || value.contains(REDACTED)
                    || REDACTED.contains(value);
                if is_secret_key(key) && !placeholder {
                    format!("{key}{eq}{REDACTED}")
                } else {
                    c[0].to_string()
                }
            })
            .into_owned();
    }
    out
}

/// Options or settings whose `Debug` shows each secret key's value as [`REDACTED`].
pub struct Pairs<'a>(pub &'a [(String, String)]);

impl fmt::Debug for Pairs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, v)| (k, redact_value(k, v))))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_are_sparks_and_kafkas_and_the_stores() {
        for key in [
            "kafka.sasl.jaas.config",
            "sasl.jaas.config",
            "kafka.ssl.key.password",
            "kafka.ssl.keystore.password",
            "kafka.ssl.truststore.password",
            "ssl.key.pem",
            "kafka.ssl.keystore.key",
            "sasl.password",
            "kafka.sasl.oauthbearer.client.secret",
            "kafka.sasl.oauthbearer.config",
            "spark.hadoop.fs.s3a.secret.key",
            "fs.s3a.access.key",
            "fs.s3a.session.token",
            "fs.s3a.bucket.b.secret.key",
            "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
            "fs.azure.sas.fixed.token",
            "fs.azure.account.oauth2.client.secret",
            "spark.hadoop.google.cloud.auth.service.account.json.private.key",
            "aws.credentials",
            "PASSWORD",
        ] {
            assert!(is_secret_key(key), "{key} is a secret");
        }
        for key in [
            "kafka.bootstrap.servers",
            "subscribe",
            "path",
            "kafka.sasl.mechanism",
            "kafka.security.protocol",
            "kafka.ssl.truststore.location",
            "kafka.ssl.keystore.location",
            "ssl.key.location",
            "fs.s3a.aws.credentials.provider",
            "kafka.ssl.keystore.type",
            "fs.s3a.endpoint",
            "checkpointLocation",
            "maxOffsetsPerTrigger",
            "spark.sql.shuffle.partitions",
        ] {
            assert!(!is_secret_key(key), "{key} is not a secret");
        }
    }

    #[test]
    fn secret_variables_by_name() {
        for name in [
            "KAFKA_PASSWORD",
            "S3_SECRET",
            "API_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "SAS_KEY",
            "kafka_jaas",
            "db_credentials",
        ] {
            assert!(is_secret_variable(name), "{name}");
        }
        for name in [
            "input",
            "TOPIC",
            "BOOTSTRAP",
            "OUT_DIR",
            "keyspace",
            "MONKEY",
        ] {
            assert!(!is_secret_variable(name), "{name}");
        }
    }

    #[test]
    fn values_are_redacted_by_key() {
        assert_eq!(redact_value("kafka.sasl.jaas.config", "x y z"), REDACTED);
        assert_eq!(redact_value("subscribe", "events"), "events");
    }

    #[test]
    fn text_loses_known_secrets_and_secret_assignments() {
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="s3cr3t-pw";"#;
        // The whole JAAS text, and the password alone (librdkafka's `sasl.password`).
        let msg = format!("cannot create a consumer with {jaas} (password s3cr3t-pw)");
        let out = redact_text_with(&msg, &[jaas, "s3cr3t-pw"]);
        assert!(!out.contains("s3cr3t-pw"), "{out}");
        assert!(out.contains(REDACTED), "{out}");
        // Unknown to the process, but written as `secret-key=value`.
        let out = redact_text_with(
            r#"Client config error: sasl.password=hunter22 and username="u" password="hunter33"; x.secret.key='k3y' access.key=AKIA1"#,
            &[],
        );
        for s in ["hunter22", "hunter33", "k3y", "AKIA1"] {
            assert!(!out.contains(s), "{s} in {out}");
        }
        assert!(out.contains(r#"username="u""#), "{out}");
        // Not secrets: other keys, and the placeholders of a message's advice.
        let advice = r#"needs username=".." and password="..", topic=events"#;
        assert_eq!(redact_text_with(advice, &[]), advice);
        // Short values are not searched for.
        assert_eq!(redact_text_with("a 1 b", &["1"]), "a 1 b");
    }

    #[test]
    fn remembered_secrets_and_a_user_regex() {
        remember_option("kafka.sasl.jaas.config", "remembered-jaas-value-1");
        remember_option("subscribe", "not-a-secret-topic-1");
        let out = redact_text("a remembered-jaas-value-1 b not-a-secret-topic-1");
        assert_eq!(out, format!("a {REDACTED} b not-a-secret-topic-1"));
        assert!(!is_secret_key("my.custom.hush.option"));
        add_redaction_regex("(?i)hush").unwrap();
        assert!(is_secret_key("my.custom.hush.option"));
        assert!(is_secret_key("kafka.sasl.jaas.config"), "the defaults stay");
        assert!(add_redaction_regex("(unclosed").is_err());
    }

    #[test]
    fn pairs_debug_hides_secret_values() {
        let pairs = vec![
            ("sasl.password".to_string(), "pw-in-debug".to_string()),
            ("bootstrap.servers".to_string(), "b:9092".to_string()),
        ];
        let s = format!("{:?}", Pairs(&pairs));
        assert!(!s.contains("pw-in-debug"), "{s}");
        assert!(s.contains("b:9092"), "{s}");
    }
}
