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
        let result = match self {
            Codec::Gzip => flate2::read::MultiGzDecoder::new(bytes)
                .read_to_end(&mut out)
                .map(|_| ()),
            Codec::Bzip2 => bzip2::read::MultiBzDecoder::new(bytes)
                .read_to_end(&mut out)
                .map(|_| ()),
            Codec::Deflate => flate2::read::ZlibDecoder::new(bytes)
                .read_to_end(&mut out)
                .map(|_| ()),
            Codec::Zstd => zstd::stream::read::Decoder::new(bytes)
                .and_then(|mut d| d.read_to_end(&mut out))
                .map(|_| ()),
            Codec::Lz4 if bytes.starts_with(&LZ4_FRAME_MAGIC) => {
                lz4_flex::frame::FrameDecoder::new(bytes)
                    .read_to_end(&mut out)
                    .map(|_| ())
            }
            Codec::Snappy if bytes.starts_with(SNAPPY_FRAME_MAGIC) => {
                snap::read::FrameDecoder::new(bytes)
                    .read_to_end(&mut out)
                    .map(|_| ())
            }
            Codec::Lz4 | Codec::Snappy => hadoop_blocks(self, bytes, &mut out),
        };
        let err = result.err().map(|e| {
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
        });
        (out, err)
    }
}

/// The magic number that starts an LZ4 frame (`0x184D2204`, little-endian).
const LZ4_FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4D, 0x18];
/// The stream identifier chunk that starts the Snappy framing format.
const SNAPPY_FRAME_MAGIC: &[u8] = b"\xff\x06\x00\x00sNaPpY";

/// Hadoop's `BlockCompressorStream` framing (its `Lz4Codec` and `SnappyCodec`): blocks of a
/// big-endian uncompressed length, then chunks of a big-endian compressed length and the
/// compressed bytes, until the block's length is filled.
fn hadoop_blocks(codec: Codec, mut bytes: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let u32_be = |b: &mut &[u8]| -> std::io::Result<usize> {
        if b.len() < 4 {
            return Err(bad("truncated block header"));
        }
        let v = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        *b = &b[4..];
        Ok(v)
    };
    while !bytes.is_empty() {
        let block_len = u32_be(&mut bytes)?;
        let start = out.len();
        while out.len() - start < block_len {
            let chunk_len = u32_be(&mut bytes)?;
            if chunk_len > bytes.len() {
                return Err(bad("truncated compressed chunk"));
            }
            let (chunk, rest) = bytes.split_at(chunk_len);
            bytes = rest;
            let before = out.len();
            match codec {
                Codec::Lz4 => {
                    let left = block_len - (out.len() - start);
                    out.resize(before + left, 0);
                    let n = lz4_flex::block::decompress_into(chunk, &mut out[before..])
                        .map_err(|e| bad(&e.to_string()))?;
                    out.truncate(before + n);
                }
                _ => {
                    let n = snap::raw::decompress_len(chunk).map_err(|e| bad(&e.to_string()))?;
                    out.resize(before + n, 0);
                    snap::raw::Decoder::new()
                        .decompress(chunk, &mut out[before..])
                        .map_err(|e| bad(&e.to_string()))?;
                }
            }
            if out.len() == before {
                return Err(bad("an empty compressed chunk"));
            }
        }
        if out.len() - start != block_len {
            return Err(bad("a block longer than its header says"));
        }
    }
    Ok(())
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
