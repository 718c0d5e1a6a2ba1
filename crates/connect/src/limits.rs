//! The server's limits on what a client sends, as Spark Connect's server has them, each refused
//! with an error that names the limit and the flag that raises it:
//!
//! - a request's size: Spark's `spark.connect.grpc.maxInboundMessageSize` (128 MiB), tonic's
//!   `max_decoding_message_size`, whose own error [`explain_too_large`] rewrites;
//! - how deeply a request's messages nest (a plan of chained `withColumn`s nests two messages a
//!   step): Spark's `spark.connect.grpc.marshallerRecursionLimit` (1024). prost's own limit is a
//!   fixed 100 (so ~49 chained steps failed), which the build turns off (`no-recursion-limit`);
//!   [`DepthLimitedCodec`] measures the nesting from the wire format before prost decodes
//!   ([`nesting_depth`]: linear time, a stack of at most `limit + 2` frames of its own), so a
//!   hostile request can never recurse deeper than the limit, and the server's threads get a
//!   stack for that depth ([`thread_stack_size`]).
//!
//! The session and query limits (`--max-sessions`, `--max-queries`) are the service's
//! (`server.rs`, `streaming.rs`); their errors are made here too, so all of them read alike.

use std::marker::PhantomData;

use tonic::body::Body;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::codegen::http;
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use crate::error::{java, ConnectError};

/// Spark's `spark.connect.grpc.maxInboundMessageSize` default: 128 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 128 * 1024 * 1024;
/// Spark's `spark.connect.grpc.marshallerRecursionLimit` default: 1024 nested messages.
pub const DEFAULT_MAX_PLAN_DEPTH: usize = 1024;
/// The deepest `--max-plan-depth` accepted: the server's threads get a stack for the depth
/// allowed ([`thread_stack_size`]), so this bounds their size (390 MiB, reserved, not used).
pub const MAX_PLAN_DEPTH_CEILING: usize = 8 * 1024;

/// The stack each of the server's threads (the runtime's and the blocking pool's, where requests
/// are decoded, planned and dropped) gets for requests nested `max_depth` deep (prost may
/// recurse [`SPECULATION_SLACK`] levels more into a malformed one): 48 KiB a level, twice what
/// a debug build was measured to need (a 1023-level plan decoded, planned and run overflowed 16
/// KiB a level, not 24), and never less than 8 MiB. Address space only: pages are used as they
/// are touched (54 MiB of it a thread for the default 1024).
pub fn thread_stack_size(max_depth: usize) -> usize {
    ((max_depth.min(MAX_PLAN_DEPTH_CEILING) + SPECULATION_SLACK) * 48 * 1024).max(8 << 20)
}

/// The error for a request of `found` bytes over `limit`.
pub fn message_too_large(found: Option<usize>, limit: usize) -> ConnectError {
    let found = found.map_or_else(|| "larger".to_string(), |f| format!("{f} bytes"));
    ConnectError {
        code: Code::ResourceExhausted,
        ..ConnectError::new(
            java::ILLEGAL_ARGUMENT,
            sluice::error::class::CONNECT_LIMIT_EXCEEDED_MESSAGE_SIZE,
            format!(
                "the request is {found}, over this server's limit of {limit} bytes per message \
                 (Spark's spark.connect.grpc.maxInboundMessageSize): raise it with `sluice \
                 connect --max-message-size BYTES`, or send less in one request"
            ),
        )
    }
}

/// The error for a request nested deeper than `limit`.
pub fn plan_too_deep(limit: usize) -> ConnectError {
    ConnectError {
        code: Code::InvalidArgument,
        ..ConnectError::new(
            java::ILLEGAL_ARGUMENT,
            sluice::error::class::CONNECT_LIMIT_EXCEEDED_PLAN_DEPTH,
            format!(
                "the request's messages nest deeper than this server's limit of {limit} levels \
                 (Spark's spark.connect.grpc.marshallerRecursionLimit; a chained DataFrame call \
                 such as withColumn nests two): raise it with `sluice connect --max-plan-depth \
                 N` (at most {MAX_PLAN_DEPTH_CEILING}), or build the DataFrame in fewer steps \
                 (one withColumns or select with many columns instead of a chain)"
            ),
        )
    }
}

/// The error for a new session beyond `limit`.
pub fn too_many_sessions(limit: usize) -> ConnectError {
    ConnectError {
        code: Code::ResourceExhausted,
        ..ConnectError::new(
            java::INTERNAL,
            sluice::error::class::CONNECT_LIMIT_EXCEEDED_SESSIONS,
            format!(
                "this server has {limit} sessions open, its limit, and none has been idle long \
                 enough to end (an hour without a call or an active query): end sessions that \
                 are done with spark.stop(), or raise the limit with `sluice connect \
                 --max-sessions N`"
            ),
        )
    }
}

