//! A float as JSON, NaN and ±infinity included: JSON has no word for them
//! (serde_json writes `null`, which does not read back as a float), so they
//! travel as the text `"NaN"`, `"Infinity"` and `"-Infinity"`; finite values
//! stay numbers. For `#[serde(with = "crate::float_text")]`.

use serde::{Deserialize, Deserializer, Serializer};

pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if value.is_finite() {
        serializer.serialize_f64(*value)
    } else if value.is_nan() {
        serializer.serialize_str("NaN")
    } else if *value > 0.0 {
        serializer.serialize_str("Infinity")
    } else {
        serializer.serialize_str("-Infinity")
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Number(f64),
        Text(String),
    }
    match Either::deserialize(deserializer)? {
        Either::Number(n) => Ok(n),
        Either::Text(t) => match t.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => Err(serde::de::Error::custom(format!(
                "`{other}` is not a number; expected a number, NaN, Infinity or -Infinity"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::tracking::Point;

    #[test]
    fn every_float_reads_back_as_it_was_written() {
        for value in [1.5, -0.0, 1e-300, f64::INFINITY, f64::NEG_INFINITY] {
            let p = Point {
                step: 1,
                timestamp: 2,
                value,
            };
            let text = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<Point>(&text).unwrap(), p, "{text}");
        }
        let nan = Point {
            step: 0,
            timestamp: 0,
            value: f64::NAN,
        };
        let text = serde_json::to_string(&nan).unwrap();
        assert_eq!(text, r#"{"step":0,"timestamp":0,"value":"NaN"}"#);
        assert!(serde_json::from_str::<Point>(&text).unwrap().value.is_nan());
        assert!(serde_json::from_str::<Point>(r#"{"step":0,"timestamp":0,"value":"x"}"#).is_err());
    }
}
