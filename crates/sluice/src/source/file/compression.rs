//! Compressed text files, chosen by extension as Hadoop's `CompressionCodecFactory` chooses
//! them for Spark: `.gz` (gzip, several members allowed), `.bz2` (bzip2), `.deflate` (zlib),
//! `.zst` (zstd), `.lz4` and `.snappy` (Hadoop's block format, and also the standard LZ4
//! frame and Snappy framing formats the command-line tools write). Parquet files compress
//! inside and are never decoded here.

use std::io::Read;
use std::path::Path;

use crate::error::{class, Result, SluiceError};

/// A compression codec of a text file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
    Gzip,
    Bzip2,
    Deflate,
    Zstd,
    Lz4,
    Snappy,
}

impl Codec {
    /// The codec a file's extension names, if any.
    pub(crate) fn of(path: &Path) -> Option<Codec> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "gz" => Codec::Gzip,
            "bz2" => Codec::Bzip2,
            "deflate" => Codec::Deflate,
            "zst" => Codec::Zstd,
            "lz4" => Codec::Lz4,
            "snappy" => Codec::Snappy,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Bzip2 => "bzip2",
            Codec::Deflate => "deflate",
            Codec::Zstd => "zstd",
            Codec::Lz4 => "lz4",
            Codec::Snappy => "snappy",
        }
    }

    /// The decompressed bytes of `bytes`, a whole file (`uri` names it in errors).
    pub(crate) fn decode(self, bytes: &[u8], uri: &str) -> Result<Vec<u8>> {
        match self.decode_partial(bytes, uri) {
            (out, None) => Ok(out),
            (_, Some(e)) => Err(e),
        }
    }

    /// The decompressed bytes of `bytes`, and the error that stopped decoding, if any: the
    /// bytes then are what decoded before the damaged part (which `ignoreCorruptFiles` keeps,
    /// as Spark keeps the records read before a file's corrupt part).
    pub(crate) fn decode_partial(self, bytes: &[u8], uri: &str) -> (Vec<u8>, Option<SluiceError>) {
        let mut out = Vec::with_capacity(bytes.len().saturating_mul(4));
        let result = self.reader(Box::new(bytes)).read_to_end(&mut out);
        (out, result.err().map(|e| self.damaged(uri, &e)))
    }

    /// The decompressed bytes of `inner` as a stream (a file read a piece at a time). The
    /// reader fails where decoding fails, after the bytes decoded before the damaged part; an
    /// error of `inner` itself comes out as is (it may come from the first read of `inner`,
    /// which the LZ4 and Snappy codecs make here to tell their formats apart).
    pub(crate) fn reader<'a>(
        self,
        mut inner: Box<dyn Read + Send + 'a>,
    ) -> Box<dyn Read + Send + 'a> {
        let magic: &[u8] = match self {
            Codec::Gzip => return Box::new(flate2::read::MultiGzDecoder::new(inner)),
            Codec::Bzip2 => return Box::new(bzip2::read::MultiBzDecoder::new(inner)),
            Codec::Deflate => return Box::new(flate2::read::ZlibDecoder::new(inner)),
            Codec::Zstd => {
                return match zstd::stream::read::Decoder::new(inner) {
                    Ok(d) => Box::new(d),
                    Err(e) => Box::new(Failed(Some(e))),
                }
            }
            Codec::Lz4 => &LZ4_FRAME_MAGIC,
            Codec::Snappy => SNAPPY_FRAME_MAGIC,
        };
        // The first bytes say which of the two formats of the extension the file is in.
        let mut head = vec![0u8; magic.len()];
        let n = match read_full(&mut inner, &mut head) {
            Ok(n) => n,
            Err(e) => return Box::new(Failed(Some(e))),
        };
        head.truncate(n);
        let framed = head == magic;
        let whole = std::io::Cursor::new(head).chain(inner);
        match (self, framed) {
            (Codec::Lz4, true) => Box::new(lz4_flex::frame::FrameDecoder::new(whole)),
            (Codec::Snappy, true) => Box::new(snap::read::FrameDecoder::new(whole)),
            _ => Box::new(HadoopBlocks::new(self, whole)),
        }
    }

    /// The error for a file whose decoding failed with `e` (`uri` names it).
    pub(crate) fn damaged(self, uri: &str, e: &std::io::Error) -> SluiceError {
        SluiceError::input(
            class::FAILED_READ_FILE,
            format!(
                "the file {uri} is not valid {} data, as its extension says it is ({e}). \
                 Replace it with a complete file (or rename it, if it is not compressed), or \
                 set the option ignoreCorruptFiles=true to keep the records before the \
                 damaged part and skip the rest, as Spark does",
                self.name()
            ),
        )
    }
}

