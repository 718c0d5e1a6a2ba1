//! `nexmark`: the Nexmark benchmark's event generator as a streaming source.
//!
//! One deterministic global sequence of events numbered 0, 1, 2, ... follows the standard
//! Nexmark generator (Apache Beam's `NexmarkGenerator`): of every 50 events, event `n` is a
//! person when `n % 50 < 1`, an auction when `n % 50 < 4` and a bid otherwise (1 : 3 : 46).
//! Each source yields the events of one table (`option("table", "person" | "auction" | "bid")`)
//! from the global range, so two sources with the same options (say person and auction for a
//! join) cover the same event time.
//!
//! Options (names are case-insensitive):
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `table` | required | `person`, `auction` or `bid` |
//! | `numEvents` | unbounded | global events in the stream (all tables together) |
//! | `maxEventsPerTrigger` | 1000000 | global events per micro-batch (`ReadLimit::MaxRows`) |
//! | `eventsPerSecond` | 10000 | events per second of *event time*: event `n` is stamped `baseTime + n / eventsPerSecond` |
//! | `baseTime` | `2026-01-01T00:00:00Z` | event time of event 0: RFC 3339, `YYYY-MM-DD HH:MM:SS[.f]` (UTC) or epoch milliseconds |
//! | `seed` | 0 | seed of the generator |
//!
//! Offsets are `{"events":N}`: the number of global events consumed (events `0..N`). A batch
//! `(start, end]` holds the rows of events `start..end` of the source's table. Each event draws
//! its randomness from its own splitmix64 stream seeded by `(seed, n)`, so any range is generated
//! independently and always gives the same rows. A read limit `MaxRows(k)` counts global
//! events, not rows of the table. `Trigger::AvailableNow` ends at `numEvents`; without
//! `numEvents` it runs exactly one more batch (the end is pinned at the first batch's start plus
//! one limit). `Trigger::Once` without `numEvents` also reads one `maxEventsPerTrigger` step.
//!
//! Differences from Beam's generator (all deliberate): no id "leads", so every bid names an
//! auction generated at or before it and every auction or bid names a person generated before
//! it (Beam may pick ids up to 10 ahead); Beam's hot bidder (`base + 1`) is clamped to the last
//! person; `extra` is always empty (Beam pads rows to an average size); auction lengths are drawn
//! in microseconds; prices come from a 4096-entry table of `10^(6u) * 100` times a cubic for
//! the rest of `u` (within one cent of Beam's `round(10^(6u) * 100)`); the random draws (splitmix64, bits shared between small decisions) differ
//! from Java's `Random`, so the values differ from Beam's while the distributions match.
//! Strings come from static pools (names, cities, states, 4 hot + 10000 channels and their urls)
//! except the per-row random `email_address`, `credit_card`, `item_name` and `description`.

use crate::error::class;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::{Offset, ReadLimit, Source, SourceBatch, SourceContext, SourceProvider};
use crate::error::{Result, SluiceError};

/// Events per Nexmark epoch and the slots of each event type inside it.
const PROPORTION_DENOMINATOR: u64 = 50;
const PERSON_PROPORTION: u64 = 1;
const AUCTION_PROPORTION: u64 = 3;
const FIRST_PERSON_ID: i64 = 1000;
const FIRST_AUCTION_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const NUM_CATEGORIES: u64 = 5;
/// Random sellers and bidders are among the last this many persons.
const NUM_ACTIVE_PEOPLE: u64 = 1000;
/// Random bids are for one of the last this many auctions (plus the newest).
const NUM_IN_FLIGHT_AUCTIONS: u64 = 100;
/// Beam's `HOT_AUCTION_RATIO` / `HOT_SELLER_RATIO` / `HOT_BIDDER_RATIO` constants: the hot
/// auction (person) is the first of the newest group of this many.
const HOT_GROUP: u64 = 100;
// Beam's `hotAuctionRatio` 2 (half of the bids go to the hot auction), `hotSellersRatio` 4 and
// `hotBiddersRatio` 4 (3 in 4 auctions / bids by the hot person) and `hotChannelsRatio` 2 are
// drawn as random bits (1 bit nonzero, 2 bits nonzero, 1 bit nonzero).
/// Non-hot bids use one of this many channels (`channel-0` ..), each with its own url.
const CHANNELS_NUMBER: u64 = 10_000;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];

