//! One extractor for MLflow requests: JSON bodies for POST, query parameters
//! for GET (repeated keys become lists), both into the same typed struct, with
//! MLflow-format errors for malformed input and 413 for oversized bodies.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{ApiError, MAX_JSON_BODY};

pub struct Req<T>(pub T);

impl<S, T> FromRequest<S> for Req<T>
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
                    ApiError::too_large(MAX_JSON_BODY)
                } else {
                    ApiError::invalid(format!("could not read the request body: {rejection}"))
                }
            })?;
            if bytes.iter().all(u8::is_ascii_whitespace) {
                Value::Object(Map::new())
            } else {
                serde_json::from_slice(&bytes).map_err(|e| ApiError {
                    status: StatusCode::BAD_REQUEST,
                    code: "MALFORMED_REQUEST",
                    message: format!("the request body is not valid JSON: {e}"),
                })?
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
    fn repeated_query_keys_become_lists() {
        let v = query_to_json("run_ids=a&run_ids=b&metric_key=loss%20x&max_results=10");
        assert_eq!(v["run_ids"], serde_json::json!(["a", "b"]));
        assert_eq!(v["metric_key"], "loss x");
        assert_eq!(v["max_results"], "10");
    }
}
