//! A gzip stream (RFC 1952) over flate2's raw deflate (zlib-rs), whose
//! compressor state comes from a per-thread pool and goes back to it.
//! flate2's `GzEncoder` makes a fresh state for every response: a few
//! hundred kilobytes that malloc maps and the kernel zeroes page by page,
//! which cost more than compressing a small response. The window is sized
//! by a known length as nginx sizes it. Used by the gzip filter (`gzip.rs`).

use std::cell::RefCell;

use flate2::{Compress, Compression, Crc, FlushCompress, Status};

/// Compressor states kept per thread (per level): enough for the responses
/// a worker compresses at once in the common case; more are made and
/// dropped.
const POOL_MAX: usize = 16;

thread_local! {
    /// (level, window bits, state).
    static POOL: RefCell<Vec<(u32, u8, Compress)>> = const { RefCell::new(Vec::new()) };
}

/// nginx's window for a body of known length: halved while the body fits
/// in half of it with deflate's lookahead (262) to spare, down to 512
/// bytes; 32 KiB (gzip_window's default) otherwise.
fn window_bits(len: Option<u64>) -> u8 {
    let mut bits = 15u8;
    if let Some(n) = len.filter(|&n| n > 0) {
        while bits > 9 && n < (1u64 << (bits - 1)) - 262 {
            bits -= 1;
        }
    }
    bits
}

/// nginx's gzip header: deflate, no flags, no time, no extra flags, Unix.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];

/// A gzip stream being written: `write`, `flush` (what was written so far
/// can be decompressed), `finish`; each appends to `out`.
pub struct GzipStream {
    level: u32,
    bits: u8,
    c: Option<Compress>,
    crc: Crc,
    header_done: bool,
}

impl GzipStream {
    /// A stream at `level`, for a body of `len` bytes if it is known.
    pub fn new(level: u32, len: Option<u64>) -> GzipStream {
        let level = level.min(9);
        let bits = window_bits(len);
        let pooled = POOL.with(|p| {
            let mut p = p.borrow_mut();
            let i = p.iter().position(|(l, b, _)| *l == level && *b == bits)?;
            Some(p.swap_remove(i).2)
        });
        let c = match pooled {
            Some(mut c) => {
                c.reset();
                c
            }
            None => Compress::new_with_window_bits(Compression::new(level), false, bits),
        };
        GzipStream {
            level,
            bits,
            c: Some(c),
            crc: Crc::new(),
            header_done: false,
        }
    }

    fn header(&mut self, out: &mut Vec<u8>) {
        if !self.header_done {
            self.header_done = true;
            out.extend_from_slice(&HEADER);
        }
    }

    /// Compresses `data` into `out` (some may stay in the compressor until
    /// a flush or the finish).
    pub fn write(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), flate2::CompressError> {
        self.header(out);
        self.crc.update(data);
        self.run(data, out, FlushCompress::None).map(|_| ())
    }

    /// Everything written so far, compressed into `out`.
    pub fn flush(&mut self, out: &mut Vec<u8>) -> Result<(), flate2::CompressError> {
        self.header(out);
        self.run(&[], out, FlushCompress::Sync).map(|_| ())
    }

    /// The end of the stream and the trailer (CRC-32, length mod 2^32);
    /// the compressor goes back to the pool.
    pub fn finish(mut self, out: &mut Vec<u8>) -> Result<(), flate2::CompressError> {
        self.header(out);
        self.run(&[], out, FlushCompress::Finish)?;
        out.extend_from_slice(&self.crc.sum().to_le_bytes());
        out.extend_from_slice(&self.crc.amount().to_le_bytes());
        Ok(())
    }