/// Rows per record batch: a batch of the source holds several of at most this many rows.
const BATCH_ROWS: usize = 65_536;
const DEFAULT_MAX_EVENTS_PER_TRIGGER: u64 = 1_000_000;
const DEFAULT_EVENTS_PER_SECOND: u64 = 10_000;
/// 2026-01-01T00:00:00Z in microseconds.
const DEFAULT_BASE_TIME_US: i64 = 1_767_225_600_000_000;

/// One of the three Nexmark tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NexmarkTable {
    /// `person`: a new user (1 in 50 events).
    Person,
    /// `auction`: a new item for sale (3 in 50 events).
    Auction,
    /// `bid`: a bid on an auction (46 in 50 events).
    Bid,
}

impl NexmarkTable {
    /// The table's name: `person`, `auction` or `bid`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Person => "person",
            Self::Auction => "auction",
            Self::Bid => "bid",
        }
    }

    /// The table's schema; timestamps are UTC microseconds.
    pub fn schema(self) -> SchemaRef {
        let ts = || DataType::Timestamp(TimeUnit::Microsecond, None);
        let f = |name: &str, t: DataType| Field::new(name, t, false);
        let fields = match self {
            Self::Person => vec![
                f("id", DataType::Int64),
                f("name", DataType::Utf8),
                f("email_address", DataType::Utf8),
                f("credit_card", DataType::Utf8),
                f("city", DataType::Utf8),
                f("state", DataType::Utf8),
                f("date_time", ts()),
                f("extra", DataType::Utf8),
            ],
            Self::Auction => vec![
                f("id", DataType::Int64),
                f("item_name", DataType::Utf8),
                f("description", DataType::Utf8),
                f("initial_bid", DataType::Int64),
                f("reserve", DataType::Int64),
                f("date_time", ts()),
                f("expires", ts()),
                f("seller", DataType::Int64),
                f("category", DataType::Int64),
                f("extra", DataType::Utf8),
            ],
            Self::Bid => vec![
                f("auction", DataType::Int64),
                f("bidder", DataType::Int64),
                f("price", DataType::Int64),
                f("channel", DataType::Utf8),
                f("url", DataType::Utf8),
                f("date_time", ts()),
                f("extra", DataType::Utf8),
            ],
        };
        Arc::new(Schema::new(fields))
    }

    /// The slots `lo..hi` of this table's events within an epoch of 50 events.
    fn slots(self) -> (u64, u64) {
        match self {
            Self::Person => (0, PERSON_PROPORTION),
            Self::Auction => (PERSON_PROPORTION, PERSON_PROPORTION + AUCTION_PROPORTION),
            Self::Bid => (
                PERSON_PROPORTION + AUCTION_PROPORTION,
                PROPORTION_DENOMINATOR,
            ),
        }
    }

    /// How many of the global events `0..n` belong to this table.
    pub fn count_before(self, n: u64) -> u64 {
        let (lo, hi) = self.slots();
        (n / PROPORTION_DENOMINATOR) * (hi - lo) + (n % PROPORTION_DENOMINATOR).clamp(lo, hi) - lo
    }

    fn parse(v: &str) -> Result<Self> {
        match v.trim().to_ascii_lowercase().as_str() {
            "person" | "people" | "persons" => Ok(Self::Person),
            "auction" | "auctions" => Ok(Self::Auction),
            "bid" | "bids" => Ok(Self::Bid),
            _ => Err(SluiceError::query(
                class::INVALID_OPTION,
                format!(
                    "option table of the nexmark source must be person, auction or bid, got \
                     {v:?}; e.g. .option(\"table\", \"bid\")"
                ),
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Randomness: splitmix64, one stream per event.

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The random stream of one event: splitmix64 started at a hash of (seed, event number).
struct EventRng(u64);

impl EventRng {
    #[inline(always)]
    fn new(key: u64, n: u64) -> Self {
        Self(mix(key ^ n.wrapping_mul(GOLDEN)))
    }
    /// 64 random bits without advancing: the hash the stream started at. Use it at most once,
    /// before the first [`Self::next`].
    #[inline(always)]
    fn seed_bits(&self) -> u64 {
        self.0
    }
    #[inline(always)]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }
    /// Uniform in `0..n` (`n > 0`), Lemire's multiply-shift.
    #[inline(always)]
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// Uniform in `0..n` from 32 random bits (`n` small).
#[inline(always)]
fn below32(bits: u64, n: u64) -> u64 {
    ((bits & 0xFFFF_FFFF) * n) >> 32
}

/// Bits of `u` that index [`price_table`].
const PRICE_TABLE_BITS: u32 = 12;

/// `10^(6 i / 4096) * 100` for `i` in `0..4096`.
fn price_table() -> &'static [f64; 1 << PRICE_TABLE_BITS] {
    static TABLE: OnceLock<[f64; 1 << PRICE_TABLE_BITS]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0.0; 1 << PRICE_TABLE_BITS];
        for (i, v) in t.iter_mut().enumerate() {
            *v = 10f64.powf(6.0 * i as f64 / (1 << PRICE_TABLE_BITS) as f64) * 100.0;
        }
        t
    })
}

/// Beam's `nextPrice`: `round(10^(u * 6) * 100)` cents for a uniform `u` in `[0, 1)` (from the
/// top 53 bits of `bits`), as a table entry for the top 12 bits of `u` times a cubic for the
/// rest (relative error below 1e-11, so no libm call per row).
#[inline(always)]
fn price(table: &[f64; 1 << PRICE_TABLE_BITS], bits: u64) -> i64 {
    let i = (bits >> (64 - PRICE_TABLE_BITS)) as usize;
    // The remaining 41 bits: u - i / 4096 in [0, 1 / 4096).
    let rest = ((bits >> 11) & ((1u64 << (53 - PRICE_TABLE_BITS)) - 1)) as f64
        * (1.0 / (1u64 << 53) as f64);
    let x = rest * (6.0 * std::f64::consts::LN_10);
    let e = 1.0 + x * (1.0 + x * (0.5 + x * (1.0 / 6.0)));
    (table[i] * e + 0.5) as i64
}

/// Beam's `nextString`: 3 to `max_len - 1` chars of `a..z`, about 1 in 13 replaced by
/// `special`; trimmed when `special` is a space.
fn push_random_string(r: &mut EventRng, max_len: u64, special: u8, out: &mut Vec<u8>) {
    let len = 3 + r.below(max_len - 3);
    let start = out.len();
    let mut bits = 0u64;
    for i in 0..len {
        if i % 4 == 0 {
            bits = r.next();
        }
        let c = bits & 0xFFFF;
        bits >>= 16;
        out.push(if ((c & 0xFF) * 13) >> 8 == 0 {
            special
        } else {
            b'a' + (((c >> 8) * 26) >> 8) as u8
        });
    }
    if special == b' ' {
        while out.len() > start && out[out.len() - 1] == b' ' {
            out.pop();
        }
        let lead = out[start..].iter().take_while(|&&b| b == b' ').count();
        if lead > 0 {
            out.drain(start..start + lead);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// String columns.

/// Strings stored back to back (a static pool rows pick from by index).
struct StrPool {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

/// Strings are copied out of a pool in chunks of this many bytes (one vector move each).
const CHUNK: usize = 16;

impl StrPool {
    fn new<S: AsRef<[u8]>>(items: impl IntoIterator<Item = S>) -> Self {
        let mut p = StrPool {
            bytes: Vec::new(),
            ends: vec![0],
        };
        for s in items {
            p.bytes.extend_from_slice(s.as_ref());
            p.ends.push(p.bytes.len() as u32);
        }
        // Room to copy whole chunks past the last entry.
        p.bytes.extend_from_slice(&[0; CHUNK]);
        p
    }
    /// The Utf8 column of the pool entries `idx`.
    fn column(&self, idx: &[u16]) -> Result<ArrayRef> {
        let mut offsets = Vec::with_capacity(idx.len() + 1);
        offsets.push(0i32);
        let mut total = 0usize;
        for &i in idx {
            let i = i as usize;
            total += (self.ends[i + 1] - self.ends[i]) as usize;
            offsets.push(total as i32);
        }
        // Each row is copied in whole chunks, then the bytes past its end are cut off again.
        let mut values = Vec::with_capacity(total + CHUNK);
        for &i in idx {
            let i = i as usize;
            let (src, end) = (self.ends[i] as usize, self.ends[i + 1] as usize);
            let len = values.len() + (end - src);
            let mut o = src;
            while o < end {
                values.extend_from_slice(&self.bytes[o..o + CHUNK]);
                o += CHUNK;
            }
            values.truncate(len);
        }
        Ok(Arc::new(StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(values),
            None,
        )?))
    }
}

struct Pools {
    /// 4 hot channels, then `channel-0` .. `channel-9999`.
    channels: StrPool,
    /// The url of each channel.
    urls: StrPool,
    names: StrPool,
    cities: StrPool,
    states: StrPool,
}

fn pools() -> &'static Pools {
    static POOLS: OnceLock<Pools> = OnceLock::new();
    POOLS.get_or_init(|| {
        let mut r = EventRng::new(0x6E65_786D_6172_6B21, 0);
        let base_url = |r: &mut EventRng| {
            let mut u = b"https://www.nexmark.com/".to_vec();
            push_random_string(r, 5, b'_', &mut u);
            u.push(b'/');
            push_random_string(r, 5, b'_', &mut u);
            u.push(b'/');
            push_random_string(r, 5, b'_', &mut u);
            u.extend_from_slice(b"/item.htm?query=1");
            u
        };
        let mut channels: Vec<Vec<u8>> =
            HOT_CHANNELS.iter().map(|c| c.as_bytes().to_vec()).collect();
        let mut urls: Vec<Vec<u8>> = (0..HOT_CHANNELS.len()).map(|_| base_url(&mut r)).collect();
        for c in 0..CHANNELS_NUMBER as u32 {
            channels.push(format!("channel-{c}").into_bytes());
            let mut u = base_url(&mut r);
            u.extend_from_slice(format!("&channel_id={}", c.reverse_bits()).as_bytes());
            urls.push(u);
        }
        let names = FIRST_NAMES
            .iter()
            .flat_map(|f| LAST_NAMES.iter().map(move |l| format!("{f} {l}")));
        Pools {
            channels: StrPool::new(channels),
            urls: StrPool::new(urls),
            names: StrPool::new(names),
            cities: StrPool::new(US_CITIES),
            states: StrPool::new(US_STATES),
        }
    })
}

/// A Utf8 column built from raw offsets and bytes (every string written here is ASCII).
struct StrCol {
    offsets: Vec<i32>,
    values: Vec<u8>,
}

impl StrCol {
    fn with_capacity(rows: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Self {
            offsets,
            values: Vec::with_capacity(bytes),
        }
    }
    /// Ends the row whose bytes were appended to `values`.
    #[inline(always)]
    fn end_row(&mut self) {
        self.offsets.push(self.values.len() as i32);
    }
    fn finish(self) -> Result<ArrayRef> {
        Ok(Arc::new(StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(self.offsets)),
            Buffer::from_vec(self.values),
            None,
        )?))
    }
}

/// `rows` empty strings (the `extra` column).
fn empty_strings(rows: usize) -> ArrayRef {
    Arc::new(StringArray::new(
        OffsetBuffer::new_zeroed(rows),
        Buffer::from_vec(Vec::<u8>::new()),
        None,
    ))
}

fn i64s(v: Vec<i64>) -> ArrayRef {
    Arc::new(Int64Array::from(v))
}

fn timestamps(v: Vec<i64>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from(v))
}

