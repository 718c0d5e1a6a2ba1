-- "Windows and watermarks" + "Checkpoints" (Structured Streaming in PySpark): per-minute totals
-- per user over event time, rows up to 2 minutes late accepted; a window is written to parquet
-- once the watermark passes its end (append), and the checkpoint keeps offsets, commits and the
-- window state, so a restart goes on exactly where it stopped.
--
--   sluice run examples/windowed_to_parquet.sql
--   sluice run examples/windowed_to_parquet.sql --set trigger=available-now   (catch up, stop)

CREATE TABLE events (
  event_time TIMESTAMP,
  user       STRING,
  action     STRING,
  amount     DOUBLE,
  WATERMARK FOR event_time AS event_time - INTERVAL '2' MINUTE
) WITH (
  connector = 'filesystem',
  path = '${input:-data/stream_in}',
  format = 'json',
  'maxFilesPerTrigger' = '1'
);

CREATE SINK windowed_totals WITH (
  connector = 'filesystem',
  format = 'parquet',
  path = '${output:-data/stream_out}',
  checkpoint = '${checkpoint:-data/checkpoint}',
  'outputMode' = 'append',
  'trigger' = '${trigger:-processing-time 10 seconds}'
) AS
SELECT window.start AS `start`, window.end AS `end`, user,
       sum(amount) AS total, count(*) AS events
FROM events
GROUP BY window(event_time, '1 minute'), user;