/// The error for a streaming query started beyond `limit` active ones.
pub fn too_many_queries(limit: usize) -> ConnectError {
    ConnectError {
        code: Code::ResourceExhausted,
        ..ConnectError::new(
            java::ILLEGAL_ARGUMENT,
            sluice::error::class::CONNECT_LIMIT_EXCEEDED_STREAMING_QUERIES,
            format!(
                "this server runs {limit} streaming queries, its limit (across all sessions): \
                 stop one (query.stop()), or raise the limit with `sluice connect --max-queries \
                 N`"
            ),
        )
    }
}

/// tonic's refusal of a request over `max_decoding_message_size` ("Error, decoded message length
/// too large: found N bytes, the limit is: M bytes", `OUT_OF_RANGE`) as the server's own error,
/// which names the limit and the flag; any other response is returned as it is. The refusal
/// is a trailers-only response (the status in the headers), as tonic sends an error before any
/// message.
pub fn explain_too_large(limit: usize, response: http::Response<Body>) -> http::Response<Body> {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    const TONIC: &str = "decoded message length too large: found ";
    match status.message().split_once(TONIC) {
        Some((_, rest)) if status.code() == Code::OutOfRange => {
            let found = rest
                .split_once(' ')
                .and_then(|(n, _)| n.parse::<usize>().ok());
            message_too_large(found, limit).into_status().into_http()
        }
        _ => response,
    }
}

/// Prost's codec, whose decoder first checks how deeply the message nests
/// ([`nesting_depth`]) and refuses one deeper than the limit ([`plan_too_deep`]).
#[derive(Debug)]
pub struct DepthLimitedCodec<E, D> {
    max_depth: usize,
    _types: PhantomData<(E, D)>,
}

impl<E, D> DepthLimitedCodec<E, D> {
    /// A codec refusing messages nested deeper than `max_depth`.
    pub fn new(max_depth: usize) -> Self {
        Self {
            max_depth,
            _types: PhantomData,
        }
    }
}

/// The decoder of [`DepthLimitedCodec`].
#[derive(Debug)]
pub struct DepthLimitedDecoder<D> {
    max_depth: usize,
    inner: ProstDecoder<D>,
}

impl<E, D> Codec for DepthLimitedCodec<E, D>
where
    E: prost::Message + Send + 'static,
    D: prost::Message + Default + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = ProstEncoder<E>;
    type Decoder = DepthLimitedDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<E, D>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        DepthLimitedDecoder {
            max_depth: self.max_depth,
            inner: ProstCodec::<E, D>::default().decoder(),
        }
    }
}

impl<D: prost::Message + Default + Send + 'static> Decoder for DepthLimitedDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        use bytes::Buf;
        if nesting_depth(buf.chunk(), self.max_depth) > self.max_depth {
            return Err(plan_too_deep(self.max_depth).into_status());
        }
        self.inner.decode(buf)
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.inner.buffer_settings()
    }
}

/// Levels past the limit that [`nesting_depth`] reads on speculation before it refuses: a
/// string or bytes field read as a message may seem to nest a few levels (in `SELECT`, `S` is a
/// start-group key), so a plan at the limit with a string in its last message is not refused
/// for that; nesting this far past the limit, real or not, is refused, so prost never recurses
/// deeper than `limit + SPECULATION_SLACK` levels.
pub const SPECULATION_SLACK: usize = 128;

/// One message being read by [`nesting_depth`].
struct Frame {
    /// Where its bytes end (a group's: its parent's end).
    end: usize,
    /// Its nesting level: the top message 0, a message in it 1, ...
    level: usize,
    /// A length-delimited field read as a message on speculation (the wire format does not say
    /// whether it is a message, a string or bytes): if it does not parse, it was bytes.
    speculative: bool,
    /// A group's field number (its end is the matching end-group key).
    group: Option<u64>,
    /// The deepest level of the messages in it that parsed whole (its own, once it does).
    deepest: usize,
}

fn varint(bytes: &[u8], pos: &mut usize, end: usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        if *pos >= end {
            return None;
        }
        let b = bytes[*pos];
        *pos += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(value);
        }
    }
    None
}

