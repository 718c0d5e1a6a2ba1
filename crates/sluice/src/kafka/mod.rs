//! Apache Kafka, in one place (feature `kafka`, on librdkafka): the source ([`source`]: Spark's
//! `KafkaSource`, offsets per partition, read limits, reads on workers), the sink ([`sink`]:
//! at-least-once or exactly-once by transactions), Spark's `kafka.*` client options as
//! librdkafka's settings (`conf`), and the client context every Kafka client shares ([`log`]:
//! librdkafka's logs, refused logins and undelivered records).

pub(crate) mod conf;
pub mod log;
pub mod sink;
pub mod source;
