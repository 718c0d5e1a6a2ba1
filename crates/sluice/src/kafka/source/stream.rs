//! The Kafka source's micro-batch stream (Spark's `KafkaMicroBatchStream`): latest offsets under
//! the read limits, a batch's records by offset range, new partitions and data loss.

use super::*;

pub(super) struct KafkaSource {
    /// Where a new query starts, per partition (resolved once, see `create_source`).
    pub(super) initial: Option<PartitionOffsets>,
    pub(super) initial_file: std::path::PathBuf,
    pub(super) p: KafkaSourceProvider,
    /// Metadata, watermarks and offsets by time.
    pub(super) consumer: Logged<BaseConsumer<KafkaLogContext>>,
    /// Records (assign and poll), on a connection of its own: a broker answers a connection's
    /// requests in order, so a fetch waiting for data (`fetch.wait.max.ms`) would hold up the
    /// offset requests of the next trigger behind it.
    pub(super) fetcher: Logged<BaseConsumer<KafkaLogContext>>,
    /// Whether the broker answered once (then an unreachable broker is waited for).
    pub(super) reached: std::sync::atomic::AtomicBool,
    /// Available-now: the latest offsets when the query started.
    pub(super) available_now: Option<PartitionOffsets>,
    pub(super) last_batch: Instant,
    pub(super) latest: PartitionOffsets,
    /// The query runs on a cluster: its workers read the batches' ranges (`remote.rs`).
    pub(super) on_workers: Option<crate::distributed::ReadOnWorkers>,
}

impl KafkaSource {
    pub(super) fn err(&self, what: &str, e: impl std::fmt::Display) -> SluiceError {
        SluiceError::connector(
            class::KAFKA_CLIENT,
            format!(
                "{what}: {e}. Is the broker at {} running{}?",
                self.p.client[0].1,
                crate::kafka::conf::security_context(&self.p.client)
            ),
        )
    }

    /// A failed client call's error: a refused login names the broker and the mechanism; a
    /// broker that answered before and now does not is `KAFKA_BROKER_UNAVAILABLE`, which the
    /// query waits out.
    pub(super) fn fail(&self, what: &str, f: Failure) -> SluiceError {
        match f {
            Failure::Refused(text) => crate::kafka::conf::refused(&text, &self.p.client),
            Failure::Kafka(e) if self.was_reached() && crate::kafka::log::is_unreachable(&e) => {
                self.unavailable(what, e)
            }
            Failure::Kafka(e) => self.err(what, e),
        }
    }

    pub(super) fn unavailable(&self, what: &str, e: impl std::fmt::Display) -> SluiceError {
        SluiceError::connector(
            class::KAFKA_BROKER_UNAVAILABLE,
            format!(
                "{what}: {e}: the Kafka broker at {} answered before and does not now",
                self.p.client[0].1
            ),
        )
    }

