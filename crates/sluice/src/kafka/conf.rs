//! Spark's `kafka.*` client options (the Java client's names) as librdkafka's: the security
//! settings users copy from their Spark jobs (`kafka.security.protocol`, `kafka.sasl.mechanism`,
//! `kafka.sasl.jaas.config`, truststores and keystores) become what librdkafka reads, and what
//! cannot be translated is refused with the command that fixes it. Other keys pass through.
//! Shared by the Kafka source and sink.

use crate::error::{class, Result, SluiceError};

/// The librdkafka settings of Spark's `kafka.*` options (`kafka.` removed from `options`' keys,
/// lower-cased), `bootstrap.servers` included.
/// librdkafka settings (key, value) in order; their `Debug` never shows a secret's value (a
/// `ClientConfig`'s `Debug` prints everything, so Sluice never prints one).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Settings(pub(crate) Vec<(String, String)>);

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::redact::Pairs(&self.0).fmt(f)
    }
}

impl std::ops::Deref for Settings {
    type Target = Vec<(String, String)>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Settings {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'a> IntoIterator for &'a Settings {
    type Item = &'a (String, String);
    type IntoIter = std::slice::Iter<'a, (String, String)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

pub(crate) fn client_settings(options: &[(String, String)]) -> Result<Settings> {
    for (k, v) in options {
        crate::redact::remember_option(k, v);
    }
    let out = translate(options)?;
    // The password a JAAS text holds, alone (`sasl.password`): librdkafka may print it so.
    for (k, v) in &out {
        crate::redact::remember_option(k, v);
    }
    Ok(Settings(out))
}

fn translate(options: &[(String, String)]) -> Result<Vec<(String, String)>> {
    let get = |k: &str| {
        options
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.trim().to_string())
    };
    let mut out = Vec::new();
    for (key, value) in options {
        let v = value.trim();
        match key.as_str() {
            "sasl.jaas.config" => out.extend(jaas(v)?),
            "sasl.mechanism" | "sasl.mechanisms" => {
                let m = v.to_ascii_uppercase();
                if ![
                    "PLAIN",
                    "SCRAM-SHA-256",
                    "SCRAM-SHA-512",
                    "OAUTHBEARER",
                    "GSSAPI",
                ]
                .contains(&m.as_str())
                {
                    return Err(bad(format!(
                        "kafka.sasl.mechanism {v:?} is not one Kafka knows: use PLAIN, \
                         SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
                    )));
                }
                if m == "GSSAPI" {
                    return Err(SluiceError::not_supported_yet(
                        "kafka.sasl.mechanism GSSAPI (Kerberos): Sluice's Kafka client is built \
                         without Kerberos; use SCRAM or PLAIN over SASL_SSL",
                    ));
                }
                out.push(("sasl.mechanism".into(), m));
            }
            "security.protocol" => out.push(("security.protocol".into(), v.to_ascii_uppercase())),
            "ssl.truststore.location" => {
                let ty = store_type(get("ssl.truststore.type").as_deref(), v);
                match ty.as_str() {
                    "PEM" => out.push(("ssl.ca.location".into(), v.to_string())),
                    "PKCS12" => {
                        return Err(bad(format!(
                            "kafka.ssl.truststore.location {v} is a PKCS12 truststore, which \
                             librdkafka does not read: convert it to PEM with `openssl pkcs12 \
                             -in {v} -nokeys -out ca.pem` and set kafka.ssl.truststore.location \
                             to ca.pem (kafka.ssl.truststore.type PEM)"
                        )))
                    }
                    _ => {
                        return Err(bad(format!(
                            "kafka.ssl.truststore.location {v} is a JKS truststore, which \
                             librdkafka does not read: convert it to PEM with `keytool \
                             -exportcert -rfc -keystore {v} -alias <alias> -file ca.pem` and \
                             set kafka.ssl.truststore.location to ca.pem \
                             (kafka.ssl.truststore.type PEM)"
                        )))
                    }
                }
            }
            "ssl.truststore.certificates" => out.push(("ssl.ca.pem".into(), v.to_string())),
            "ssl.keystore.location" => {
                let ty = store_type(get("ssl.keystore.type").as_deref(), v);
                match ty.as_str() {
                    "PEM" => {
                        out.push(("ssl.certificate.location".into(), v.to_string()));
                        out.push(("ssl.key.location".into(), v.to_string()));
                    }
                    "PKCS12" => out.push(("ssl.keystore.location".into(), v.to_string())),
                    _ => {
                        return Err(bad(format!(
                            "kafka.ssl.keystore.location {v} is a JKS keystore, which librdkafka \
                             does not read: convert it with `keytool -importkeystore \
                             -srckeystore {v} -destkeystore keystore.p12 -deststoretype PKCS12` \
                             and set kafka.ssl.keystore.location to keystore.p12 \
                             (kafka.ssl.keystore.type PKCS12)"
                        )))
                    }
                }
            }
            "ssl.keystore.password" => {
                if store_type(
                    get("ssl.keystore.type").as_deref(),
                    get("ssl.keystore.location").as_deref().unwrap_or(""),
                ) == "PKCS12"
                {
                    out.push(("ssl.keystore.password".into(), v.to_string()));
                }
            }
            "ssl.keystore.certificate.chain" => {
                out.push(("ssl.certificate.pem".into(), v.to_string()))
            }
            "ssl.keystore.key" => out.push(("ssl.key.pem".into(), v.to_string())),
            "ssl.endpoint.identification.algorithm" => out.push((
                key.clone(),
                if v.is_empty() {
                    "none".into()
                } else {
                    v.to_ascii_lowercase()
                },
            )),
            // The Java producer's level per codec; librdkafka has one for the codec in use.
            "compression.gzip.level" | "compression.lz4.level" | "compression.zstd.level" => {
                let codec = &key["compression.".len()..key.len() - ".level".len()];
                let chosen = get("compression.type").or_else(|| get("compression.codec"));
                if chosen.is_some_and(|c| c.eq_ignore_ascii_case(codec)) {
                    out.push(("compression.level".into(), v.to_string()));
                }
            }
            "max.request.size" => out.push(("message.max.bytes".into(), v.to_string())),
            "fetch.max.wait.ms" => out.push(("fetch.wait.max.ms".into(), v.to_string())),
            "buffer.memory" => {
                let bytes: u64 = v.parse().map_err(|_| {
                    bad(format!(
                        "kafka.buffer.memory must be a number of bytes, got {v:?}"
                    ))
                })?;
                out.push((
                    "queue.buffering.max.kbytes".into(),
                    bytes.div_ceil(1024).max(1).to_string(),
                ));
            }
            // Java client knobs with no librdkafka counterpart: a batch reads up to its end
            // offsets whatever the poll size, and calls are bounded by Sluice's own timeouts.
            "max.poll.records" | "max.block.ms" | "default.api.timeout.ms" => {
                log::warn!("Kafka option kafka.{key} has no effect in Sluice (librdkafka has no such setting); ignoring it");
            }
            // The Java client's store types and trust password: read above, nothing to pass.
            "ssl.truststore.type" | "ssl.keystore.type" | "ssl.truststore.password" => {}
            "sasl.login.callback.handler.class" | "sasl.client.callback.handler.class" => {
                return Err(SluiceError::not_supported_yet(format!(
                    "kafka.{key}: a Java callback class cannot run in Sluice; for OAUTHBEARER \
                     set kafka.sasl.oauthbearer.method=oidc with kafka.sasl.oauthbearer.client.id, \
                     .client.secret and .token.endpoint.url (librdkafka's names)"
                )))
            }
            _ => out.push((key.clone(), value.clone())),
        }
    }
    Ok(out)
}

fn store_type(given: Option<&str>, location: &str) -> String {
    match given.map(str::to_ascii_uppercase) {
        Some(t) if !t.is_empty() => t,
        _ => {
            let l = location.to_ascii_lowercase();
            if l.ends_with(".pem") || l.ends_with(".crt") || l.ends_with(".cer") {
                "PEM".into()
            } else if l.ends_with(".p12") || l.ends_with(".pfx") {
                "PKCS12".into()
            } else {
                // The Java client's default.
                "JKS".into()
            }
        }
    }
}

fn bad(msg: String) -> SluiceError {
    SluiceError::query(class::KAFKA_INVALID_OPTION, msg)
}

/// `org.apache.kafka.common.security.plain.PlainLoginModule required username="u"
/// password="p";` (or `ScramLoginModule`) as `sasl.username` and `sasl.password`.
fn jaas(text: &str) -> Result<Vec<(String, String)>> {
    let module = text.split_whitespace().next().unwrap_or("");
    let short = module.rsplit('.').next().unwrap_or(module);
    match short {
        "PlainLoginModule" | "ScramLoginModule" => {}
        "OAuthBearerLoginModule" => {
            return Err(SluiceError::not_supported_yet(
                "kafka.sasl.jaas.config with OAuthBearerLoginModule: set \
                 kafka.sasl.oauthbearer.method=oidc with kafka.sasl.oauthbearer.client.id, \
                 .client.secret and .token.endpoint.url (librdkafka's names) instead",
            ))
        }
        // Not a class name: the text starts with its options (or is not JAAS at all), and
        // may start with the password itself.
        _ if module.contains(['=', '"', '\'']) || !module.contains('.') => {
            return Err(bad(
                "kafka.sasl.jaas.config does not start with a login module class: write \
                 org.apache.kafka.common.security.scram.ScramLoginModule (or \
                 ...plain.PlainLoginModule) required username=\"..\" password=\"..\"; (the \
                 text is not shown: it holds a secret)"
                    .to_string(),
            ))
        }
        _ => {
            return Err(bad(format!(
                "kafka.sasl.jaas.config names the login module {module:?}: Sluice reads \
                 PlainLoginModule and ScramLoginModule (username and password)"
            )))
        }
    }
    let field = |name: &str| -> Option<String> {
        let at = find_key(text, name)?;
        let rest = text[at + name.len()..]
            .trim_start()
            .strip_prefix('=')?
            .trim_start();
        if let Some(q) = rest.strip_prefix('"') {
            let mut out = String::new();
            let mut chars = q.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => out.extend(chars.next()),
                    '"' => return Some(out),
                    c => out.push(c),
                }
            }
            None
        } else {
            Some(
                rest.split(|c: char| c.is_whitespace() || c == ';')
                    .next()
                    .unwrap_or("")
                    .to_string(),
            )
        }
    };
    let (Some(user), Some(password)) = (field("username"), field("password")) else {
        return Err(bad(
            "kafka.sasl.jaas.config needs username=\"..\" and password=\"..\" (the text is not \
             shown: it holds a secret)"
                .to_string(),
        ));
    };
    Ok(vec![
        ("sasl.username".into(), user),
        ("sasl.password".into(), password),
    ])
}