// ---------------------------------------------------------------------------------------------
// The generator.

/// The deterministic global event sequence: seed, event time of event 0 and event rate.
#[derive(Debug, Clone)]
struct Generator {
    seed: u64,
    key: u64,
    base_time_us: i64,
    events_per_second: u64,
    /// `1_000_000 / events_per_second` when exact.
    delay_us: Option<i64>,
}

impl Generator {
    fn new(seed: u64, base_time_us: i64, events_per_second: u64) -> Self {
        Self {
            seed,
            key: mix(seed ^ 0x6E65_786D_6172_6B00),
            base_time_us,
            events_per_second,
            delay_us: (1_000_000 % events_per_second == 0)
                .then(|| (1_000_000 / events_per_second) as i64),
        }
    }

    /// Event time of event `n` in microseconds.
    #[inline(always)]
    fn time_us(&self, n: u64) -> i64 {
        match self.delay_us {
            Some(d) => self.base_time_us + n as i64 * d,
            None => {
                self.base_time_us + (n as u128 * 1_000_000 / self.events_per_second as u128) as i64
            }
        }
    }

    /// The rows of `table` among the global events `start..end`, in batches of at most
    /// [`BATCH_ROWS`] rows.
    fn generate(
        &self,
        table: NexmarkTable,
        schema: &SchemaRef,
        start: u64,
        end: u64,
    ) -> Result<Vec<RecordBatch>> {
        if end <= start {
            return Ok(Vec::new());
        }
        let rows = (table.count_before(end) - table.count_before(start)) as usize;
        let mut out = Vec::with_capacity(rows.div_ceil(BATCH_ROWS));
        let mut left = rows;
        let mut first_epoch = start / PROPORTION_DENOMINATOR;
        let last_epoch = (end - 1) / PROPORTION_DENOMINATOR;
        while first_epoch <= last_epoch {
            // The epochs whose rows fit into one record batch.
            let (lo, hi) = table.slots();
            let per_epoch = (hi - lo) as usize;
            let take = left.min(BATCH_ROWS);
            let mut epochs_end = first_epoch + (take / per_epoch).max(1) as u64;
            epochs_end = epochs_end.min(last_epoch + 1);
            let from = start.max(first_epoch * PROPORTION_DENOMINATOR);
            let to = end.min(epochs_end * PROPORTION_DENOMINATOR);
            let n_rows = (table.count_before(to) - table.count_before(from)) as usize;
            if n_rows > 0 {
                let batch = match table {
                    NexmarkTable::Person => self.persons(schema, from, to, n_rows)?,
                    NexmarkTable::Auction => self.auctions(schema, from, to, n_rows)?,
                    NexmarkTable::Bid => self.bids(schema, from, to, n_rows)?,
                };
                out.push(batch);
            }
            left -= n_rows;
            first_epoch = epochs_end;
        }
        Ok(out)
    }