    pub(super) fn was_reached(&self) -> bool {
        self.reached.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long a metadata or offsets call waits: briefly once the broker was reached (the
    /// query then waits out an outage, saying so), else the full timeout.
    pub(super) fn call_timeout(&self) -> Duration {
        if self.was_reached() {
            Duration::from_secs(5)
        } else {
            TIMEOUT
        }
    }

    pub(super) fn partitions(&self) -> Result<Vec<(String, i32)>> {
        let md = within(self.consumer.context(), self.call_timeout(), |t| {
            self.consumer.fetch_metadata(None, t)
        })
        .map_err(|f| self.fail("cannot read Kafka metadata", f))?;
        let mut out = Vec::new();
        for t in md.topics() {
            let wanted = match &self.p.subscription {
                Subscription::Topics(ts) => ts.iter().any(|x| x == t.name()),
                Subscription::Pattern(p) => pattern_matches(p, t.name()),
                Subscription::Assign(a) => a.contains_key(t.name()),
            };
            if !wanted {
                continue;
            }
            for p in t.partitions() {
                if let Subscription::Assign(a) = &self.p.subscription {
                    if !a.get(t.name()).is_some_and(|ps| ps.contains(&p.id())) {
                        continue;
                    }
                }
                out.push((t.name().to_string(), p.id()));
            }
        }
        out.sort();
        Ok(out)
    }

    pub(super) fn watermarks(&self, topic: &str, p: i32) -> Result<(i64, i64)> {
        within(self.consumer.context(), self.call_timeout(), |t| {
            self.consumer.fetch_watermarks(topic, p, t)
        })
        .map_err(|f| self.fail(&format!("cannot read the offsets of {topic}-{p}"), f))
    }

    /// The latest offsets now: (low, high) per partition; a failed fetch is tried again
    /// `fetchOffset.numRetries` times, `fetchOffset.retryIntervalMs` apart (not a refused login).
    pub(super) fn ranges(&self) -> Result<Ranges> {
        let mut attempt = 0;
        loop {
            let got = self.partitions().and_then(|parts| {
                let mut out = Ranges::new();
                for (t, p) in parts {
                    let w = self.watermarks(&t, p)?;
                    out.insert((t, p), w);
                }
                Ok(out)
            });
            match got {
                Ok(r) => {
                    self.reached
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Ok(r);
                }
                Err(e)
                    if attempt < self.p.fetch_retries
                        && !e.is(class::KAFKA_AUTHENTICATION)
                        && !e.is_transient() =>
                {
                    attempt += 1;
                    log::warn!(
                        "{e} (attempt {attempt} of {}; fetchOffset.numRetries)",
                        self.p.fetch_retries + 1
                    );
                    std::thread::sleep(self.p.fetch_retry_interval);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The first offset at or after each (topic, partition, time in ms); None where no record
    /// is that recent.
    pub(super) fn offsets_for_times(
        &self,
        wanted: &[(String, i32, i64)],
    ) -> Result<Vec<Option<i64>>> {
        let mut tpl = TopicPartitionList::new();
        for (t, p, ts) in wanted {
            tpl.add_partition_offset(t, *p, KOffset::Offset(*ts))
                .map_err(|e| self.err("cannot look up offsets by time", e))?;
        }
        // A partition whose lookup failed (its leader moving, a request timing out under load)
        // comes back with an error and no offset: asked again, never taken as "no record that
        // recent", which would fail the query or, with the `latest` strategy, skip records.
        let deadline = Instant::now() + TIMEOUT;
        let got = loop {
            let got = within(self.consumer.context(), TIMEOUT, |t| {
                self.consumer.offsets_for_times(tpl.clone(), t)
            })
            .map_err(|f| self.fail("cannot look up offsets by time", f))?;
            let failed: Vec<String> = wanted
                .iter()
                .filter_map(|(t, p, _)| {
                    let e = got.find_partition(t, *p)?.error().err()?;
                    Some(format!("{t}-{p}: {e}"))
                })
                .collect();
            if failed.is_empty() {
                break got;
            }
            if Instant::now() >= deadline {
                return Err(self.err("cannot look up offsets by time", failed.join(", ")));
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        Ok(wanted
            .iter()
            .map(
                |(t, p, _)| match got.find_partition(t, *p).map(|e| e.offset()) {
                    Some(KOffset::Offset(o)) if o >= 0 => Some(o),
                    _ => None,
                },
            )
            .collect())
    }

    /// The offsets `spec` names for `ranges`' partitions (see [`spec::resolve`]).
    pub(super) fn resolve(
        &self,
        spec: &OffsetSpec,
        side: Side,
        ranges: &Ranges,
    ) -> Result<PartitionOffsets> {
        spec::resolve(spec, side, ranges, self.p.latest_when_unmatched, |w| {
            self.offsets_for_times(w)
        })
    }
}

pub(super) fn get(o: &PartitionOffsets, t: &str, p: i32) -> Option<i64> {
    o.get(t).and_then(|m| m.get(&p)).copied()
}

impl Source for KafkaSource {
    fn read_on_workers(&mut self, on: &crate::distributed::ReadOnWorkers) {
        self.on_workers = Some(on.clone());
    }

    fn default_read_limit(&self) -> ReadLimit {
        match self.p.max_offsets {
            Some(n) => ReadLimit::MaxRows(n),
            None => ReadLimit::AllAvailable,
        }
    }

    fn prepare_for_trigger_available_now(&mut self) -> Result<()> {
        let mut snap = PartitionOffsets::new();
        for ((t, p), (_, high)) in self.ranges()? {
            snap.entry(t).or_default().insert(p, high);
        }
        self.available_now = Some(snap);
        Ok(())
    }

    fn latest_offset(
        &mut self,
        start: Option<&Offset>,
        limit: ReadLimit,
    ) -> Result<Option<Offset>> {
        let ranges = self.ranges()?;
        let start_map = start.map(parse_offsets).transpose()?;
        if start_map.is_none() && self.initial.is_none() {
            let init = self.resolve(&self.p.starting, Side::Starting, &ranges)?;
            if let Some(dir) = self.initial_file.parent() {
                crate::storage::create_dir_all(dir).map_err(|e| {
                    SluiceError::io(crate::error::Fault::Checkpoint, dir.display(), e)
                })?;
            }
            let text = format!("v1\n{}", offsets_json(&init));
            crate::checkpoint::write_atomic_new(&self.initial_file, text.as_bytes())?;
            self.initial = Some(init);
        }
        // Where each partition starts: the logged offset, else the starting offsets (new query),
        // else earliest (a partition added later).
        let mut from = PartitionOffsets::new();
        for ((t, p), (low, high)) in &ranges {
            let s = match (&start_map, &self.initial) {
                (Some(m), _) => get(m, t, *p).unwrap_or(*low),
                (None, Some(init)) => get(init, t, *p).unwrap_or(*low),
                (None, None) => *high,
            };
            from.entry(t.clone()).or_default().insert(*p, s);
        }
        // A logged offset past the end of its partition: the topic was deleted and recreated or
        // truncated. Spark treats it as data loss.
        for ((t, p), (low, high)) in &ranges {
            let f = get(&from, t, *p).unwrap_or(*low);
            if f > *high {
                let msg = format!(
                    "Partition {t}-{p}'s offset was changed from {f} to {high}, some data may have been \
                     missed: the topic was probably deleted and recreated. If you want your streaming \
                     query to continue, set the source option failOnDataLoss to false."
                );
                if self.p.fail_on_data_loss {
                    return Err(SluiceError::input(class::KAFKA_DATA_LOSS, msg));
                }
                log::warn!("{msg} Restarting {t}-{p} from offset {low} (failOnDataLoss=false).");
                from.entry(t.clone()).or_default().insert(*p, *low);
            }
        }
        // Up to: the latest (or the available-now snapshot).
        let mut until = PartitionOffsets::new();
        for ((t, p), (_, high)) in &ranges {
            let cap = self
                .available_now
                .as_ref()
                .and_then(|s| get(s, t, *p))
                .unwrap_or(*high);
            let f = get(&from, t, *p).unwrap_or(0);
            until
                .entry(t.clone())
                .or_default()
                .insert(*p, cap.min(*high).max(f));
        }
        self.latest = until.clone();
        let available: u64 = ranges
            .keys()
            .map(|(t, p)| {
                (get(&until, t, *p).unwrap_or(0) - get(&from, t, *p).unwrap_or(0)).max(0) as u64
            })
            .sum();
        // minOffsetsPerTrigger: wait for enough records, up to maxTriggerDelay.
        if let Some(min) = self.p.min_offsets {
            if available < min
                && self.last_batch.elapsed() < self.p.max_trigger_delay
                && start.is_some()
            {
                return Ok(start.cloned());
            }
        }
        let end = match limit {
            ReadLimit::MaxRows(max) if available > max => {
                // Split the limit across partitions in proportion to what each has.
                let mut end = PartitionOffsets::new();
                let mut given = 0u64;
                let parts: Vec<(String, i32, i64, u64)> = ranges
                    .keys()
                    .map(|(t, p)| {
                        let f = get(&from, t, *p).unwrap_or(0);
                        (
                            t.clone(),
                            *p,
                            f,
                            (get(&until, t, *p).unwrap_or(0) - f).max(0) as u64,
                        )
                    })
                    .collect();
                for (t, p, f, n) in &parts {
                    let share = ((*n as u128 * max as u128) / available as u128) as u64;
                    given += share;
                    end.entry(t.clone())
                        .or_default()
                        .insert(*p, f + share as i64);
                }
                // Hand the rounding remainder out one record at a time.
                let mut left = max - given;
                for (t, p, f, n) in &parts {
                    if left == 0 {
                        break;
                    }
                    let e = end.entry(t.clone()).or_default().entry(*p).or_insert(*f);
                    if ((*e - f) as u64) < *n {
                        *e += 1;
                        left -= 1;
                    }
                }
                end
            }
            _ => until,
        };
        let end_json = offsets_json(&end);
        if start == Some(&end_json) {
            return Ok(start.cloned());
        }
        if start.is_none() && available == 0 {
            // Nothing yet: log the starting position with the first batch that has data.
            return Ok(None);
        }
        self.last_batch = Instant::now();
        Ok(Some(end_json))
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch> {
        // A new query's first range starts at the initial offsets resolved at its first start.
        let start = match start {
            Some(s) => parse_offsets(s)?,
            None => self.initial.clone().unwrap_or_default(),
        };
        let end = parse_offsets(end)?;
        // On a cluster the workers read the ranges, streamed as the plan pulls them (a run of
        // ranges per worker: `minPartitions` does not apply there); else one batch per range.
        let (batches, lazy, lost) = match self.on_workers.clone() {
            Some(on) => {
                let (ranges, lost) = self.ranges_between(&start, &end)?;
                let rows = Arc::new(std::sync::atomic::AtomicU64::new(0));
                let reads = remote::read_on_workers(&self.p, &on, ranges, Arc::clone(&rows))?;
                let report = move || {
                    let n = rows.load(std::sync::atomic::Ordering::Relaxed) as usize;
                    (n, BTreeMap::new())
                };
                let lazy = crate::source::LazyRows::on_workers(
                    kafka_schema_with(self.p.include_headers),
                    reads,
                    Box::new(report),
                );
                (Vec::new(), Some(lazy), lost)
            }
            None => {
                let (batches, lost) = self.read(&start, &end)?;
                (batches, None, lost)
            }
        };
        let mut metrics = BTreeMap::new();
        if self.latest.is_empty() {
            // A replayed batch runs before any latest_offset call of this run.
            if let Ok(ranges) = self.ranges() {
                for ((t, p), (_, high)) in ranges {
                    self.latest.entry(t).or_default().insert(p, high);
                }
            }
        }
        let behind: Vec<i64> = self
            .latest
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |(p, l)| (t, p, l)))
            .map(|(t, p, l)| l - get(&end, t, *p).unwrap_or(*l))
            .collect();
        if !behind.is_empty() {
            metrics.insert(
                "avgOffsetsBehindLatest".into(),
                format!(
                    "{:.1}",
                    behind.iter().sum::<i64>() as f64 / behind.len() as f64
                ),
            );
            metrics.insert(
                "maxOffsetsBehindLatest".into(),
                behind.iter().max().copied().unwrap_or(0).to_string(),
            );
            metrics.insert(
                "minOffsetsBehindLatest".into(),
                behind.iter().min().copied().unwrap_or(0).to_string(),
            );
        }
        if lost > 0 {
            metrics.insert("numRecordsLost".into(), lost.to_string());
        }
        Ok(SourceBatch {
            batches,
            lazy,
            metrics,
        })
    }
}
