-- "A stream from files" + "Writing the stream out" (Structured Streaming in PySpark):
-- JSON files arriving in a directory, one file per trigger, filtered and printed every 5 s.
--
--   mkdir -p data/stream_in && sluice run examples/stream_to_console.sql
--   (or --set input=/some/dir); drop files into the directory; Ctrl-C stops after the batch.

CREATE TABLE events (
  event_time TIMESTAMP,
  user       STRING,
  action     STRING,
  amount     DOUBLE
) WITH (
  connector = 'filesystem',
  path = '${input:-data/stream_in}',
  format = 'json',               -- a stream needs its schema: the columns above
  'maxFilesPerTrigger' = '1'
);

CREATE SINK big_purchases WITH (
  connector = 'console',         -- needs no checkpoint
  'outputMode' = 'append',
  'truncate' = 'false',
  'trigger' = 'processing-time 5 seconds'
) AS
SELECT event_time, user, amount
FROM events
WHERE amount > 10;