    /// Bids of the events `from..to` (`rows` of them).
    fn bids(&self, schema: &SchemaRef, from: u64, to: u64, rows: usize) -> Result<RecordBatch> {
        let pools = pools();
        let prices = price_table();
        let mut auction = vec![0i64; rows];
        let mut bidder = vec![0i64; rows];
        let mut price_col = vec![0i64; rows];
        let mut channel = vec![0u16; rows];
        let mut date_time = vec![0i64; rows];
        let (lo, hi) = NexmarkTable::Bid.slots();
        let mut row = 0;
        let mut epoch = from / PROPORTION_DENOMINATOR;
        while epoch * PROPORTION_DENOMINATOR < to {
            let epoch_start = epoch * PROPORTION_DENOMINATOR;
            let first = from.max(epoch_start + lo);
            let len = to.min(epoch_start + hi).saturating_sub(first) as usize;
            // Beam's lastBase0AuctionId / lastBase0PersonId for a bid of this epoch.
            let last_auction = epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1;
            let last_person = epoch * PERSON_PROPORTION + PERSON_PROPORTION - 1;
            let hot_auction = (last_auction / HOT_GROUP * HOT_GROUP) as i64 + FIRST_AUCTION_ID;
            let min_auction = last_auction.saturating_sub(NUM_IN_FLIGHT_AUCTIONS);
            let auction_span = last_auction - min_auction + 1;
            let hot_bidder =
                (last_person / HOT_GROUP * HOT_GROUP + 1).min(last_person) as i64 + FIRST_PERSON_ID;
            let num_people = last_person + 1;
            let active = num_people.min(NUM_ACTIVE_PEOPLE);
            let first_active = num_people - active;
            let a = &mut auction[row..row + len];
            let b = &mut bidder[row..row + len];
            let p = &mut price_col[row..row + len];
            let c = &mut channel[row..row + len];
            let t = &mut date_time[row..row + len];
            for j in 0..len {
                let n = first + j as u64;
                let mut r = EventRng::new(self.key, n);
                let flags = r.seed_bits();
                let picks = r.next();
                a[j] = if flags & 1 != 0 {
                    hot_auction
                } else {
                    (min_auction + below32(picks, auction_span)) as i64 + FIRST_AUCTION_ID
                };
                b[j] = if (flags >> 1) & 3 != 0 {
                    hot_bidder
                } else {
                    (first_active + below32(picks >> 32, active)) as i64 + FIRST_PERSON_ID
                };
                p[j] = price(prices, r.next());
                c[j] = if (flags >> 3) & 1 != 0 {
                    ((flags >> 4) & 3) as u16
                } else {
                    (HOT_CHANNELS.len() as u64 + below32(flags >> 32, CHANNELS_NUMBER)) as u16
                };
                t[j] = self.time_us(n);
            }
            row += len;
            epoch += 1;
        }
        debug_assert_eq!(row, rows);
        Ok(RecordBatch::try_new(
            schema.clone(),
            vec![
                i64s(auction),
                i64s(bidder),
                i64s(price_col),
                pools.channels.column(&channel)?,
                pools.urls.column(&channel)?,
                timestamps(date_time),
                empty_strings(rows),
            ],
        )?)
    }

