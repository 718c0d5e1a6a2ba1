-- "Reading from Kafka" (Structured Streaming in PySpark): JSON events from the topic `events`,
-- parsed with a schema and written back as JSON to `events-enriched`. Flink's form this time: a
-- sink table and INSERT INTO. Kafka's columns are Spark's (key, value, topic, partition,
-- offset, timestamp, timestampType); the view parses the binary value. Offsets are kept in the
-- checkpoint, never in a consumer group. Runs until Ctrl-C.
--
--   scripts/kafka-broker start
--   sluice run examples/kafka_enrich.sql --set starting_offsets=earliest

CREATE TABLE events WITH (
  connector = 'kafka',
  'kafka.bootstrap.servers' = '${bootstrap:-localhost:9092}',
  subscribe = '${input_topic:-events}',
  'startingOffsets' = '${starting_offsets:-latest}'
);

CREATE VIEW parsed AS
SELECT CAST(key AS STRING) AS key,
       from_json(CAST(value AS STRING),
                 'event_time TIMESTAMP, user STRING, action STRING, amount DOUBLE') AS data,
       timestamp
FROM events;

CREATE TABLE events_enriched (
  key   STRING,
  value STRING
) WITH (
  connector = 'kafka',
  'kafka.bootstrap.servers' = '${bootstrap:-localhost:9092}',
  topic = '${output_topic:-events-enriched}',
  checkpoint = '${checkpoint:-data/kafka_checkpoint}'
);

-- The Kafka sink writes a `value` column (and `key`): the parsed fields, as JSON.
INSERT INTO events_enriched
SELECT key,
       to_json(named_struct('event_time', CAST(data.event_time AS STRING), 'user', data.user,
                            'action', data.action, 'amount', data.amount,
                            'timestamp', CAST(timestamp AS STRING)))
FROM parsed;