/// How deeply the protobuf message `bytes` nests, counting the top message as 0, a message
/// field in it as 1, and so on; groups count as messages (prost recurses into them too).
///
/// The wire format does not tell a nested message from a string or bytes, so every non-empty
/// length-delimited field is read as a message on speculation, and counted as one only if it
/// parses whole (a field that does not is skipped as bytes, not read again: each byte is read
/// once). For a real message this is the depth prost decodes (a string that happens to parse
/// whole may count a level or two more). Whatever is read, parsed whole or not, is read at most
/// [`SPECULATION_SLACK`] levels past `limit`: anything nested further is answered as too deep
/// (`> limit`) at once, as prost would recurse into it before finding it malformed. So the
/// stack of frames here, and prost's recursion for any message this lets through, stay within
/// `limit + SPECULATION_SLACK` levels. A malformed message gives the depth read so far (prost
/// then reports what is wrong with it).
pub fn nesting_depth(bytes: &[u8], limit: usize) -> usize {
    let cap = limit.saturating_add(SPECULATION_SLACK);
    let too_deep = cap.saturating_add(1);
    let mut stack = vec![Frame {
        end: bytes.len(),
        level: 0,
        speculative: false,
        group: None,
        deepest: 0,
    }];
    let mut pos = 0usize;
    // The deepest message that parsed whole anywhere: the answer for a malformed message.
    let mut seen = 0usize;
    // A message parsed whole: its depth goes to its parent. None: it was the top one.
    let complete = |stack: &mut Vec<Frame>, seen: &mut usize| -> Option<usize> {
        let done = stack.pop()?;
        let depth = done.deepest.max(done.level);
        *seen = (*seen).max(depth);
        match stack.last_mut() {
            Some(parent) => {
                parent.deepest = parent.deepest.max(depth);
                None
            }
            None => Some(depth),
        }
    };
    loop {
        let Some(top) = stack.last() else {
            return seen;
        };
        let (end, level, group) = (top.end, top.level, top.group);
        let parsed = if pos == end {
            if group.is_none() {
                if let Some(depth) = complete(&mut stack, &mut seen) {
                    return depth;
                }
                continue;
            }
            // A group must end with its end-group key.
            None
        } else {
            (|| -> Option<()> {
                let key = varint(bytes, &mut pos, end)?;
                let (field, wire) = (key >> 3, key & 7);
                if field == 0 {
                    return None;
                }
                match wire {
                    0 => {
                        varint(bytes, &mut pos, end)?;
                    }
                    1 | 5 => {
                        let n = if wire == 1 { 8 } else { 4 };
                        if end - pos < n {
                            return None;
                        }
                        pos += n;
                    }
                    2 => {
                        let len = usize::try_from(varint(bytes, &mut pos, end)?).ok()?;
                        if end - pos < len {
                            return None;
                        }
                        if len == 0 {
                            // Nothing to recurse into.
                            return Some(());
                        }
                        stack.push(Frame {
                            end: pos + len,
                            level: level + 1,
                            speculative: true,
                            group: None,
                            deepest: 0,
                        });
                    }
                    3 => stack.push(Frame {
                        end,
                        level: level + 1,
                        speculative: false,
                        group: Some(field),
                        deepest: 0,
                    }),
                    4 => {
                        if group != Some(field) {
                            return None;
                        }
                        // Groups are never the top message.
                        complete(&mut stack, &mut seen);
                    }
                    _ => return None,
                }
                Some(())
            })()
        };
        if stack.last().is_some_and(|f| f.level > cap) {
            return too_deep;
        }
        if parsed.is_none() {
            // The innermost speculative message did not parse: it was bytes; on after it. None
            // left: the message is malformed.
            loop {
                match stack.pop() {
                    Some(frame) if frame.speculative => {
                        pos = frame.end;
                        break;
                    }
                    Some(_) => {}
                    None => return seen,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    use crate::proto;

    /// A relation of `steps` limits over a SQL leaf: two messages a step.
    fn chain(steps: usize) -> proto::Relation {
        let mut rel = proto::Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
                query: "SELECT 1 AS one".into(),
                ..Default::default()
            })),
        };
        for _ in 0..steps {
            rel = proto::Relation {
                common: None,
                rel_type: Some(proto::relation::RelType::Limit(Box::new(proto::Limit {
                    input: Some(Box::new(rel)),
                    limit: 5,
                }))),
            };
        }
        rel
    }

    #[test]
    fn the_depth_of_a_plan_is_two_levels_a_step_and_strings_are_not_messages() {
        // Relation(0) > Sql(1), whose query string does not parse as a message.
        assert_eq!(nesting_depth(&chain(0).encode_to_vec(), 1024), 1);
        // Relation(0) > Limit(1) > Relation(2) > Sql(3).
        assert_eq!(nesting_depth(&chain(1).encode_to_vec(), 1024), 3);
        assert_eq!(nesting_depth(&chain(100).encode_to_vec(), 1024), 201);
        // The depth is exact around the limit; far past it the count stops (limit + slack + 1).
        assert_eq!(nesting_depth(&chain(100).encode_to_vec(), 201), 201);
        assert_eq!(nesting_depth(&chain(100).encode_to_vec(), 200), 201);
        assert_eq!(
            nesting_depth(&chain(100).encode_to_vec(), 50),
            50 + SPECULATION_SLACK + 1
        );
    }

    /// prost without its recursion limit decodes exactly the depths the check lets through, on a
    /// thread with the stack the server gives its threads.
    #[test]
    fn a_plan_at_the_limit_decodes_and_one_level_more_is_refused() {
        let limit = DEFAULT_MAX_PLAN_DEPTH;
        std::thread::Builder::new()
            .stack_size(thread_stack_size(limit))
            .spawn(move || {
                // ExecutePlanRequest(0) > Plan(1) > Relation(2) ... the Sql leaf at 2 + 2n + 1.
                let request = |steps| proto::ExecutePlanRequest {
                    session_id: "s".into(),
                    plan: Some(proto::Plan {
                        op_type: Some(proto::plan::OpType::Root(chain(steps))),
                    }),
                    ..Default::default()
                };
                // The deepest whole steps under the limit: 2n + 3 <= limit.
                let steps = (limit - 3) / 2;
                let at = request(steps).encode_to_vec();
                assert_eq!(nesting_depth(&at, limit), 2 * steps + 3);
                let decoded = proto::ExecutePlanRequest::decode(at.as_slice()).unwrap();
                assert_eq!(decoded.encode_to_vec(), at);
                drop(decoded);
                let over = request(steps + 1).encode_to_vec();
                assert!(nesting_depth(&over, limit) > limit);
                // The deepest prost may be let into (a malformed message read on speculation
                // up to the slack) fits the stack too.
                let deepest = request((limit + SPECULATION_SLACK - 3) / 2).encode_to_vec();
                let decoded = proto::ExecutePlanRequest::decode(deepest.as_slice()).unwrap();
                assert_eq!(decoded.clone(), decoded);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn hostile_nesting_is_measured_without_recursing_and_groups_count() {
        // 200,000 nested length-delimited fields (field 1, wire type 2), each level's length
        // covering the rest: built from the lengths, outermost first.
        let depth = 200_000;
        let mut sizes = vec![0u64];
        for _ in 1..depth {
            let inner = *sizes.last().unwrap();
            sizes.push(1 + prost::encoding::encoded_len_varint(inner) as u64 + inner);
        }
        let mut bytes = Vec::new();
        for size in sizes.iter().rev() {
            bytes.push(0x0a);
            prost::encoding::encode_varint(*size, &mut bytes);
        }
        assert_eq!(nesting_depth(&bytes, 1024), 1024 + SPECULATION_SLACK + 1);
        // Start-group keys (field 1, wire type 3) nested without end: prost's skip recurses.
        let groups = vec![0x0b; 1_000_000];
        assert!(nesting_depth(&groups, 1024) > 1024);
        // Groups closed properly: three levels.
        let closed = [0x0b, 0x0b, 0x0b, 0x0c, 0x0c, 0x0c];
        assert_eq!(nesting_depth(&closed, 1024), 3);
    }

    #[test]
    fn bytes_that_are_not_messages_are_skipped_and_garbage_never_panics() {
        // An Arrow IPC stream's continuation marker is no field key.
        let rel = proto::Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::LocalRelation(
                proto::LocalRelation {
                    data: Some(vec![0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0].into()),
                    schema: None,
                },
            )),
        };
        assert_eq!(nesting_depth(&rel.encode_to_vec(), 1024), 1);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..2000 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed & 0xff) as u8
                })
                .collect();
            let _ = nesting_depth(&bytes, 8);
        }
    }

    #[test]
    fn tonics_size_refusal_becomes_the_servers_own() {
        let tonic = Status::out_of_range(
            "Error, decoded message length too large: found 2048 bytes, the limit is: 1024 bytes",
        );
        let response = explain_too_large(1024, tonic.into_http());
        let status = Status::from_header_map(response.headers()).unwrap();
        assert_eq!(status.code(), Code::ResourceExhausted);
        for part in [
            "2048 bytes",
            "1024 bytes",
            "spark.connect.grpc.maxInboundMessageSize",
            "--max-message-size",
        ] {
            assert!(status.message().contains(part), "{}", status.message());
        }
        // Any other status stays.
        let other = explain_too_large(1024, Status::out_of_range("other").into_http());
        let other = Status::from_header_map(other.headers()).unwrap();
        assert_eq!(other.message(), "other");
    }
}