    /// Auctions of the events `from..to` (`rows` of them).
    fn auctions(&self, schema: &SchemaRef, from: u64, to: u64, rows: usize) -> Result<RecordBatch> {
        let prices = price_table();
        let mut id = Vec::with_capacity(rows);
        let mut item_name = StrCol::with_capacity(rows, rows * 12);
        let mut description = StrCol::with_capacity(rows, rows * 52);
        let mut initial_bid = Vec::with_capacity(rows);
        let mut reserve = Vec::with_capacity(rows);
        let mut date_time = Vec::with_capacity(rows);
        let mut expires = Vec::with_capacity(rows);
        let mut seller = Vec::with_capacity(rows);
        let mut category = Vec::with_capacity(rows);
        // Beam's auction length: uniform with a mean of the event time it takes to generate
        // NUM_IN_FLIGHT_AUCTIONS more auctions.
        let events_for_auctions =
            NUM_IN_FLIGHT_AUCTIONS * PROPORTION_DENOMINATOR / AUCTION_PROPORTION;
        let (lo, hi) = NexmarkTable::Auction.slots();
        let mut epoch = from / PROPORTION_DENOMINATOR;
        loop {
            let epoch_start = epoch * PROPORTION_DENOMINATOR;
            if epoch_start >= to {
                break;
            }
            let last_person = epoch * PERSON_PROPORTION + PERSON_PROPORTION - 1;
            let num_people = last_person + 1;
            let active = num_people.min(NUM_ACTIVE_PEOPLE);
            for n in from.max(epoch_start + lo)..to.min(epoch_start + hi) {
                let mut r = EventRng::new(self.key, n);
                id.push(
                    (epoch * AUCTION_PROPORTION + (n - epoch_start - lo)) as i64 + FIRST_AUCTION_ID,
                );
                let s = if r.next() & 3 != 0 {
                    last_person / HOT_GROUP * HOT_GROUP
                } else {
                    num_people - active + r.below(active)
                };
                seller.push(s as i64 + FIRST_PERSON_ID);
                category.push(FIRST_CATEGORY_ID + r.below(NUM_CATEGORIES) as i64);
                let initial = price(prices, r.next());
                initial_bid.push(initial);
                let t = self.time_us(n);
                date_time.push(t);
                let horizon = self.time_us(n + events_for_auctions) - t;
                expires.push(t + 1 + r.below((horizon as u64 * 2).max(1)) as i64);
                push_random_string(&mut r, 20, b' ', &mut item_name.values);
                item_name.end_row();
                push_random_string(&mut r, 100, b' ', &mut description.values);
                description.end_row();
                reserve.push(initial + price(prices, r.next()));
            }
            epoch += 1;
        }
        debug_assert_eq!(id.len(), rows);
        Ok(RecordBatch::try_new(
            schema.clone(),
            vec![
                i64s(id),
                item_name.finish()?,
                description.finish()?,
                i64s(initial_bid),
                i64s(reserve),
                timestamps(date_time),
                timestamps(expires),
                i64s(seller),
                i64s(category),
                empty_strings(rows),
            ],
        )?)
    }