    /// Feeds `input` with `flush` until it is all taken and, for a flush
    /// or the finish, until the compressor has nothing more to give.
    fn run(
        &mut self,
        mut input: &[u8],
        out: &mut Vec<u8>,
        flush: FlushCompress,
    ) -> Result<Status, flate2::CompressError> {
        let Some(c) = self.c.as_mut() else {
            return Ok(Status::StreamEnd);
        };
        loop {
            // Room for what this round can give: deflate's output is
            // bounded by its input plus a little.
            out.reserve(input.len() / 2 + 1024);
            let before_in = c.total_in();
            let room = out.capacity() - out.len();
            let before_out = out.len();
            let status = c.compress_vec(input, out, flush)?;
            let taken = usize::try_from(c.total_in() - before_in).unwrap_or(input.len());
            input = &input[taken.min(input.len())..];
            let filled = out.len() - before_out == room;
            let done = match flush {
                FlushCompress::Finish => status == Status::StreamEnd,
                _ => input.is_empty() && !filled,
            };
            if done || (status == Status::BufError && !filled && input.is_empty()) {
                return Ok(status);
            }
        }
    }
}

impl Drop for GzipStream {
    fn drop(&mut self) {
        if let Some(c) = self.c.take() {
            let (level, bits) = (self.level, self.bits);
            POOL.with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < POOL_MAX {
                    p.push((level, bits, c));
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Read;

    fn gunzip(b: &[u8]) -> Vec<u8> {
        let mut d = flate2::read::GzDecoder::new(b);
        let mut back = Vec::new();
        d.read_to_end(&mut back).expect("a whole gzip stream");
        back
    }

    #[test]
    fn round_trip_and_reuse() {
        for round in 0..3 {
            let text = format!("round {round}: ").repeat(3000);
            let mut g = GzipStream::new(1, None);
            let mut out = Vec::new();
            g.write(text.as_bytes(), &mut out).unwrap();
            g.flush(&mut out).unwrap();
            // What was flushed already decompresses.
            let mut d = flate2::read::GzDecoder::new(&out[..]);
            let mut part = vec![0; text.len()];
            d.read_exact(&mut part).unwrap();
            assert_eq!(part, text.as_bytes());
            g.write(b"tail", &mut out).unwrap();
            g.finish(&mut out).unwrap();
            assert_eq!(gunzip(&out), format!("{text}tail").as_bytes());
            assert_eq!(&out[..10], &HEADER);
        }
    }

    #[test]
    fn windows_as_nginx() {
        assert_eq!(window_bits(None), 15);
        assert_eq!(window_bits(Some(0)), 15);
        assert_eq!(window_bits(Some(100_000)), 15);
        assert_eq!(window_bits(Some(16_384 - 262)), 15);
        assert_eq!(window_bits(Some(16_384 - 263)), 14);
        assert_eq!(window_bits(Some(4096)), 13);
        assert_eq!(window_bits(Some(1)), 9);
    }

    #[test]
    fn empty_body() {
        let mut out = Vec::new();
        GzipStream::new(6, Some(1)).finish(&mut out).unwrap();
        assert!(gunzip(&out).is_empty());
    }

    proptest! {
        /// Any body cut anywhere, flushed anywhere, at any level, comes
        /// back whole.
        #[test]
        fn pieces(body in proptest::collection::vec(any::<u8>(), 0..20000),
                  cuts in proptest::collection::vec((0usize..20000, any::<bool>()), 0..8),
                  level in 1u32..10, sized in any::<bool>()) {
            // A known length sizes the window; a wrong one must not matter.
            let len = sized.then_some(body.len() as u64 / 3);
            let mut g = GzipStream::new(level, len);
            let mut out = Vec::new();
            let mut at = 0;
            let mut cuts = cuts;
            cuts.sort();
            for (c, flush) in cuts {
                let c = c.min(body.len());
                if c < at { continue; }
                g.write(&body[at..c], &mut out).unwrap();
                if flush { g.flush(&mut out).unwrap(); }
                at = c;
            }
            g.write(&body[at..], &mut out).unwrap();
            g.finish(&mut out).unwrap();
            prop_assert_eq!(gunzip(&out), body);
        }
    }
}
