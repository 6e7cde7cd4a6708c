//! The on-disk form of a metric chunk: points as fixed 24-byte little-endian
//! records (step i64, timestamp i64, value f64 bits). Fixed records decode
//! without parsing and keep NaN and ±Inf exactly.
//!
//! Beside the points, a chunk keeps a summary: for each block of
//! [`BLOCK_POINTS`] consecutive points, their count, x extents on both axes,
//! x sums (for the mean position) and the min, max and sum of their values.
//! Wide chart reads merge these blocks instead of decoding every point.

use trainyard_domain::tracking::Point;

pub const POINT_BYTES: usize = 24;

pub fn encode(points: &[Point]) -> Vec<u8> {
    let mut out = Vec::with_capacity(points.len() * POINT_BYTES);
    for p in points {
        out.extend_from_slice(&p.step.to_le_bytes());
        out.extend_from_slice(&p.timestamp.to_le_bytes());
        out.extend_from_slice(&p.value.to_bits().to_le_bytes());
    }
    out
}

/// Appends the points of a chunk to `out`; a torn trailing record is ignored.
pub fn decode_into(bytes: &[u8], out: &mut Vec<Point>) {
    out.reserve(bytes.len() / POINT_BYTES);
    for record in bytes.chunks_exact(POINT_BYTES) {
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&record[i * 8..i * 8 + 8]);
            b
        };
        out.push(Point {
            step: i64::from_le_bytes(word(0)),
            timestamp: i64::from_le_bytes(word(1)),
            value: f64::from_bits(u64::from_le_bytes(word(2))),
        });
    }
}

/// Points per summary block. A chart bucket is drawn from block summaries
/// only when it spans several blocks, so this bounds how far a bucket's edge
/// can move (half a block).
pub const BLOCK_POINTS: usize = 32;
pub const BLOCK_BYTES: usize = 80;

/// The summary of up to [`BLOCK_POINTS`] consecutive points. NaN values are
/// counted in `count` but stay out of `finite`, `sum`, `min` and `max`
/// (±Inf enter them, as they would enter a mean).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Block {
    pub count: u32,
    pub finite: u32,
    pub min_step: i64,
    pub max_step: i64,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    pub sum_step: f64,
    pub sum_timestamp: f64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

impl Block {
    pub fn of(points: &[Point]) -> Block {
        let mut b = Block {
            count: points.len() as u32,
            finite: 0,
            min_step: i64::MAX,
            max_step: i64::MIN,
            min_timestamp: i64::MAX,
            max_timestamp: i64::MIN,
            sum_step: 0.0,
            sum_timestamp: 0.0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        };
        for p in points {
            b.min_step = b.min_step.min(p.step);
            b.max_step = b.max_step.max(p.step);
            b.min_timestamp = b.min_timestamp.min(p.timestamp);
            b.max_timestamp = b.max_timestamp.max(p.timestamp);
            b.sum_step += p.step as f64;
            b.sum_timestamp += p.timestamp as f64;
            if !p.value.is_nan() {
                b.finite += 1;
                b.sum += p.value;
                b.min = b.min.min(p.value);
                b.max = b.max.max(p.value);
            }
        }
        b
    }
}

/// The summary blob of a chunk's points, in logged order.
pub fn summarize(points: &[Point]) -> Vec<u8> {
    let mut out = Vec::with_capacity(points.len().div_ceil(BLOCK_POINTS) * BLOCK_BYTES);
    for block in points.chunks(BLOCK_POINTS) {
        let b = Block::of(block);
        out.extend_from_slice(&b.count.to_le_bytes());
        out.extend_from_slice(&b.finite.to_le_bytes());
        for word in [b.min_step, b.max_step, b.min_timestamp, b.max_timestamp] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for word in [b.sum_step, b.sum_timestamp, b.sum, b.min, b.max] {
            out.extend_from_slice(&word.to_bits().to_le_bytes());
        }
    }
    out
}

/// Appends the blocks of a summary blob to `out`.
pub fn decode_summary_into(bytes: &[u8], out: &mut Vec<Block>) {
    out.reserve(bytes.len() / BLOCK_BYTES);
    for record in bytes.chunks_exact(BLOCK_BYTES) {
        let u32_at = |i: usize| u32::from_le_bytes(record[i..i + 4].try_into().expect("4 bytes"));
        let i64_at = |i: usize| i64::from_le_bytes(record[i..i + 8].try_into().expect("8 bytes"));
        let f64_at = |i: usize| f64::from_bits(i64_at(i) as u64);
        out.push(Block {
            count: u32_at(0),
            finite: u32_at(4),
            min_step: i64_at(8),
            max_step: i64_at(16),
            min_timestamp: i64_at(24),
            max_timestamp: i64_at(32),
            sum_step: f64_at(40),
            sum_timestamp: f64_at(48),
            sum: f64_at(56),
            min: f64_at(64),
            max: f64_at(72),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_round_trip_and_keep_extremes() {
        let points: Vec<Point> = (0..70)
            .map(|i| Point {
                step: i,
                timestamp: 1000 + i,
                value: match i {
                    5 => f64::NAN,
                    40 => 99.0,
                    _ => i as f64 / 100.0,
                },
            })
            .collect();
        let bytes = summarize(&points);
        assert_eq!(bytes.len(), 3 * BLOCK_BYTES, "70 points make 3 blocks");
        let mut blocks = Vec::new();
        decode_summary_into(&bytes, &mut blocks);
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0], Block::of(&points[..32]));
        assert_eq!(blocks[0].count, 32);
        assert_eq!(blocks[0].finite, 31, "NaN is counted but not summed");
        assert_eq!(blocks[1].max, 99.0);
        assert_eq!(blocks[1].min_step, 32);
        assert_eq!(blocks[2].count, 6);
        assert_eq!(blocks[2].max_timestamp, 1069);
        assert_eq!(blocks[2].sum_step, (64..70).sum::<i64>() as f64);
    }

    #[test]
    fn round_trips_every_value() {
        let points = vec![
            Point {
                step: 0,
                timestamp: 1,
                value: 0.5,
            },
            Point {
                step: -3,
                timestamp: i64::MAX,
                value: f64::NAN,
            },
            Point {
                step: i64::MIN,
                timestamp: 0,
                value: f64::INFINITY,
            },
            Point {
                step: 7,
                timestamp: 9,
                value: f64::NEG_INFINITY,
            },
        ];
        let bytes = encode(&points);
        assert_eq!(bytes.len(), 4 * POINT_BYTES);
        let mut back = Vec::new();
        decode_into(&bytes, &mut back);
        assert_eq!(back.len(), 4);
        assert_eq!(back[0], points[0]);
        assert!(back[1].value.is_nan());
        assert_eq!(back[2].value, f64::INFINITY);
        assert_eq!(back[3].step, 7);
        decode_into(&bytes[..30], &mut back);
        assert_eq!(back.len(), 5, "a torn record is skipped");
    }
}
