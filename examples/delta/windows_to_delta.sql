-- Closed 5-minute windows per user into a Delta table partitioned by day:
--   sluice run examples/delta/windows_to_delta.sql --set input=IN_DIR --set output=TABLE_DIR \
--     --set ckpt=CHECKPOINT_DIR
--   scripts/check-delta-with-spark TABLE_DIR     # Spark 3.5 + Delta 3.2 and Python deltalake
-- (the `sluice` binary built with the `delta` feature, as scripts/test builds it).
CREATE TABLE events (ts TIMESTAMP, user STRING, amount DOUBLE,
  WATERMARK FOR ts AS ts - INTERVAL '1' MINUTE)
WITH (connector = 'filesystem', path = '${input}', format = 'json');
CREATE SINK windows WITH (connector = 'delta', path = '${output}', checkpoint = '${ckpt}',
  'partitionBy' = 'day', trigger = 'available-now', outputMode = 'append') AS
SELECT CAST(CAST(window.start AS DATE) AS STRING) AS day, user, window.start AS window_start,
       round(sum(amount), 2) AS total, count(*) AS n
FROM events GROUP BY window(ts, '5 minutes'), user;