/// A reader that fails with one error (a decoder that could not start).
struct Failed(Option<std::io::Error>);

impl Read for Failed {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        match self.0.take() {
            Some(e) => Err(e),
            None => Ok(0),
        }
    }
}

/// Reads until `buf` is full or the input ends; the number of bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The magic number that starts an LZ4 frame (`0x184D2204`, little-endian).
const LZ4_FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4D, 0x18];
/// The stream identifier chunk that starts the Snappy framing format.
const SNAPPY_FRAME_MAGIC: &[u8] = b"\xff\x06\x00\x00sNaPpY";

/// Hadoop's `BlockCompressorStream` framing (its `Lz4Codec` and `SnappyCodec`): blocks of a
/// big-endian uncompressed length, then chunks of a big-endian compressed length and the
/// compressed bytes, until the block's length is filled. Decoded a chunk at a time.
struct HadoopBlocks<R> {
    codec: Codec,
    inner: R,
    /// The decoded bytes of the last chunk, and how many of them were read.
    out: Vec<u8>,
    pos: usize,
    /// Bytes of the current block still to come (0: a block header is next).
    block_left: usize,
    /// The error to give once `out` is read (the bytes before a damaged part come first).
    pending: Option<std::io::Error>,
    done: bool,
}

impl<R: Read> HadoopBlocks<R> {
    fn new(codec: Codec, inner: R) -> Self {
        HadoopBlocks {
            codec,
            inner,
            out: Vec::new(),
            pos: 0,
            block_left: 0,
            pending: None,
            done: false,
        }
    }

    /// A big-endian length; `None` at the end of the input before its first byte.
    fn u32_be(&mut self) -> std::io::Result<Option<usize>> {
        let mut b = [0u8; 4];
        match read_full(&mut self.inner, &mut b)? {
            0 => Ok(None),
            4 => Ok(Some(u32::from_be_bytes(b) as usize)),
            _ => Err(bad("truncated block header")),
        }
    }

