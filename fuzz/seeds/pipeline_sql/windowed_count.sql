-- "Try it on a small dataset" (Structured Streaming: micro-batches, state & exactly-once):
-- 5-minute windows with a 10-minute watermark, update mode, run until caught up. Run it after
-- each new file: with 1.json (12:01, 12:02, 12:07) it prints (12:00, 2) (12:05, 1); with 2.json
-- (12:20 and a late 12:03) (12:00, 3) (12:20, 1); with 3.json (12:04, behind the 12:10
-- watermark) nothing: the row is dropped and counted in numRowsDroppedByWatermark.
--
--   sluice run examples/windowed_count.sql --set events=/tmp/x/events --set checkpoint=/tmp/x/checkpoint

SET 'spark.sql.shuffle.partitions' = '2';   -- state partitions, fixed at the first run

CREATE TABLE events (
  ts TIMESTAMP,
  WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE
) WITH (
  connector = 'filesystem',
  path = '${events:-events}',
  format = 'json'
);

CREATE SINK counts WITH (
  connector = 'console',
  'outputMode' = 'update',
  'trigger' = 'available-now',
  checkpoint = '${checkpoint:-checkpoint}'
) AS
SELECT window.start AS `start`, count(*) AS count
FROM events
GROUP BY window(ts, '5 minutes');