    /// Persons of the events `from..to` (`rows` of them).
    fn persons(&self, schema: &SchemaRef, from: u64, to: u64, rows: usize) -> Result<RecordBatch> {
        let pools = pools();
        let mut id = Vec::with_capacity(rows);
        let mut name = Vec::with_capacity(rows);
        let mut email = StrCol::with_capacity(rows, rows * 12);
        let mut credit_card = StrCol::with_capacity(rows, rows * 19);
        let mut city = Vec::with_capacity(rows);
        let mut state = Vec::with_capacity(rows);
        let mut date_time = Vec::with_capacity(rows);
        let mut epoch = from.div_ceil(PROPORTION_DENOMINATOR);
        while epoch * PROPORTION_DENOMINATOR < to {
            let n = epoch * PROPORTION_DENOMINATOR;
            let mut r = EventRng::new(self.key, n);
            id.push((epoch * PERSON_PROPORTION) as i64 + FIRST_PERSON_ID);
            let picks = r.next();
            name.push(below32(picks, (FIRST_NAMES.len() * LAST_NAMES.len()) as u64) as u16);
            city.push(below32(picks >> 32, US_CITIES.len() as u64) as u16);
            state.push(below32(r.next(), US_STATES.len() as u64) as u16);
            push_random_string(&mut r, 7, b' ', &mut email.values);
            email.values.push(b'@');
            push_random_string(&mut r, 5, b' ', &mut email.values);
            email.values.extend_from_slice(b".com");
            email.end_row();
            for group in 0..4 {
                if group > 0 {
                    credit_card.values.push(b' ');
                }
                let v = r.below(10_000);
                for d in [v / 1000, v / 100 % 10, v / 10 % 10, v % 10] {
                    credit_card.values.push(b'0' + d as u8);
                }
            }
            credit_card.end_row();
            date_time.push(self.time_us(n));
            epoch += 1;
        }
        debug_assert_eq!(id.len(), rows);
        Ok(RecordBatch::try_new(
            schema.clone(),
            vec![
                i64s(id),
                pools.names.column(&name)?,
                email.finish()?,
                credit_card.finish()?,
                pools.cities.column(&city)?,
                pools.states.column(&state)?,
                timestamps(date_time),
                empty_strings(rows),
            ],
        )?)
    }
}