    /// Decodes the next chunk into `out`; false at the end of the input.
    fn next_chunk(&mut self) -> std::io::Result<bool> {
        // Blocks of length 0 hold no chunk.
        while self.block_left == 0 {
            match self.u32_be()? {
                None => return Ok(false),
                Some(n) => self.block_left = n,
            }
        }
        let chunk_len = self
            .u32_be()?
            .ok_or_else(|| bad("truncated block header"))?;
        let mut chunk = Vec::new();
        (&mut self.inner)
            .take(chunk_len as u64)
            .read_to_end(&mut chunk)?;
        if chunk.len() < chunk_len {
            return Err(bad("truncated compressed chunk"));
        }
        self.out.clear();
        self.pos = 0;
        match self.codec {
            Codec::Lz4 => {
                // The chunk decodes to at most the rest of its block (and LZ4 expands at most
                // 255 times, which bounds the buffer when a damaged header says more).
                let room = self
                    .block_left
                    .min(chunk.len().saturating_mul(256).saturating_add(64));
                self.out.resize(room, 0);
                let n = lz4_flex::block::decompress_into(&chunk, &mut self.out)
                    .map_err(|e| bad(&e.to_string()))?;
                self.out.truncate(n);
            }
            _ => {
                let n = snap::raw::decompress_len(&chunk).map_err(|e| bad(&e.to_string()))?;
                self.out.resize(n, 0);
                snap::raw::Decoder::new()
                    .decompress(&chunk, &mut self.out)
                    .map_err(|e| bad(&e.to_string()))?;
            }
        }
        if self.out.is_empty() {
            return Err(bad("an empty compressed chunk"));
        }
        if self.out.len() > self.block_left {
            self.block_left = 0;
            self.pending = Some(bad("a block longer than its header says"));
        } else {
            self.block_left -= self.out.len();
        }
        Ok(true)
    }
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

impl<R: Read> Read for HadoopBlocks<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.pos < self.out.len() {
                let n = buf.len().min(self.out.len() - self.pos);
                buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if let Some(e) = self.pending.take() {
                self.done = true;
                return Err(e);
            }
            if self.done || buf.is_empty() {
                return Ok(0);
            }
            match self.next_chunk() {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    return Ok(0);
                }
                Err(e) => {
                    self.done = true;
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const TEXT: &[u8] = b"{\"a\": 1}\n{\"a\": 2}\n";

    fn hadoop_framed(codec: Codec, data: &[u8]) -> Vec<u8> {
        let compressed = match codec {
            Codec::Lz4 => lz4_flex::block::compress(data),
            _ => snap::raw::Encoder::new().compress_vec(data).unwrap(),
        };
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        out.extend((compressed.len() as u32).to_be_bytes());
        out.extend(compressed);
        out
    }

    #[test]
    fn every_codec_decodes_what_its_tools_write() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(TEXT).unwrap();
        let gz = gz.finish().unwrap();
        // two gzip members, as `cat a.gz b.gz` makes
        let two = [gz.clone(), gz.clone()].concat();
        assert_eq!(
            Codec::Gzip.decode(&two, "x.gz").unwrap(),
            [TEXT, TEXT].concat()
        );
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
        bz.write_all(TEXT).unwrap();
        assert_eq!(
            Codec::Bzip2.decode(&bz.finish().unwrap(), "x.bz2").unwrap(),
            TEXT
        );
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(TEXT).unwrap();
        assert_eq!(
            Codec::Deflate
                .decode(&z.finish().unwrap(), "x.deflate")
                .unwrap(),
            TEXT
        );
        let zst = zstd::stream::encode_all(TEXT, 3).unwrap();
        assert_eq!(Codec::Zstd.decode(&zst, "x.zst").unwrap(), TEXT);
        let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz.write_all(TEXT).unwrap();
        assert_eq!(
            Codec::Lz4.decode(&lz.finish().unwrap(), "x.lz4").unwrap(),
            TEXT
        );
        let h = hadoop_framed(Codec::Lz4, TEXT);
        assert_eq!(Codec::Lz4.decode(&h, "x.lz4").unwrap(), TEXT);
        let h = hadoop_framed(Codec::Snappy, TEXT);
        assert_eq!(Codec::Snappy.decode(&h, "x.snappy").unwrap(), TEXT);
        let mut sn = snap::write::FrameEncoder::new(Vec::new());
        sn.write_all(TEXT).unwrap();
        let sn = sn.into_inner().unwrap();
        assert_eq!(Codec::Snappy.decode(&sn, "x.snappy").unwrap(), TEXT);
    }

    #[test]
    fn a_damaged_file_names_itself_and_the_way_out() {
        let err = Codec::Gzip
            .decode(b"not gzip at all", "file:/in/a.json.gz")
            .unwrap_err();
        assert!(err.is(class::FAILED_READ_FILE), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("file:/in/a.json.gz") && msg.contains("gzip"),
            "{msg}"
        );
        assert!(Codec::Lz4.decode(&[0, 0, 0, 9, 0, 0], "a.lz4").is_err());
        assert_eq!(Codec::of(Path::new("/a/b.JSON.GZ")), Some(Codec::Gzip));
        assert_eq!(Codec::of(Path::new("/a/b.json")), None);
    }
}
