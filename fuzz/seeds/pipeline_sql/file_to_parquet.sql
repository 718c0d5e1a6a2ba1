-- A stateless file-to-parquet query run as an incremental batch job ("Use trigger(once=True)":
-- everything available in one batch, then stop; schedule it hourly). The checkpoint holds
-- metadata, offsets/N, commits/N and sources/0/N (the files each batch took), so each run reads
-- exactly the files that arrived since the last one, and the file sink's _spark_metadata
-- manifest keeps a re-run batch from writing twice.
--
--   sluice run examples/file_to_parquet.sql --set input=data/stream_in --set output=data/events

CREATE TABLE events (
  event_time TIMESTAMP,
  user       STRING,
  action     STRING,
  amount     DOUBLE
) WITH (
  connector = 'filesystem',
  path = '${input:-data/stream_in}',
  format = 'json'
);

-- RisingWave's short form: CREATE SINK name FROM table WITH (...).
CREATE SINK events_parquet FROM events WITH (
  connector = 'filesystem',
  format = 'parquet',
  path = '${output:-data/events_parquet}',
  checkpoint = '${checkpoint:-data/events_parquet_checkpoint}',
  'trigger' = 'once'
);