// ---------------------------------------------------------------------------------------------
// Options, provider and source.

fn opt_str<'a>(options: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim())
}

fn opt_u64(options: &HashMap<String, String>, key: &str, what: &str) -> Result<Option<u64>> {
    let Some(v) = opt_str(options, key) else {
        return Ok(None);
    };
    v.replace('_', "").parse::<u64>().map(Some).map_err(|_| {
        SluiceError::query(
            class::INVALID_OPTION,
            format!("option {key} of the nexmark source must be {what}, got {v:?}"),
        )
    })
}

fn parse_base_time_us(v: &str) -> Result<i64> {
    if let Ok(ms) = v.parse::<i64>() {
        return Ok(ms * 1000);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(t.timestamp_micros());
    }
    for fmt in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(v, fmt) {
            return Ok(t.and_utc().timestamp_micros());
        }
    }
    Err(SluiceError::query(
        class::INVALID_OPTION,
        format!(
            "option baseTime of the nexmark source must be a timestamp such as \
             2026-01-01T00:00:00Z or 2026-01-01 00:00:00 (UTC), or epoch milliseconds, got {v:?}"
        ),
    ))
}

/// `session.read_stream().format("nexmark").option("table", "bid")`: see the module docs.
#[derive(Debug, Clone)]
pub struct NexmarkSourceProvider {
    table: NexmarkTable,
    generator: Arc<Generator>,
    num_events: Option<u64>,
    max_events_per_trigger: u64,
    schema: SchemaRef,
}

impl NexmarkSourceProvider {
    /// A nexmark source from its options (see the module docs); `table` is required.
    pub fn try_new(options: &HashMap<String, String>) -> Result<Self> {
        let table = match opt_str(options, "table") {
            Some(v) => NexmarkTable::parse(v)?,
            None => {
                return Err(SluiceError::query(
                    class::INVALID_OPTION,
                    "the nexmark source needs option table: person, auction or bid, e.g. \
                     .option(\"table\", \"bid\")",
                ))
            }
        };
        let num_events = opt_u64(
            options,
            "numEvents",
            "a non-negative integer (global events of all tables; omit it for an unbounded stream)",
        )?;
        let max_events_per_trigger = opt_u64(
            options,
            "maxEventsPerTrigger",
            "a positive integer (global events per micro-batch), e.g. 1000000",
        )?
        .unwrap_or(DEFAULT_MAX_EVENTS_PER_TRIGGER);
        if max_events_per_trigger == 0 {
            return Err(SluiceError::query(
                class::INVALID_OPTION,
                "option maxEventsPerTrigger of the nexmark source must be positive, got 0; \
                 use e.g. 1000000 or omit it",
            ));
        }
        let events_per_second = opt_u64(
            options,
            "eventsPerSecond",
            "a positive integer (events per second of event time), e.g. 10000",
        )?
        .unwrap_or(DEFAULT_EVENTS_PER_SECOND);
        if events_per_second == 0 {
            return Err(SluiceError::query(
                class::INVALID_OPTION,
                "option eventsPerSecond of the nexmark source must be positive, got 0; use e.g. \
                 10000 or omit it",
            ));
        }
        let seed = match opt_str(options, "seed") {
            None => 0,
            Some(v) => v
                .parse::<u64>()
                .or_else(|_| v.parse::<i64>().map(|s| s as u64))
                .map_err(|_| {
                    SluiceError::query(
                        class::INVALID_OPTION,
                        format!("option seed of the nexmark source must be an integer, got {v:?}"),
                    )
                })?,
        };
        let base_time_us = match opt_str(options, "baseTime") {
            None => DEFAULT_BASE_TIME_US,
            Some(v) => parse_base_time_us(v)?,
        };
        Ok(Self {
            table,
            generator: Arc::new(Generator::new(seed, base_time_us, events_per_second)),
            num_events,
            max_events_per_trigger,
            schema: table.schema(),
        })
    }

