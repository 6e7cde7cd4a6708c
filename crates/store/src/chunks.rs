//! The on-disk form of a metric chunk: points as fixed 24-byte little-endian
//! records (step i64, timestamp i64, value f64 bits). Fixed records decode
//! without parsing and keep NaN and ±Inf exactly.

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

#[cfg(test)]
mod tests {
    use super::*;

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
