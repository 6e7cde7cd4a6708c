//! Kubernetes quantities ("500m", "2", "64Gi", "1e9") as the numbers the
//! scheduler counts in: CPU millicores, memory MiB, whole GPUs.

/// A quantity as a number of base units (cores, bytes), or None when it
/// cannot be read.
pub fn parse(text: &str) -> Option<f64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "Pi" => 1024.0f64.powi(5),
        "Ei" => 1024.0f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => {
            10f64.powi(exponent[1..].parse::<i32>().ok()?)
        }
        _ => return None,
    };
    let value = number * factor;
    (value.is_finite() && value >= 0.0).then_some(value)
}

/// Bytes, rounded up ("1Gi" → 1073741824, "1.5Gi", "500M", "1e9").
pub fn bytes(text: &str) -> Option<u64> {
    parse(text)
        .filter(|&bytes| bytes < u64::MAX as f64)
        .map(|bytes| bytes.ceil() as u64)
}

/// CPU in millicores ("500m" → 500, "2" → 2000).
pub fn cpu_millis(text: &str) -> Option<u32> {
    parse(text).map(|cores| (cores * 1000.0).round().min(u32::MAX as f64) as u32)
}

/// Memory in MiB, rounded down ("64Gi" → 65536).
pub fn memory_mib(text: &str) -> Option<u64> {
    parse(text).map(|bytes| (bytes / (1024.0 * 1024.0)).floor() as u64)
}

/// A count of a device ("8").
pub fn count(text: &str) -> Option<u32> {
    parse(text).map(|n| n.floor().min(u32::MAX as f64) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(cpu_millis("500m"), Some(500));
        assert_eq!(cpu_millis("2"), Some(2000));
        assert_eq!(cpu_millis("1.5"), Some(1500));
        assert_eq!(cpu_millis("224"), Some(224_000));
        assert_eq!(memory_mib("2Ti"), Some(2 * 1024 * 1024));
        assert_eq!(memory_mib("4096Mi"), Some(4096));
        assert_eq!(memory_mib("1G"), Some(953));
        assert_eq!(memory_mib("1e9"), Some(953));
        assert_eq!(memory_mib("1048576"), Some(1));
        assert_eq!(memory_mib("128974848"), Some(123));
        assert_eq!(count("8"), Some(8));
        assert_eq!(count("eight"), None);
        assert_eq!(memory_mib("12Qi"), None);
        assert_eq!(cpu_millis(""), None);
        assert_eq!(cpu_millis("-1"), None);
    }

    #[test]
    fn volume_sizes_read_as_bytes() {
        assert_eq!(bytes("1Gi"), Some(1 << 30));
        assert_eq!(bytes("1.5Gi"), Some(3 << 29));
        assert_eq!(bytes("500M"), Some(500_000_000));
        assert_eq!(bytes("1e9"), Some(1_000_000_000));
        assert_eq!(bytes("4096"), Some(4096));
        assert_eq!(bytes("10Ti"), Some(10 << 40));
        for wrong in ["", "Gi", "1Zi", "-1Gi", "1e", "one"] {
            assert_eq!(bytes(wrong), None, "{wrong}");
        }
    }
}