    /// The table this source yields.
    pub fn table(&self) -> NexmarkTable {
        self.table
    }

    /// The rows of this provider's table among the global events `start..end` (what a batch
    /// `({"events":start}, {"events":end}]` holds), in record batches of at most 65536 rows.
    pub fn generate(&self, start: u64, end: u64) -> Result<Vec<RecordBatch>> {
        self.generator
            .generate(self.table, &self.schema, start, end)
    }
}

impl SourceProvider for NexmarkSourceProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn description(&self) -> String {
        let num_events = match self.num_events {
            Some(n) => n.to_string(),
            None => "unbounded".into(),
        };
        format!(
            "NexmarkSource[table={}, numEvents={num_events}, maxEventsPerTrigger={}, \
             eventsPerSecond={}, seed={}]",
            self.table.name(),
            self.max_events_per_trigger,
            self.generator.events_per_second,
            self.generator.seed
        )
    }
    fn kind(&self) -> &'static str {
        "nexmark"
    }
    fn create_source(&self, _ctx: &SourceContext) -> Result<Box<dyn Source>> {
        Ok(Box::new(NexmarkSource {
            p: self.clone(),
            available_now: false,
            available_now_end: None,
        }))
    }
}

fn events_offset(n: u64) -> Offset {
    serde_json::json!({ "events": n })
}

fn parse_events_offset(o: Option<&Offset>) -> Result<u64> {
    match o {
        None => Ok(0),
        Some(v) => v.get("events").and_then(|x| x.as_u64()).ok_or_else(|| {
            SluiceError::checkpoint(
                class::CHECKPOINT_CORRUPT_LOG,
                format!(
                    "a nexmark source offset must be {{\"events\":N}}, got {v}; restore the \
                     offsets log or use a new checkpoint"
                ),
            )
        }),
    }
}

struct NexmarkSource {
    p: NexmarkSourceProvider,
    available_now: bool,
    /// AvailableNow without numEvents: the pinned end.
    available_now_end: Option<u64>,
}

impl Source for NexmarkSource {
    fn default_read_limit(&self) -> ReadLimit {
        ReadLimit::MaxRows(self.p.max_events_per_trigger)
    }
    fn prepare_for_trigger_available_now(&mut self) -> Result<()> {
        self.available_now = true;
        self.available_now_end = None;
        Ok(())
    }
    fn latest_offset(
        &mut self,
        start: Option<&Offset>,
        limit: ReadLimit,
    ) -> Result<Option<Offset>> {
        let s = parse_events_offset(start)?;
        let step = match limit {
            ReadLimit::MaxRows(k) => k.max(1),
            ReadLimit::AllAvailable if self.p.num_events.is_some() => u64::MAX,
            _ => self.p.max_events_per_trigger,
        };
        let mut cap = self.p.num_events.unwrap_or(u64::MAX);
        if self.available_now && self.p.num_events.is_none() {
            cap = *self
                .available_now_end
                .get_or_insert_with(|| s.saturating_add(step));
        }
        let end = s.saturating_add(step).min(cap);
        if end <= s {
            return Ok(start.cloned());
        }
        Ok(Some(events_offset(end)))
    }
    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch> {
        let s = parse_events_offset(start)?;
        let e = parse_events_offset(Some(end))?;
        Ok(SourceBatch {
            batches: self.p.generate(s, e)?,
            ..Default::default()
        })
    }
}

#[cfg(test)]
#[path = "nexmark_tests.rs"]
mod tests;
