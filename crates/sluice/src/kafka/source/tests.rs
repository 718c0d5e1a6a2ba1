//! Tests of `source`.

use super::*;

/// A `ClientConfig`'s (and so the settings') `Debug` printed every value, the JAAS password
/// and `kafka.ssl.key.password` among them.
#[test]
fn the_debug_of_a_kafka_source_and_sink_shows_no_secret() {
    let options: HashMap<String, String> = [
        ("subscribe", "t"),
        ("kafka.bootstrap.servers", "127.0.0.1:9092"),
        ("kafka.security.protocol", "SASL_SSL"),
        ("kafka.sasl.mechanism", "PLAIN"),
        (
            "kafka.sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="debug-pw-77";"#,
        ),
        ("kafka.ssl.key.password", "key-pw-78"),
        ("topic", "t"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let source = format!("{:?}", KafkaSourceProvider::try_new(&options).unwrap());
    let sink = format!(
        "{:?}",
        crate::kafka::sink::KafkaSinkProvider::try_new(&options).unwrap()
    );
    for text in [source, sink] {
        assert!(!text.contains("debug-pw-77"), "{text}");
        assert!(!text.contains("key-pw-78"), "{text}");
        assert!(text.contains(crate::redact::REDACTED), "{text}");
        assert!(text.contains("127.0.0.1:9092"), "{text}");
    }
}

#[test]
fn offsets_round_trip_as_sparks_json() {
    let v: Offset = serde_json::from_str(r#"{"users_input":{"0":30,"1":2}}"#).unwrap();
    let m = parse_offsets(&v).unwrap();
    assert_eq!(m["users_input"][&0], 30);
    assert_eq!(offsets_json(&m), v);
}

#[test]
fn subscribe_pattern_matches_like_a_regex() {
    assert!(pattern_matches("events-.*", "events-eu"));
    assert!(!pattern_matches("events-.*", "orders"));
    assert!(pattern_matches("^t.$", "t1"));
}

#[test]
fn options_are_checked() {
    let o = |kv: &[(&str, &str)]| {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>()
    };
    assert!(KafkaSourceProvider::try_new(&o(&[("kafka.bootstrap.servers", "x")])).is_err());
    assert!(KafkaSourceProvider::try_new(&o(&[
        ("subscribe", "t"),
        ("assign", "{}"),
        ("kafka.bootstrap.servers", "x")
    ]))
    .is_err());
    let err = KafkaSourceProvider::try_new(&o(&[
        ("subscribe", "t"),
        ("kafka.bootstrap.servers", "x"),
        ("kafka.auto.offset.reset", "earliest"),
    ]))
    .unwrap_err();
    assert!(err.message().contains("auto.offset.reset"));
    // kafka.group.id is Spark's "use with caution" option, taken as given.
    let p = KafkaSourceProvider::try_new(&o(&[
        ("subscribe", "t"),
        ("kafka.bootstrap.servers", "x"),
        ("kafka.group.id", "g"),
    ]))
    .unwrap();
    assert_eq!(p.group_id.as_deref(), Some("g"));
    let err = KafkaSourceProvider::try_new(&o(&[
        ("subscribe", "t"),
        ("kafka.bootstrap.servers", "x"),
        ("endingOffsets", "latest"),
    ]))
    .unwrap_err();
    assert!(
        err.message().contains("not valid in streaming queries"),
        "{err}"
    );
    let err = KafkaSourceProvider::try_new(&o(&[
        ("subscribe", "t"),
        ("kafka.bootstrap.servers", "x"),
        ("minPartitions", "0"),
    ]))
    .unwrap_err();
    assert!(err.message().contains("minPartitions"), "{err}");
    assert!(KafkaSourceProvider::try_new(&o(&[
        ("subscribe", "t"),
        ("kafka.bootstrap.servers", "x")
    ]))
    .is_ok());
}
