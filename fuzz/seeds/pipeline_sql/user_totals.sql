-- "Output modes" (Structured Streaming in PySpark): a running total per user. Append would be
-- refused (an aggregation without a watermark never has final rows); complete mode prints the
-- whole result table at every trigger.
--
--   sluice run examples/user_totals.sql --set input=data/stream_in

CREATE TABLE events (
  event_time TIMESTAMP,
  user       STRING,
  action     STRING,
  amount     DOUBLE
) WITH (
  connector = 'filesystem',
  path = '${input:-data/stream_in}',
  format = 'json',
  'maxFilesPerTrigger' = '1'
);

CREATE SINK user_totals WITH (
  connector = 'console',
  'outputMode' = 'complete'
) AS
SELECT user, sum(amount) AS total
FROM events
GROUP BY user;
