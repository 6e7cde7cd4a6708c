//! One extractor for MLflow requests: JSON bodies for POST, query parameters
//! for GET (repeated keys become lists), both into the same typed struct, with
//! MLflow-format errors for malformed input and 413 for oversized bodies.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{ApiError, MAX_JSON_BODY};

/// `LIMIT` is the body's bound, as the route's `DefaultBodyLimit` sets it,
/// for the refusal to name.
pub struct Req<T, const LIMIT: usize = MAX_JSON_BODY>(pub T);

impl<S, T, const LIMIT: usize> FromRequest<S> for Req<T, LIMIT>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let value = if req.method() == Method::GET {
            query_to_json(req.uri().query().unwrap_or(""))
        } else {
            let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::too_large(LIMIT)
                } else {
                    ApiError::invalid(format!("could not read the request body: {rejection}"))
                }
            })?;
            if bytes.iter().all(u8::is_ascii_whitespace) {
                Value::Object(Map::new())
            } else {
                // The fast path reads the body straight into its type; the
                // slow one explains what is wrong, or mends bare NaN.
                let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
                if object && let Ok(typed) = serde_json::from_slice::<T>(&bytes) {
                    return Ok(Req(typed));
                }
                parse_json(&bytes)?
            }
        };
        if !value.is_object() {
            return Err(ApiError::invalid("the request body must be a JSON object"));
        }
        serde_json::from_value(value)
            .map(Req)
            .map_err(|e| ApiError::invalid(format!("invalid request: {e}")))
    }
}

/// Parses a JSON body. Python's `json` writes NaN and ±Infinity as bare
/// tokens, which strict JSON parsers refuse; MLflow's server accepts them, so
/// when strict parsing fails they are read as MLflow's string forms.
fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    lenient_json(bytes).map_err(|first| ApiError {
        status: StatusCode::BAD_REQUEST,
        code: "MALFORMED_REQUEST",
        message: format!("the request body is not valid JSON: {first}"),
    })
}

/// JSON as Python's `json` writes it (bare NaN and ±Infinity read as
/// MLflow's string forms), or the strict parser's error.
pub fn lenient_json(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice(bytes).or_else(|first| {
        quote_non_finite(bytes)
            .and_then(|fixed| serde_json::from_slice(&fixed).ok())
            .ok_or(first)
    })
}

/// Quotes bare `NaN`, `Infinity` and `-Infinity` outside strings; None if
/// there are none.
pub(super) fn quote_non_finite(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    let mut changed = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        let rest = &bytes[i..];
        let token: Option<&[u8]> = [b"-Infinity".as_slice(), b"Infinity", b"NaN"]
            .into_iter()
            .find(|t| rest.starts_with(t));
        if let Some(token) = token {
            out.push(b'"');
            out.extend_from_slice(token);
            out.push(b'"');
            i += token.len();
            changed = true;
            continue;
        }
        if b == b'"' {
            in_string = true;
        }
        out.push(b);
        i += 1;
    }
    changed.then_some(out)
}

/// Query parameters as a JSON object; a key given twice becomes a list.
/// Fields that are lists in MLflow's messages accept a single value too.
fn query_to_json(query: &str) -> Value {
    let mut map = Map::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let value = Value::String(value.into_owned());
        match map.get_mut(key.as_ref()) {
            Some(Value::Array(list)) => list.push(value),
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, value]);
            }
            None => {
                map.insert(key.into_owned(), value);
            }
        }
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_non_finite_numbers_are_read() {
        let v = parse_json(br#"{"a": NaN, "b": [Infinity, -Infinity], "s": "NaN \" Infinity"}"#)
            .unwrap();
        assert_eq!(v["a"], "NaN");
        assert_eq!(v["b"][1], "-Infinity");
        assert_eq!(v["s"], "NaN \" Infinity", "strings are left alone");
        assert_eq!(parse_json(b"{nope").unwrap_err().code, "MALFORMED_REQUEST");
    }

    #[test]
    fn repeated_query_keys_become_lists() {
        let v = query_to_json("run_ids=a&run_ids=b&metric_key=loss%20x&max_results=10");
        assert_eq!(v["run_ids"], serde_json::json!(["a", "b"]));
        assert_eq!(v["metric_key"], "loss x");
        assert_eq!(v["max_results"], "10");
    }
}