/// Where `name=` starts as a whole word (not inside a quoted value).
fn find_key(text: &str, name: &str) -> Option<usize> {
    let mut in_quotes = false;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_quotes => i += 1,
            b'"' => in_quotes = !in_quotes,
            _ if !in_quotes
                && text[i..].starts_with(name)
                && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
                && text[i + name.len()..].trim_start().starts_with('=') =>
            {
                return Some(i)
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// `, and do the credentials of user u (SASL_SSL, SCRAM-SHA-512) hold`, for messages: how the
/// client authenticates, never the secret.
pub(crate) fn security_context(client: &[(String, String)]) -> String {
    let get = |k: &str| {
        client
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    match (get("security.protocol"), get("sasl.mechanism")) {
        (Some(p), Some(m)) => format!(
            ", and do the credentials of user {} hold ({p}, {m})",
            get("sasl.username").unwrap_or("?")
        ),
        (Some(p), None) if !p.eq_ignore_ascii_case("PLAINTEXT") => {
            format!(", and does it speak {p}")
        }
        _ => String::new(),
    }
}

/// The error of a client the broker refused (librdkafka's `text` names the broker and, for SASL,
/// the mechanism): which options to check, never the secret.
pub(crate) fn refused(text: &str, client: &[(String, String)]) -> SluiceError {
    let get = |k: &str| {
        client
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let fix = if text.contains("SSL") && !text.contains("SASL") {
        "Check kafka.ssl.truststore.location (the CA that signed the broker's certificate) and, \
         for mutual TLS, kafka.ssl.keystore.location"
            .to_string()
    } else {
        format!(
            "Check the username and password in kafka.sasl.jaas.config (user {}) and that \
             kafka.sasl.mechanism ({}) is one the listener enables",
            get("sasl.username").unwrap_or("?"),
            get("sasl.mechanism").unwrap_or("GSSAPI")
        )
    };
    SluiceError::connector(
        class::KAFKA_AUTHENTICATION,
        format!(
            "The Kafka broker refused the client ({}): {text}. {fix}.",
            get("security.protocol").unwrap_or("PLAINTEXT")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings> {
        client_settings(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn spark_security_options_become_librdkafka_settings() {
        let s = settings(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="p\"w;d";"#,
            ),
            ("ssl.truststore.location", "/etc/kafka/ca.pem"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.endpoint.identification.algorithm", ""),
        ])
        .unwrap();
        let get = |k: &str| s.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.username"), Some("svc"));
        assert_eq!(get("sasl.password"), Some("p\"w;d"));
        assert_eq!(get("ssl.ca.location"), Some("/etc/kafka/ca.pem"));
        assert_eq!(get("ssl.endpoint.identification.algorithm"), Some("none"));
        assert_eq!(
            get("sasl.jaas.config"),
            None,
            "the JAAS text is not passed on"
        );
    }

    #[test]
    fn java_producer_names_become_librdkafka_names() {
        let s = settings(&[
            ("compression.type", "zstd"),
            ("compression.zstd.level", "7"),
            ("compression.gzip.level", "9"),
            ("max.request.size", "2097152"),
            ("buffer.memory", "33554432"),
            ("max.block.ms", "1000"),
            ("fetch.max.wait.ms", "250"),
        ])
        .unwrap();
        let get = |k: &str| s.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(
            get("compression.level"),
            Some("7"),
            "the level of the codec in use"
        );
        assert_eq!(get("message.max.bytes"), Some("2097152"));
        assert_eq!(get("queue.buffering.max.kbytes"), Some("32768"));
        assert_eq!(get("max.block.ms"), None);
        assert_eq!(get("fetch.wait.max.ms"), Some("250"));
        assert_eq!(
            s.iter().filter(|(k, _)| k == "compression.level").count(),
            1
        );
    }

    #[test]
    fn java_stores_are_refused_with_the_command_that_converts_them() {
        let e = settings(&[("ssl.truststore.location", "/x/trust.jks")]).unwrap_err();
        assert!(e.message().contains("keytool -exportcert"), "{e}");
        let e = settings(&[("ssl.truststore.location", "/x/t.p12")]).unwrap_err();
        assert!(e.message().contains("openssl pkcs12"), "{e}");
        let e = settings(&[("ssl.keystore.location", "/x/k.jks")]).unwrap_err();
        assert!(e.message().contains("-deststoretype PKCS12"), "{e}");
        let ok = settings(&[
            ("ssl.keystore.location", "/x/k.p12"),
            ("ssl.keystore.password", "s"),
        ])
        .unwrap();
        assert!(ok.contains(&("ssl.keystore.location".into(), "/x/k.p12".into())));
        assert!(ok.contains(&("ssl.keystore.password".into(), "s".into())));
    }

    #[test]
    fn a_jaas_text_without_a_password_is_refused_without_showing_it() {
        let e = settings(&[(
            "sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="u";"#,
        )])
        .unwrap_err();
        assert!(!e.message().contains("username=\"u\""), "{e}");
        let e = settings(&[(
            "sasl.jaas.config",
            "com.sun.security.auth.module.Krb5LoginModule required;",
        )])
        .unwrap_err();
        assert!(e.message().contains("Krb5LoginModule"), "{e}");
    }

    #[test]
    fn a_jaas_text_is_never_shown_even_when_it_starts_with_the_password() {
        for text in [
            r#"password="jaas-pw-first-1" username="u";"#,
            r#"password=jaas-pw-first-1 username=u"#,
            r#"required password="jaas-pw-first-1";"#,
        ] {
            let e = settings(&[("sasl.jaas.config", text)]).unwrap_err();
            assert!(!e.to_string().contains("jaas-pw-first-1"), "{e}");
            assert!(e.message().contains("login module class"), "{e}");
        }
    }

    #[test]
    fn the_password_of_a_jaas_text_is_remembered_as_a_secret() {
        settings(&[(
            "sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="only-the-pw-2";"#,
        )])
        .unwrap();
        // librdkafka's texts could show `sasl.password` alone.
        let text = "Client config error: only-the-pw-2 rejected";
        assert!(!crate::redact::redact_text(text).contains("only-the-pw-2"));
    }
}
