//! `POST /v1/traces`: spans from any OpenTelemetry exporter (OTLP over
//! HTTP, protobuf or JSON, plain, gzip or deflate), as MLflow 3's server
//! takes them. The header `x-mlflow-experiment-id` says where a new trace
//! goes; `x-mlflow-run-id` links the traces whose root span came to a run.
//!
//! Each span is kept as MLflow's client would write it into the trace's
//! `traces.json` (`Span.from_otel_proto`: ids in base64, attribute values
//! as JSON text, `mlflow.traceRequestId` = `tr-` and the trace id in hex),
//! merged with the spans the file holds already, and the trace is made or
//! widened from what the spans say (`Store::record_spans`).

use std::collections::BTreeMap;
use std::io::Read;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Map, Value, json};
use trainyard_domain::explorer::{MAX_JSON_VALUES, MAX_TRACE_FILE, json_values};
use trainyard_domain::identity::Via;
use trainyard_store::span_traces::{RootSpan, SpansOfTrace};

use super::ApiError;
use super::validate::MAX_TAG_VALUE_LEN;
use crate::AppState;
use crate::auth::{Caller, permission_denied};

/// Largest request body, compressed or not, in bytes: what one trace's
/// `traces.json` may hold.
pub const MAX_OTLP_BODY: usize = MAX_TRACE_FILE as usize;
/// Most traces one request may carry spans of.
const MAX_TRACES_PER_REQUEST: usize = 1000;
/// Most spans one request may carry (OpenTelemetry's batch span processor
/// sends 512 at a time).
const MAX_SPANS_PER_REQUEST: usize = 10_000;
/// Most attributes, values, events and links one protobuf request may
/// carry in all. Each becomes a value in memory however few bytes it is
/// sent in, so a body of empty ones would otherwise grow a hundredfold
/// when decoded; both bounds are counted before anything is.
const MAX_ELEMENTS_PER_REQUEST: usize = 1_000_000;
/// Requests decoded at once (the work is CPU and memory, not waiting).
static DECODES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
/// Longest request or response preview a root span gives its trace.
const PREVIEW_CHARS: usize = 1000;
/// Most tags one batch sets on a trace.
const MAX_TAGS: usize = 1000;
const EXPERIMENT_HEADER: &str = "x-mlflow-experiment-id";
const RUN_HEADER: &str = "x-mlflow-run-id";

/// OpenTelemetry's trace protocol (`opentelemetry/proto/trace/v1`, and
/// the common and resource messages it uses): the fields MLflow keeps.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportTraceServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(string, tag = "5")]
        pub name: String,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(message, repeated, tag = "11")]
        pub events: Vec<Event>,
        #[prost(message, repeated, tag = "13")]
        pub links: Vec<Link>,
        #[prost(message, optional, tag = "15")]
        pub status: Option<Status>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Event {
        #[prost(fixed64, tag = "1")]
        pub time_unix_nano: u64,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(message, repeated, tag = "3")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Link {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(message, repeated, tag = "4")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(string, tag = "2")]
        pub message: String,
        /// 0 unset, 1 ok, 2 error.
        #[prost(int32, tag = "3")]
        pub code: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "Value", tags = "1, 2, 3, 4, 5, 6, 7")]
        pub value: Option<Value>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(string, tag = "1")]
        String(String),
        #[prost(bool, tag = "2")]
        Bool(bool),
        #[prost(int64, tag = "3")]
        Int(i64),
        #[prost(double, tag = "4")]
        Double(f64),
        #[prost(message, tag = "5")]
        Array(ArrayValue),
        #[prost(message, tag = "6")]
        Kvlist(KeyValueList),
        #[prost(bytes = "vec", tag = "7")]
        Bytes(Vec<u8>),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ArrayValue {
        #[prost(message, repeated, tag = "1")]
        pub values: Vec<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValueList {
        #[prost(message, repeated, tag = "1")]
        pub values: Vec<KeyValue>,
    }
}

use proto::{AnyValue, ExportTraceServiceRequest, KeyValue};

/// How the request body is encoded (its Content-Type).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn of(headers: &HeaderMap) -> Result<Encoding, ApiError> {
        let raw = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        match raw.split(';').next().unwrap_or_default().trim() {
            "application/x-protobuf" => Ok(Encoding::Protobuf),
            "application/json" => Ok(Encoding::Json),
            _ => Err(ApiError::invalid(format!(
                "Invalid Content-Type `{raw}`: OTLP spans are sent as application/x-protobuf or application/json"
            ))),
        }
    }
}

/// The body without its Content-Encoding (none, gzip or deflate), at most
/// [`MAX_OTLP_BODY`] bytes once inflated.
fn inflate(body: &[u8], encoding: Option<&str>) -> Result<Vec<u8>, ApiError> {
    let encoding = encoding.unwrap_or("identity").trim().to_ascii_lowercase();
    let too_large = || ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "REQUEST_LIMIT_EXCEEDED",
        message: format!(
            "the spans are larger than {} MiB once inflated; send them in smaller batches",
            MAX_OTLP_BODY >> 20
        ),
    };
    let read = |mut reader: Box<dyn Read + '_>| -> Result<Vec<u8>, std::io::Error> {
        let mut out = Vec::new();
        (&mut reader)
            .take(MAX_OTLP_BODY as u64 + 1)
            .read_to_end(&mut out)?;
        Ok(out)
    };
    let out = match encoding.as_str() {
        "" | "identity" => return Ok(body.to_vec()),
        "gzip" => read(Box::new(flate2::read::MultiGzDecoder::new(body))),
        // RFC 1950 (zlib) as the standard says, and raw DEFLATE as some
        // clients send it.
        "deflate" => read(Box::new(flate2::read::ZlibDecoder::new(body)))
            .or_else(|_| read(Box::new(flate2::read::DeflateDecoder::new(body)))),
        other => {
            return Err(ApiError::invalid(format!(
                "Unsupported Content-Encoding `{other}`: send the spans plain, gzip or deflate"
            )));
        }
    }
    .map_err(|e| ApiError::invalid(format!("The {encoding} body cannot be inflated: {e}")))?;
    if out.len() > MAX_OTLP_BODY {
        return Err(too_large());
    }
    Ok(out)
}

/// An OTLP request from its (inflated) body.
pub fn decode(body: &[u8], encoding: Encoding) -> Result<ExportTraceServiceRequest, ApiError> {
    let request = match encoding {
        Encoding::Protobuf => {
            let invalid =
                |e| ApiError::invalid(format!("Invalid OpenTelemetry format (protobuf): {e}"));
            within_bounds(wire::count(body).map_err(invalid)?)?;
            <ExportTraceServiceRequest as prost::Message>::decode(body)
                .map_err(|e| invalid(e.to_string()))?
        }
        Encoding::Json => {
            let invalid =
                |e| ApiError::invalid(format!("Invalid OpenTelemetry format (JSON): {e}"));
            within("JSON values", json_values(body), MAX_JSON_VALUES)?;
            let json: Value = serde_json::from_slice(body).map_err(|e| invalid(e.to_string()))?;
            within_bounds(json::counts(&json))?;
            json::request(&json).map_err(invalid)?
        }
    };
    if request.resource_spans.is_empty() {
        return Err(ApiError::invalid(
            "Invalid OpenTelemetry format: no resourceSpans, so no spans to keep",
        ));
    }
    Ok(request)
}

/// A request's counts within the bounds, or its refusal.
fn within_bounds(counts: wire::Counts) -> Result<(), ApiError> {
    within("spans", counts.spans, MAX_SPANS_PER_REQUEST)?;
    within(
        "attributes, values, events and links",
        counts.elements,
        MAX_ELEMENTS_PER_REQUEST,
    )
}

/// A refusal of a request that carries more than `limit` of something.
fn within(what: &str, count: usize, limit: usize) -> Result<(), ApiError> {
    if count <= limit {
        return Ok(());
    }
    Err(ApiError::invalid(format!(
        "A request may carry at most {limit} {what} (this one: {count}); send fewer spans at a time (an SDK's batch span processor: OTEL_BSP_MAX_EXPORT_BATCH_SIZE; a Collector's batch processor: send_batch_max_size)"
    )))
}

/// Counts a protobuf request's spans and the other messages that decoding
/// it would make, in its bytes (protobuf's wire format: each field a key,
/// then a varint, 8 or 4 bytes, or a length and that many bytes).
mod wire {
    /// The messages that prost would decode (others are skipped).
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Kind {
        Request,
        ResourceSpans,
        Resource,
        ScopeSpans,
        Span,
        Event,
        Link,
        Status,
        KeyValue,
        AnyValue,
        List,
        KeyValueList,
    }

    /// The message a field of `kind` holds, where it holds one.
    fn holds(kind: Kind, field: u64) -> Option<Kind> {
        use Kind::*;
        Some(match (kind, field) {
            (Request, 1) => ResourceSpans,
            (ResourceSpans, 1) => Resource,
            (ResourceSpans, 2) => ScopeSpans,
            (ScopeSpans, 2) => Span,
            (Span, 11) => Event,
            (Span, 13) => Link,
            (Span, 15) => Status,
            (Resource, 1) | (Span, 9) | (Event, 3) | (Link, 4) | (KeyValueList, 1) => KeyValue,
            (KeyValue, 2) | (List, 1) => AnyValue,
            (AnyValue, 5) => List,
            (AnyValue, 6) => KeyValueList,
            _ => return None,
        })
    }

    #[derive(Debug, Default, PartialEq)]
    pub struct Counts {
        pub spans: usize,
        /// Every other message.
        pub elements: usize,
    }

    fn varint(buf: &mut &[u8]) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = buf.split_first().ok_or("the body ends inside a number")?;
            *buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err("a number longer than ten bytes".to_owned())
    }

    fn skip<'a>(buf: &mut &'a [u8], len: u64) -> Result<&'a [u8], String> {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > buf.len() {
            return Err("the body ends inside a field".to_owned());
        }
        let (field, rest) = buf.split_at(len);
        *buf = rest;
        Ok(field)
    }

    /// Walks the body without decoding it: memory as deep as its nesting
    /// (at most prost's 100), time as long as its bytes.
    pub fn count(body: &[u8]) -> Result<Counts, String> {
        let mut counts = Counts::default();
        let mut stack: Vec<(Kind, &[u8])> = vec![(Kind::Request, body)];
        while let Some((kind, buf)) = stack.last_mut() {
            if buf.is_empty() {
                stack.pop();
                continue;
            }
            let kind = *kind;
            let mut rest: &[u8] = buf;
            let key = varint(&mut rest)?;
            let inner = match key & 7 {
                0 => varint(&mut rest).map(|_| None)?,
                1 => skip(&mut rest, 8).map(|_| None)?,
                5 => skip(&mut rest, 4).map(|_| None)?,
                2 => {
                    let len = varint(&mut rest)?;
                    let field = skip(&mut rest, len)?;
                    holds(kind, key >> 3).map(|child| (child, field))
                }
                other => return Err(format!("field {} has wire type {other}", key >> 3)),
            };
            *buf = rest;
            if let Some((child, field)) = inner {
                match child {
                    Kind::Span => counts.spans += 1,
                    _ => counts.elements += 1,
                }
                if stack.len() >= 100 {
                    return Err("messages nested more than 100 deep".to_owned());
                }
                stack.push((child, field));
            }
        }
        Ok(counts)
    }
}

/// OTLP/JSON: protobuf's JSON mapping (camelCase or the proto's own
/// names), except that trace and span ids are hex, as the OTLP spec says.
mod json {
    use super::proto::*;
    use serde_json::Value;

    type Result<T> = std::result::Result<T, String>;

    fn field<'a>(v: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
        v.get(camel)
            .or_else(|| v.get(snake))
            .filter(|v| !v.is_null())
    }

    fn list<'a>(v: &'a Value, camel: &str, snake: &str) -> Result<&'a [Value]> {
        match field(v, camel, snake) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(_) => Err(format!("`{camel}` must be a list")),
        }
    }

    fn string(v: &Value, camel: &str, snake: &str) -> Result<String> {
        match field(v, camel, snake) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("`{camel}` must be a string")),
        }
    }

    /// A 64-bit integer: a number, or (as protobuf's JSON writes them) a
    /// string of digits.
    fn int(v: &Value, camel: &str, snake: &str) -> Result<i64> {
        match field(v, camel, snake) {
            None => Ok(0),
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| n.as_u64().and_then(|u| i64::try_from(u).ok()))
                .ok_or_else(|| format!("`{camel}` must be a whole number")),
            Some(Value::String(s)) => s
                .parse()
                .map_err(|_| format!("`{camel}` must be a whole number, not `{s}`")),
            Some(_) => Err(format!("`{camel}` must be a whole number")),
        }
    }

    fn nanos(v: &Value, camel: &str, snake: &str) -> Result<u64> {
        match field(v, camel, snake) {
            Some(Value::String(s)) => s
                .parse()
                .map_err(|_| format!("`{camel}` must be nanoseconds, not `{s}`")),
            Some(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| format!("`{camel}` must be nanoseconds")),
            _ => Ok(0),
        }
    }

    fn hex_id(v: &Value, camel: &str, snake: &str) -> Result<Vec<u8>> {
        let text = string(v, camel, snake)?;
        hex::decode(&text).map_err(|_| format!("`{camel}` must be hex, not `{text}`"))
    }

    /// A request's spans and the other messages converting it would make,
    /// counted as `wire::count` counts them (before any is converted).
    pub fn counts(v: &Value) -> super::wire::Counts {
        fn items<'a>(v: &'a Value, camel: &str, snake: &str) -> &'a [Value] {
            list(v, camel, snake).unwrap_or_default()
        }
        fn any_value(v: &Value, n: &mut usize) {
            *n += 1;
            if let Some(array) = field(v, "arrayValue", "array_value") {
                *n += 1;
                items(array, "values", "values")
                    .iter()
                    .for_each(|v| any_value(v, n));
            }
            if let Some(pairs) = field(v, "kvlistValue", "kvlist_value") {
                *n += 1;
                attributes(items(pairs, "values", "values"), n);
            }
        }
        fn attributes(pairs: &[Value], n: &mut usize) {
            for pair in pairs {
                *n += 1;
                if let Some(value) = field(pair, "value", "value") {
                    any_value(value, n);
                }
            }
        }
        let mut counts = super::wire::Counts::default();
        let n = &mut counts.elements;
        for resource in items(v, "resourceSpans", "resource_spans") {
            *n += 1;
            if let Some(r) = field(resource, "resource", "resource") {
                *n += 1;
                attributes(items(r, "attributes", "attributes"), n);
            }
            for scope in items(resource, "scopeSpans", "scope_spans") {
                *n += 1;
                for span in items(scope, "spans", "spans") {
                    counts.spans += 1;
                    attributes(items(span, "attributes", "attributes"), n);
                    *n += usize::from(field(span, "status", "status").is_some());
                    for event in items(span, "events", "events") {
                        *n += 1;
                        attributes(items(event, "attributes", "attributes"), n);
                    }
                    for link in items(span, "links", "links") {
                        *n += 1;
                        attributes(items(link, "attributes", "attributes"), n);
                    }
                }
            }
        }
        counts
    }

    pub fn request(v: &Value) -> Result<ExportTraceServiceRequest> {
        let resource_spans = list(v, "resourceSpans", "resource_spans")?
            .iter()
            .map(resource_spans)
            .collect::<Result<_>>()?;
        Ok(ExportTraceServiceRequest { resource_spans })
    }

    fn resource_spans(v: &Value) -> Result<ResourceSpans> {
        let resource = match field(v, "resource", "resource") {
            Some(r) => Some(Resource {
                attributes: attributes(r)?,
            }),
            None => None,
        };
        let scope_spans = list(v, "scopeSpans", "scope_spans")?
            .iter()
            .map(|scope| {
                Ok(ScopeSpans {
                    spans: list(scope, "spans", "spans")?
                        .iter()
                        .map(span)
                        .collect::<Result<_>>()?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(ResourceSpans {
            resource,
            scope_spans,
        })
    }

    fn span(v: &Value) -> Result<Span> {
        let status = match field(v, "status", "status") {
            Some(s) => Some(Status {
                message: string(s, "message", "message")?,
                code: match field(s, "code", "code") {
                    Some(Value::String(name)) => match name.as_str() {
                        "STATUS_CODE_UNSET" => 0,
                        "STATUS_CODE_OK" => 1,
                        "STATUS_CODE_ERROR" => 2,
                        other => return Err(format!("unknown status code `{other}`")),
                    },
                    _ => int(s, "code", "code")? as i32,
                },
            }),
            None => None,
        };
        Ok(Span {
            trace_id: hex_id(v, "traceId", "trace_id")?,
            span_id: hex_id(v, "spanId", "span_id")?,
            parent_span_id: hex_id(v, "parentSpanId", "parent_span_id")?,
            name: string(v, "name", "name")?,
            start_time_unix_nano: nanos(v, "startTimeUnixNano", "start_time_unix_nano")?,
            end_time_unix_nano: nanos(v, "endTimeUnixNano", "end_time_unix_nano")?,
            attributes: attributes(v)?,
            events: list(v, "events", "events")?
                .iter()
                .map(|e| {
                    Ok(Event {
                        time_unix_nano: nanos(e, "timeUnixNano", "time_unix_nano")?,
                        name: string(e, "name", "name")?,
                        attributes: attributes(e)?,
                    })
                })
                .collect::<Result<_>>()?,
            links: list(v, "links", "links")?
                .iter()
                .map(|l| {
                    Ok(Link {
                        trace_id: hex_id(l, "traceId", "trace_id")?,
                        span_id: hex_id(l, "spanId", "span_id")?,
                        attributes: attributes(l)?,
                    })
                })
                .collect::<Result<_>>()?,
            status,
        })
    }

    fn attributes(v: &Value) -> Result<Vec<KeyValue>> {
        list(v, "attributes", "attributes")?
            .iter()
            .map(key_value)
            .collect()
    }

    fn key_value(v: &Value) -> Result<KeyValue> {
        Ok(KeyValue {
            key: string(v, "key", "key")?,
            value: field(v, "value", "value").map(any_value).transpose()?,
        })
    }

    /// serde_json stops at 128 levels of nesting, so this recursion does.
    fn any_value(v: &Value) -> Result<AnyValue> {
        use base64::Engine;
        let value = if let Some(s) = field(v, "stringValue", "string_value") {
            Some(super::proto::Value::String(
                s.as_str()
                    .ok_or("`stringValue` must be a string")?
                    .to_owned(),
            ))
        } else if let Some(b) = field(v, "boolValue", "bool_value") {
            Some(super::proto::Value::Bool(
                b.as_bool().ok_or("`boolValue` must be true or false")?,
            ))
        } else if field(v, "intValue", "int_value").is_some() {
            Some(super::proto::Value::Int(int(v, "intValue", "int_value")?))
        } else if let Some(d) = field(v, "doubleValue", "double_value") {
            Some(super::proto::Value::Double(match d {
                Value::Number(n) => n.as_f64().unwrap_or_default(),
                Value::String(s) => match s.as_str() {
                    "NaN" => f64::NAN,
                    "Infinity" => f64::INFINITY,
                    "-Infinity" => f64::NEG_INFINITY,
                    other => other
                        .parse()
                        .map_err(|_| format!("`doubleValue` must be a number, not `{other}`"))?,
                },
                _ => return Err("`doubleValue` must be a number".into()),
            }))
        } else if let Some(a) = field(v, "arrayValue", "array_value") {
            Some(super::proto::Value::Array(ArrayValue {
                values: list(a, "values", "values")?
                    .iter()
                    .map(any_value)
                    .collect::<Result<_>>()?,
            }))
        } else if let Some(kv) = field(v, "kvlistValue", "kvlist_value") {
            Some(super::proto::Value::Kvlist(KeyValueList {
                values: list(kv, "values", "values")?
                    .iter()
                    .map(key_value)
                    .collect::<Result<_>>()?,
            }))
        } else if let Some(b) = field(v, "bytesValue", "bytes_value") {
            let text = b.as_str().ok_or("`bytesValue` must be base64 text")?;
            Some(super::proto::Value::Bytes(
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|_| "`bytesValue` must be base64".to_owned())?,
            ))
        } else {
            None
        };
        Ok(AnyValue { value })
    }
}

/// An attribute value as Python's `json.dumps(value, ensure_ascii=False)`
/// writes it (MLflow keeps span attributes so): `", "` and `": "` between
/// items, NaN and Infinity as Python spells them.
fn dump(value: Option<&AnyValue>, out: &mut String) {
    use proto::Value as V;
    let push_str = |s: &str, out: &mut String| {
        out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned()));
    };
    match value.and_then(|v| v.value.as_ref()) {
        None => out.push_str("null"),
        Some(V::String(s)) => push_str(s, out),
        Some(V::Bool(b)) => out.push_str(if *b { "true" } else { "false" }),
        Some(V::Int(i)) => out.push_str(&i.to_string()),
        Some(V::Double(d)) => out.push_str(&double(*d)),
        Some(V::Bytes(b)) => push_str(&base64::engine::general_purpose::STANDARD.encode(b), out),
        Some(V::Array(a)) => {
            out.push('[');
            for (i, item) in a.values.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dump(Some(item), out);
            }
            out.push(']');
        }
        Some(V::Kvlist(kv)) => {
            out.push('{');
            for (i, pair) in last_per_key(&kv.values).into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_str(&pair.key, out);
                out.push_str(": ");
                dump(pair.value.as_ref(), out);
            }
            out.push('}');
        }
    }
}

/// Python's repr of a float, near enough: JSON's number, or its words for
/// what JSON has no number for.
fn double(d: f64) -> String {
    if d.is_nan() {
        "NaN".to_owned()
    } else if d.is_infinite() {
        if d > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        serde_json::to_string(&d).unwrap_or_else(|_| "null".to_owned())
    }
}

/// As a dict keeps them: each key once, its last value, in first-seen order.
fn last_per_key(pairs: &[KeyValue]) -> Vec<&KeyValue> {
    let mut at: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out: Vec<&KeyValue> = Vec::new();
    for pair in pairs {
        match at.get(pair.key.as_str()) {
            Some(&i) => out[i] = pair,
            None => {
                at.insert(&pair.key, out.len());
                out.push(pair);
            }
        }
    }
    out
}

/// An attribute value as itself (events' and links' attributes are kept
/// so); what JSON cannot hold (NaN) is null.
fn raw(value: Option<&AnyValue>) -> Value {
    use proto::Value as V;
    match value.and_then(|v| v.value.as_ref()) {
        None => Value::Null,
        Some(V::String(s)) => json!(s),
        Some(V::Bool(b)) => json!(b),
        Some(V::Int(i)) => json!(i),
        Some(V::Double(d)) => serde_json::Number::from_f64(*d).map_or(Value::Null, Value::Number),
        Some(V::Bytes(b)) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        Some(V::Array(a)) => a.values.iter().map(|v| raw(Some(v))).collect(),
        Some(V::Kvlist(kv)) => raw_map(&kv.values),
    }
}

fn raw_map(pairs: &[KeyValue]) -> Value {
    Value::Object(
        last_per_key(pairs)
            .into_iter()
            .map(|kv| (kv.key.clone(), raw(kv.value.as_ref())))
            .collect(),
    )
}

/// A string attribute's text, anything else's JSON.
fn text_of(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(proto::Value::String(s)) => s.clone(),
        _ => {
            let mut out = String::new();
            dump(value, &mut out);
            out
        }
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A span's id checked: `bytes` long and not all zeros, as OTLP requires.
fn id_of<'a>(id: &'a [u8], bytes: usize, what: &str, span: &str) -> Result<&'a [u8], ApiError> {
    if id.len() != bytes || id.iter().all(|b| *b == 0) {
        return Err(ApiError::invalid(format!(
            "Invalid {what} of span `{span}`: {bytes} bytes, not all zero (got {})",
            id.len()
        )));
    }
    Ok(id)
}

/// The spans of one trace in a request, as `traces.json` keeps them, and
/// what they say about the trace.
#[derive(Debug, Default)]
pub struct TraceSpans {
    pub spans: Vec<Value>,
    pub summary: SpansOfTrace,
    /// The batch alone holds more than a trace's search bounds.
    pub search_cut: bool,
    /// Where each of `summary.tags` is, by key.
    tag_at: BTreeMap<String, usize>,
    /// The last resource whose tags the trace was given.
    resource: Option<usize>,
}

impl TraceSpans {
    /// A tag for the trace: the last value of a key wins, as a dict keeps
    /// it; bad ones and those past [`MAX_TAGS`] are left in the spans.
    fn tag(&mut self, key: String, value: String) {
        if !valid_pair(&key, &value) {
            return;
        }
        let tags = &mut self.summary.tags;
        match self.tag_at.get(&key) {
            Some(&i) => tags[i].1 = value,
            None if tags.len() < MAX_TAGS => {
                self.tag_at.insert(key.clone(), tags.len());
                tags.push((key, value));
            }
            None => {}
        }
    }
}

/// Where a span (as `traces.json` keeps it) sorts: by when it started.
fn start_of(span: &Value) -> u64 {
    span.get("start_time_unix_nano")
        .and_then(Value::as_u64)
        .unwrap_or(u64::MAX)
}

/// The request's spans, by trace (MLflow's id, `tr-` and hex).
pub fn convert(request: &ExportTraceServiceRequest) -> Result<Vec<TraceSpans>, ApiError> {
    let mut traces: Vec<TraceSpans> = Vec::new();
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    for (block, resource_spans) in request.resource_spans.iter().enumerate() {
        let resource_tags = resource_spans
            .resource
            .as_ref()
            .map(|r| resource_tags(&r.attributes))
            .unwrap_or_default();
        for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
            let trace_bytes = id_of(&span.trace_id, 16, "trace_id", &span.name)?;
            let trace_id = format!("tr-{}", hex::encode(trace_bytes));
            let i = *at.entry(trace_id.clone()).or_insert_with(|| {
                traces.push(TraceSpans {
                    summary: SpansOfTrace {
                        trace_id: trace_id.clone(),
                        start_ms: i64::MAX,
                        ..SpansOfTrace::default()
                    },
                    ..TraceSpans::default()
                });
                traces.len() - 1
            });
            if traces.len() > MAX_TRACES_PER_REQUEST {
                return Err(ApiError::invalid(format!(
                    "A request may carry the spans of at most {MAX_TRACES_PER_REQUEST} traces; send fewer at a time"
                )));
            }
            let trace = &mut traces[i];
            trace.spans.push(span_json(span, trace_bytes, &trace_id)?);
            let summary = &mut trace.summary;
            summary.start_ms = summary
                .start_ms
                .min((span.start_time_unix_nano / 1_000_000) as i64);
            if span.end_time_unix_nano > 0 {
                let end = (span.end_time_unix_nano / 1_000_000) as i64;
                summary.end_ms = Some(summary.end_ms.map_or(end, |e| e.max(end)));
            }
            // A resource's tags once per trace, not once per span.
            if trace.resource != Some(block) {
                trace.resource = Some(block);
                for (key, value) in &resource_tags {
                    trace.tag(key.clone(), value.clone());
                }
            }
            note_span(trace, span);
        }
    }
    // What search keeps of each batch (a trace sent a span at a time is
    // not read whole again for each).
    for trace in &mut traces {
        let mut spans = std::mem::take(&mut trace.spans);
        spans.sort_by_key(start_of);
        let batch = json!({ "spans": spans });
        let search = trainyard_store::spans::search_spans(&batch);
        trace.summary.search = search.spans;
        trace.search_cut = search.cut;
        if let Value::Object(mut batch) = batch
            && let Some(Value::Array(spans)) = batch.remove("spans")
        {
            trace.spans = spans;
        }
    }
    Ok(traces)
}

/// A span as `Span.to_dict()` writes it into `traces.json`.
fn span_json(span: &proto::Span, trace_bytes: &[u8], trace_id: &str) -> Result<Value, ApiError> {
    let span_id = id_of(&span.span_id, 8, "span_id", &span.name)?;
    let parent = if span.parent_span_id.is_empty() {
        Value::Null
    } else {
        json!(b64(id_of(
            &span.parent_span_id,
            8,
            "parent_span_id",
            &span.name
        )?))
    };
    let mut attributes = Map::new();
    for kv in last_per_key(&span.attributes) {
        let mut text = String::new();
        dump(kv.value.as_ref(), &mut text);
        attributes.insert(kv.key.clone(), Value::String(text));
    }
    // The server's word, never the client's, as MLflow's server does.
    attributes.insert(
        "mlflow.traceRequestId".to_owned(),
        Value::String(format!("\"{trace_id}\"")),
    );
    let status = span.status.clone().unwrap_or_default();
    let code = match status.code {
        1 => "STATUS_CODE_OK",
        2 => "STATUS_CODE_ERROR",
        _ => "STATUS_CODE_UNSET",
    };
    let links: Vec<Value> = span
        .links
        .iter()
        .filter(|l| l.trace_id.len() == 16 && l.span_id.len() == 8)
        .map(|l| {
            json!({
                "trace_id": format!("tr-{}", hex::encode(&l.trace_id)),
                "span_id": hex::encode(&l.span_id),
                "attributes": if l.attributes.is_empty() { Value::Null } else { raw_map(&l.attributes) },
            })
        })
        .collect();
    Ok(json!({
        "trace_id": b64(trace_bytes),
        "span_id": b64(span_id),
        "parent_span_id": parent,
        "name": span.name,
        "start_time_unix_nano": span.start_time_unix_nano,
        "end_time_unix_nano": span.end_time_unix_nano,
        "events": span.events.iter().map(|e| json!({
            "name": e.name,
            "time_unix_nano": e.time_unix_nano,
            "attributes": raw_map(&e.attributes),
        })).collect::<Vec<_>>(),
        "status": { "code": code, "message": status.message },
        "attributes": attributes,
        "links": links,
    }))
}

/// The exporter's resource attributes as trace tags, past OpenTelemetry's
/// own (`telemetry.sdk.*`) and MLflow's reserved keys (`mlflow.*`).
fn resource_tags(attributes: &[KeyValue]) -> Vec<(String, String)> {
    last_per_key(attributes)
        .into_iter()
        .filter(|kv| !kv.key.starts_with("telemetry.sdk.") && !kv.key.starts_with("mlflow."))
        .map(|kv| (kv.key.clone(), text_of(kv.value.as_ref())))
        .collect()
}

/// What one span says about its trace: the root's state, previews and
/// `mlflow.traceTag.*` tags; anyone's user and session.
fn note_span(trace: &mut TraceSpans, span: &proto::Span) {
    let attribute = |key: &str| {
        span.attributes
            .iter()
            .rev()
            .find(|kv| kv.key == key)
            .map(|kv| text_of(kv.value.as_ref()))
    };
    if span.parent_span_id.is_empty() {
        // The value as MLflow keeps it (JSON text), as MLflow's previews.
        let preview = |key: &str| {
            let text = span
                .attributes
                .iter()
                .rev()
                .find(|kv| kv.key == key)
                .map(|kv| {
                    let mut out = String::new();
                    dump(kv.value.as_ref(), &mut out);
                    out
                })
                .unwrap_or_default();
            match text.char_indices().nth(PREVIEW_CHARS - 3) {
                Some((cut, _)) if text.chars().count() > PREVIEW_CHARS => {
                    format!("{}...", &text[..cut])
                }
                _ => text,
            }
        };
        let error = span.status.as_ref().is_some_and(|s| s.code == 2);
        trace.summary.root = Some(RootSpan {
            state: if error { "ERROR" } else { "OK" }.to_owned(),
            request_preview: preview("mlflow.spanInputs"),
            response_preview: preview("mlflow.spanOutputs"),
        });
        for kv in last_per_key(&span.attributes) {
            if let Some(key) = kv.key.strip_prefix("mlflow.traceTag.") {
                trace.tag(key.to_owned(), text_of(kv.value.as_ref()));
            }
        }
    }
    let summary = &mut trace.summary;
    for (meta, keys) in [
        ("mlflow.trace.user", &["user.id"][..]),
        (
            "mlflow.trace.session",
            &["session.id", "gen_ai.conversation.id"][..],
        ),
    ] {
        if summary.metadata.iter().any(|(k, _)| k == meta) {
            continue;
        }
        if let Some(value) = keys.iter().find_map(|k| attribute(k))
            && valid_pair(meta, &value)
        {
            summary.metadata.push((meta.to_owned(), value));
        }
    }
}

/// A tag the trace may carry (others stay in the span's attributes).
fn valid_pair(key: &str, value: &str) -> bool {
    !key.is_empty()
        && key.chars().count() <= 250
        && !key.contains('\0')
        && !value.contains('\0')
        && value.chars().count() <= MAX_TAG_VALUE_LEN
}

/// `traces.json` with `incoming` spans merged into `existing`'s: a span
/// sent again replaces its old self, and all are in the order they
/// started. None where either is not a `{"spans": [...]}` object.
pub fn merge_spans(existing: Value, incoming: Value) -> Option<Value> {
    let (Value::Object(mut old), Value::Object(mut new)) = (existing, incoming) else {
        return None;
    };
    let mut new_spans = match new.remove("spans") {
        Some(Value::Array(spans)) => spans,
        _ => return None,
    };
    let Some(Value::Array(spans)) = old.get_mut("spans") else {
        return None;
    };
    let id = |s: &Value| s.get("span_id").and_then(Value::as_str).map(str::to_owned);
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    for (i, span) in spans.iter().enumerate() {
        if let Some(id) = id(span) {
            at.insert(id, i);
        }
    }
    for span in new_spans.drain(..) {
        match id(&span).and_then(|id| at.get(&id).copied()) {
            Some(i) => spans[i] = span,
            None => {
                if let Some(id) = id(&span) {
                    at.insert(id, spans.len());
                }
                spans.push(span);
            }
        }
    }
    // In the order they started, whichever process sent them first.
    spans.sort_by_key(start_of);
    for (key, value) in new {
        if key != "spans" {
            old.insert(key, value);
        }
    }
    Some(Value::Object(old))
}

/// `POST /v1/traces`.
pub async fn export(
    State(state): State<AppState>,
    Caller(principal): Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let header_text = |name: &str| -> Result<Option<String>, ApiError> {
        headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .map(|s| s.trim().to_owned())
                    .map_err(|_| ApiError::invalid(format!("The header {name} must be text")))
            })
            .transpose()
    };
    let experiment_id = header_text(EXPERIMENT_HEADER)?.ok_or_else(|| {
        ApiError::invalid(format!(
            "Missing header {EXPERIMENT_HEADER}: the id of the experiment the traces go to, e.g. OTEL_EXPORTER_OTLP_TRACES_HEADERS={EXPERIMENT_HEADER}=1"
        ))
    })?;
    let experiment_id = super::wire::parse_experiment_id(&experiment_id)?;
    let run_id = header_text(RUN_HEADER)?.filter(|r| !r.is_empty());
    if let Some(run) = &run_id {
        super::validate::run_id(run)?;
    }
    let encoding = Encoding::of(&headers)?;
    let content_encoding = header_text(header::CONTENT_ENCODING.as_str())?;
    // Inflating and parsing up to 16 MiB: off the async threads, and a
    // few at a time.
    let turn = DECODES.acquire().await.map_err(ApiError::internal)?;
    let traces = tokio::task::spawn_blocking(move || {
        let body = inflate(&body, content_encoding.as_deref())?;
        convert(&decode(&body, encoding)?)
    })
    .await
    .map_err(ApiError::internal)??;
    drop(turn);

    // Every permission check before any write: a request refused there
    // keeps nothing. (A trace's quota or bound is checked as its spans are
    // written; the traces before it in the request stay.)
    if let Some(run) = &run_id {
        super::may_change_run(&state, &principal, run).await?;
    }
    let job_run = match &principal.via {
        Via::RunToken { run_id } => Some(run_id.clone()),
        _ => None,
    };
    let mut places = Vec::with_capacity(traces.len());
    let mut may_add = false;
    for trace in &traces {
        let id = &trace.summary.trace_id;
        match state.store.trace_place(id).await {
            Ok((experiment, owner)) => {
                state
                    .store
                    .trace_as(&principal.user, id, trainyard_store::Access::Change)
                    .await?;
                super::traces::job_may_write(&state, &principal, id).await?;
                places.push((experiment, owner.user_id));
            }
            Err(trainyard_store::StoreError::NotFound(_)) => {
                if !may_add {
                    state
                        .store
                        .may_add_runs(&principal.user, experiment_id)
                        .await?;
                    if let Some(run) = &job_run
                        && state.store.run_experiment(run).await? != Some(experiment_id)
                    {
                        return Err(permission_denied(format!(
                            "a job's token writes traces to the experiment of its run {run} only"
                        )));
                    }
                    may_add = true;
                }
                places.push((experiment_id, principal.user.as_owner().user_id));
            }
            Err(e) => return Err(e.into()),
        }
    }

    for (trace, (experiment, owner)) in traces.iter().zip(places) {
        let id = &trace.summary.trace_id;
        // The file first: spans refused there (quota, bound) leave nothing.
        keep_spans(&state, experiment, owner, id, &trace.spans).await?;
        let recorded = state
            .store
            .record_spans(
                experiment,
                principal.user.as_owner(),
                job_run.as_deref(),
                &trace.summary,
            )
            .await?;
        if recorded.cut || trace.search_cut {
            tracing::info!(
                trace = %id,
                "a trace's spans are searched up to the bounds of trainyard_store::spans; the rest is in its traces.json"
            );
        }
    }
    if let Some(run) = &run_id {
        let done: Vec<String> = traces
            .iter()
            .filter(|t| t.summary.root.is_some())
            .map(|t| t.summary.trace_id.clone())
            .collect();
        if !done.is_empty() {
            state.store.link_traces_to_run(&done, run).await?;
        }
    }
    // OTLP's answer: an empty ExportTraceServiceResponse, in the request's
    // encoding (all spans kept, none rejected).
    Ok(match encoding {
        Encoding::Protobuf => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-protobuf"),
            )],
            Vec::<u8>::new(),
        )
            .into_response(),
        Encoding::Json => axum::Json(json!({})).into_response(),
    })
}

/// Merges a trace's spans into its `traces.json`: the owner's write, as
/// an upload of that file is.
async fn keep_spans(
    state: &AppState,
    experiment: i64,
    owner: Option<i64>,
    trace_id: &str,
    spans: &[Value],
) -> Result<(), ApiError> {
    let path = format!("{experiment}/traces/{trace_id}/artifacts/traces.json");
    let target = state.artifact_root.join(&path);
    // A file past the bound is never merged into (it would be replaced).
    if let Ok(meta) = tokio::fs::symlink_metadata(&target).await
        && meta.len() > MAX_TRACE_FILE
    {
        return Err(full(trace_id));
    }
    #[derive(serde::Serialize)]
    struct File<'a> {
        spans: &'a [Value],
    }
    let bytes = serde_json::to_vec(&File { spans }).map_err(ApiError::internal)?;
    // A batch larger than a trace keeps is refused as such (not as a body
    // past the upload limit that `store_file` would name).
    if bytes.len() as u64 > MAX_TRACE_FILE {
        return Err(full(trace_id));
    }
    let declared = bytes.len() as u64;
    let body = futures::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from(bytes))]);
    super::artifacts::store_file(
        state,
        owner,
        &target,
        &path,
        declared,
        MAX_TRACE_FILE as usize,
        body,
    )
    .await?;
    Ok(())
}

/// The refusal of spans that would make a trace's file larger than a
/// trace keeps.
pub fn full(trace_id: &str) -> ApiError {
    ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "REQUEST_LIMIT_EXCEEDED",
        message: format!(
            "Trace {trace_id} would hold more than {} MiB of spans, more than a trace keeps: these spans are refused; start a new trace for further work",
            MAX_TRACE_FILE >> 20
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An export request that OpenTelemetry's own Python classes wrote, and
    /// the spans MLflow 3.17's `Span.from_otel_proto(...).to_dict()` made of
    /// it (in `testdata/`).
    fn fixture() -> (Vec<u8>, Value) {
        let request = hex::decode(include_str!("testdata/otlp-request.hex").trim()).unwrap();
        let spans = serde_json::from_str(include_str!("testdata/otlp-spans.json")).unwrap();
        (request, spans)
    }

    /// The fixture's spans in the order they started (the request sends
    /// the child first, as it ended first).
    fn started_first(mut spans: Value) -> Value {
        spans["spans"].as_array_mut().unwrap().sort_by_key(start_of);
        spans
    }

    #[test]
    fn spans_are_kept_as_mlflow_keeps_them() {
        let (request, expected) = fixture();
        let traces = convert(&decode(&request, Encoding::Protobuf).unwrap()).unwrap();
        assert_eq!(traces.len(), 1);
        let trace = &traces[0];
        let names: Vec<&str> = trace
            .spans
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["root", "score"]);
        assert_eq!(json!({ "spans": trace.spans }), started_first(expected));
        let summary = &trace.summary;
        assert_eq!(summary.trace_id, "tr-0af7651916cd43dd8448eb211c80319c");
        // The root (not ended, status unset) started at 1 ns: 0 ms; the
        // child ended last.
        assert_eq!(
            (summary.start_ms, summary.end_ms),
            (0, Some(1_765_000_000_223))
        );
        assert_eq!(summary.root.as_ref().unwrap().state, "OK");
        // The resource's service.name, not OpenTelemetry's or MLflow's own.
        assert_eq!(summary.tags, [("service.name".into(), "agent".into())]);
    }

    #[test]
    fn otlp_json_with_hex_ids_reads_as_protobuf_does() {
        let (request, _) = fixture();
        let from_protobuf = decode(&request, Encoding::Protobuf).unwrap();
        let body = json!({"resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "agent"}},
                {"key": "telemetry.sdk.name", "value": {"stringValue": "opentelemetry"}},
                {"key": "mlflow.x", "value": {"stringValue": "no"}},
            ]},
            "scopeSpans": [{"scope": {"name": "x"}, "spans": [{
                "traceId": "0af7651916cd43dd8448eb211c80319c",
                "spanId": "b7ad6b7169203331",
                "parentSpanId": "00f067aa0ba902b7",
                "name": "score",
                "kind": 1,
                "startTimeUnixNano": "1765000000123456789",
                "endTimeUnixNano": 1765000000223456789u64,
                "attributes": [
                    {"key": "s", "value": {"stringValue": "héllo \"q\""}},
                    {"key": "b", "value": {"boolValue": true}},
                    {"key": "i", "value": {"intValue": "42"}},
                    {"key": "d", "value": {"doubleValue": 1.5}},
                    {"key": "arr", "value": {"arrayValue": {"values": [{"intValue": 1}, {"stringValue": "x"}]}}},
                    {"key": "kv", "value": {"kvlistValue": {"values": [{"key": "a", "value": {"intValue": "1"}}]}}},
                    {"key": "mlflow.spanType", "value": {"stringValue": "\"LLM\""}},
                    {"key": "empty", "value": {}},
                ],
                "events": [{"timeUnixNano": "5", "name": "exception", "attributes": [
                    {"key": "exception.type", "value": {"stringValue": "ValueError"}},
                    {"key": "n", "value": {"intValue": 3}},
                ]}],
                "links": [{"traceId": "1af7651916cd43dd8448eb211c80319c", "spanId": "c7ad6b7169203331",
                           "attributes": [{"key": "x", "value": {"stringValue": "y"}}]}],
                "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
            }, {
                "trace_id": "0af7651916cd43dd8448eb211c80319c",
                "span_id": "00f067aa0ba902b7",
                "parent_span_id": "",
                "name": "root",
                "start_time_unix_nano": 1,
            }]}],
        }]});
        let from_json = decode(&serde_json::to_vec(&body).unwrap(), Encoding::Json).unwrap();
        assert_eq!(json::counts(&body), decoded_counts(&from_json));
        // The JSON says the empty attribute as `{}` (a value with nothing
        // set), protobuf left it out: both are null.
        assert_eq!(
            json!({"spans": convert(&from_json).unwrap()[0].spans}),
            json!({"spans": convert(&from_protobuf).unwrap()[0].spans})
        );
        let bad = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "not hex"}]}]}]});
        let err = decode(&serde_json::to_vec(&bad).unwrap(), Encoding::Json).unwrap_err();
        assert!(
            err.message.contains("`traceId` must be hex"),
            "{}",
            err.message
        );
    }

    #[test]
    fn bad_spans_are_refused_saying_which_and_why() {
        let span = |trace_id: Vec<u8>, span_id: Vec<u8>| ExportTraceServiceRequest {
            resource_spans: vec![proto::ResourceSpans {
                resource: None,
                scope_spans: vec![proto::ScopeSpans {
                    spans: vec![proto::Span {
                        trace_id,
                        span_id,
                        name: "plan".into(),
                        ..proto::Span::default()
                    }],
                }],
            }],
        };
        let err = convert(&span(vec![0; 16], vec![1; 8])).unwrap_err();
        assert!(
            err.message.contains("trace_id of span `plan`"),
            "{}",
            err.message
        );
        let err = convert(&span(vec![1; 16], vec![1; 3])).unwrap_err();
        assert!(
            err.message.contains("span_id of span `plan`: 8 bytes"),
            "{}",
            err.message
        );
        assert!(convert(&span(vec![1; 16], vec![1; 8])).is_ok());
        let err = decode(b"\xff\xff\xff", Encoding::Protobuf).unwrap_err();
        assert!(err.message.contains("protobuf"), "{}", err.message);
        let err = decode(b"", Encoding::Protobuf).unwrap_err();
        assert!(err.message.contains("no resourceSpans"), "{}", err.message);
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(Encoding::of(&headers).is_err());
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        assert_eq!(Encoding::of(&headers).unwrap(), Encoding::Json);
    }

    #[test]
    fn bodies_are_inflated_within_the_bound() {
        use flate2::Compression;
        use std::io::Write;
        let (request, _) = fixture();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&request).unwrap();
        assert_eq!(
            inflate(&gz.finish().unwrap(), Some("gzip")).unwrap(),
            request
        );
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), Compression::fast());
        zlib.write_all(&request).unwrap();
        assert_eq!(
            inflate(&zlib.finish().unwrap(), Some("deflate")).unwrap(),
            request
        );
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), Compression::fast());
        raw.write_all(&request).unwrap();
        assert_eq!(
            inflate(&raw.finish().unwrap(), Some("Deflate")).unwrap(),
            request
        );
        assert!(inflate(b"not gzip", Some("gzip")).is_err());
        assert!(
            inflate(&request, Some("br"))
                .unwrap_err()
                .message
                .contains("`br`")
        );
        // 16 MiB and a byte of zeros, a few KiB sent: refused, not kept.
        let mut bomb = flate2::write::GzEncoder::new(Vec::new(), Compression::best());
        bomb.write_all(&vec![0u8; MAX_OTLP_BODY + 1]).unwrap();
        let bomb = bomb.finish().unwrap();
        assert!(bomb.len() < 64 << 10);
        assert_eq!(
            inflate(&bomb, Some("gzip")).unwrap_err().status,
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }

    #[test]
    fn the_root_span_says_the_state_previews_tags_user_and_session() {
        let kv = |key: &str, value: proto::Value| KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
        };
        let text = |s: &str| proto::Value::String(s.into());
        let long = "x".repeat(5000);
        let root = proto::Span {
            trace_id: vec![7; 16],
            span_id: vec![1; 8],
            name: "agent".into(),
            start_time_unix_nano: 2_000_000_000,
            end_time_unix_nano: 3_000_000_000,
            attributes: vec![
                kv(
                    "mlflow.spanInputs",
                    proto::Value::Kvlist(proto::KeyValueList {
                        values: vec![kv("q", text("hi"))],
                    }),
                ),
                kv("mlflow.spanOutputs", text(&long)),
                kv("mlflow.traceTag.mlflow.traceName", text("plan")),
                kv("mlflow.traceTag.team", text("vision")),
                kv("mlflow.traceTag.", text("no key")),
                kv("session.id", text("s-1")),
            ],
            status: Some(proto::Status {
                code: 2,
                message: "failed".into(),
            }),
            ..proto::Span::default()
        };
        let child = proto::Span {
            span_id: vec![2; 8],
            parent_span_id: vec![1; 8],
            attributes: vec![kv("user.id", proto::Value::Int(42))],
            start_time_unix_nano: 2_500_000_000,
            ..root.clone()
        };
        let request = ExportTraceServiceRequest {
            resource_spans: vec![proto::ResourceSpans {
                resource: None,
                scope_spans: vec![proto::ScopeSpans {
                    spans: vec![child, root],
                }],
            }],
        };
        let traces = convert(&request).unwrap();
        let names: Vec<_> = traces[0].spans.iter().map(|s| &s["span_id"]).collect();
        assert_eq!(names, [&json!(b64(&[1; 8])), &json!(b64(&[2; 8]))]);
        let summary = &traces[0].summary;
        let root = summary.root.as_ref().unwrap();
        assert_eq!(root.state, "ERROR");
        assert_eq!(root.request_preview, "{\"q\": \"hi\"}");
        assert_eq!(root.response_preview.chars().count(), PREVIEW_CHARS);
        assert!(root.response_preview.ends_with("x..."));
        assert_eq!(
            summary.tags,
            [
                ("mlflow.traceName".to_owned(), "plan".to_owned()),
                ("team".to_owned(), "vision".to_owned())
            ]
        );
        assert_eq!(
            summary.metadata,
            [
                ("mlflow.trace.user".to_owned(), "42".to_owned()),
                ("mlflow.trace.session".to_owned(), "s-1".to_owned())
            ]
        );
        assert_eq!((summary.start_ms, summary.end_ms), (2_000, Some(3_000)));
    }

    #[test]
    fn merged_spans_replace_their_old_selves_in_the_order_they_started() {
        let span = |id: &str, name: &str, start: u64| json!({"span_id": id, "name": name, "start_time_unix_nano": start});
        let merged = merge_spans(
            json!({"spans": [span("a", "root", 1), span("b", "first", 3)], "v": 1}),
            json!({"spans": [span("c", "new", 2), span("b", "again", 3)], "v": 2}),
        )
        .unwrap();
        assert_eq!(
            merged,
            json!({"spans": [span("a", "root", 1), span("c", "new", 2), span("b", "again", 3)], "v": 2})
        );
        // The child's span came over OTLP as it ended, then the client
        // uploaded the whole trace: the root comes first all the same.
        let merged = merge_spans(
            json!({"spans": [span("r", "retrieve", 20)]}),
            json!({"spans": [span("a", "answer", 10), span("r", "retrieve", 20)]}),
        )
        .unwrap();
        assert_eq!(
            merged,
            json!({"spans": [span("a", "answer", 10), span("r", "retrieve", 20)]})
        );
        assert!(merge_spans(json!([1]), json!({"spans": []})).is_none());
        assert!(merge_spans(json!({"spans": []}), json!({"spans": 3})).is_none());
    }

    #[test]
    fn resource_attributes_tag_a_trace_once_and_the_last_value_wins() {
        let attributes = |n: usize, value: &str| proto::Resource {
            attributes: (0..n)
                .map(|i| KeyValue {
                    key: format!("k{i}"),
                    value: Some(AnyValue {
                        value: Some(proto::Value::String(value.into())),
                    }),
                })
                .collect(),
        };
        let spans = |n: u8| proto::ScopeSpans {
            spans: (1..=n)
                .map(|i| proto::Span {
                    trace_id: vec![9; 16],
                    span_id: vec![i; 8],
                    parent_span_id: vec![1; 8],
                    ..proto::Span::default()
                })
                .collect(),
        };
        let request = ExportTraceServiceRequest {
            resource_spans: vec![
                proto::ResourceSpans {
                    resource: Some(attributes(3, "first")),
                    scope_spans: vec![spans(200)],
                },
                proto::ResourceSpans {
                    resource: Some(attributes(2, "second")),
                    scope_spans: vec![spans(2)],
                },
            ],
        };
        let traces = convert(&request).unwrap();
        let tag = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            traces[0].summary.tags,
            [tag("k0", "second"), tag("k1", "second"), tag("k2", "first")]
        );
        // A resource of more attributes than a trace keeps tags: the
        // first MAX_TAGS.
        let request = ExportTraceServiceRequest {
            resource_spans: vec![proto::ResourceSpans {
                resource: Some(attributes(MAX_TAGS + 500, "v")),
                scope_spans: vec![spans(3)],
            }],
        };
        let tags = &convert(&request).unwrap()[0].summary.tags;
        assert_eq!(tags.len(), MAX_TAGS);
        assert_eq!(tags.last().unwrap().0, format!("k{}", MAX_TAGS - 1));
    }

    /// What prost made of a request, counted as `wire::count` counts it.
    fn decoded_counts(request: &ExportTraceServiceRequest) -> wire::Counts {
        fn value(v: &AnyValue) -> usize {
            1 + match &v.value {
                Some(proto::Value::Array(list)) => 1 + list.values.iter().map(value).sum::<usize>(),
                Some(proto::Value::Kvlist(list)) => 1 + pairs(&list.values),
                _ => 0,
            }
        }
        fn pairs(kvs: &[KeyValue]) -> usize {
            kvs.iter()
                .map(|kv| 1 + kv.value.as_ref().map_or(0, value))
                .sum()
        }
        let mut counts = wire::Counts::default();
        for rs in &request.resource_spans {
            counts.elements += 1 + rs.resource.as_ref().map_or(0, |r| 1 + pairs(&r.attributes));
            for ss in &rs.scope_spans {
                counts.elements += 1;
                for span in &ss.spans {
                    counts.spans += 1;
                    counts.elements += pairs(&span.attributes)
                        + usize::from(span.status.is_some())
                        + span
                            .events
                            .iter()
                            .map(|e| 1 + pairs(&e.attributes))
                            .sum::<usize>()
                        + span
                            .links
                            .iter()
                            .map(|l| 1 + pairs(&l.attributes))
                            .sum::<usize>();
                }
            }
        }
        counts
    }

    #[test]
    fn requests_are_counted_in_their_bytes_before_they_are_decoded() {
        use prost::Message;
        let (request, _) = fixture();
        let decoded = decode(&request, Encoding::Protobuf).unwrap();
        let counts = wire::count(&request).unwrap();
        assert_eq!(counts, decoded_counts(&decoded));
        assert_eq!(counts.spans, 2);
        // Nested values count too.
        let mut nested = decoded.clone();
        let list = |values| AnyValue {
            value: Some(proto::Value::Array(proto::ArrayValue { values })),
        };
        nested.resource_spans[0].scope_spans[0].spans[0]
            .attributes
            .push(KeyValue {
                key: "deep".into(),
                value: Some(list(vec![
                    list(vec![AnyValue::default()]),
                    AnyValue::default(),
                ])),
            });
        let bytes = nested.encode_to_vec();
        assert_eq!(wire::count(&bytes).unwrap(), decoded_counts(&nested));
        // The pair, its list, the list in that and the three values.
        assert_eq!(wire::count(&bytes).unwrap().elements, counts.elements + 7);
        // Cut short anywhere: refused, as prost refuses it.
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            assert!(wire::count(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let err = decode(&bytes[..bytes.len() - 1], Encoding::Protobuf).unwrap_err();
        assert!(err.message.contains("protobuf"), "{}", err.message);
    }

    /// A protobuf field of `tag` holding `payload`.
    fn field(tag: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![tag << 3 | 2];
        let mut len = payload.len();
        while len >= 0x80 {
            out.push((len as u8) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn bodies_of_many_tiny_elements_are_refused_before_they_are_decoded() {
        // 10,001 empty spans: 20 KB that would decode to megabytes.
        let spans = field(1, &field(2, &b"\x12\x00".repeat(MAX_SPANS_PER_REQUEST + 1)));
        let err = decode(&spans, Encoding::Protobuf).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(
            err.message
                .contains("at most 10000 spans (this one: 10001)")
                && err.message.contains("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
            "{}",
            err.message
        );
        let within = field(1, &field(2, &b"\x12\x00".repeat(MAX_SPANS_PER_REQUEST)));
        assert_eq!(
            decode(&within, Encoding::Protobuf)
                .unwrap()
                .resource_spans
                .len(),
            1
        );
        // A million and one empty resource attributes.
        let attributes = field(1, &field(1, &b"\x0a\x00".repeat(MAX_ELEMENTS_PER_REQUEST)));
        let err = decode(&attributes, Encoding::Protobuf).unwrap_err();
        assert!(
            err.message.contains("at most 1000000 attributes"),
            "{}",
            err.message
        );
        // Values nested deeper than prost goes.
        let mut deep = Vec::new();
        for _ in 0..60 {
            deep = field(5, &field(1, &deep));
        }
        let deep = field(1, &field(1, &field(1, &field(2, &deep))));
        let err = decode(&deep, Encoding::Protobuf).unwrap_err();
        assert!(err.message.contains("nested"), "{}", err.message);
        // OTLP/JSON: spans counted before they are converted, and values
        // before they are parsed.
        let spans = format!(
            "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{}]}}]}}]}}",
            "{},".repeat(MAX_SPANS_PER_REQUEST) + "{}"
        );
        let err = decode(spans.as_bytes(), Encoding::Json).unwrap_err();
        assert!(err.message.contains("10000 spans"), "{}", err.message);
        let zeros = format!(
            "{{\"resourceSpans\":[{{\"resource\":{{\"attributes\":[{}]}}}}]}}",
            "0,".repeat(MAX_JSON_VALUES) + "0"
        );
        let err = decode(zeros.as_bytes(), Encoding::Json).unwrap_err();
        assert!(err.message.contains("JSON values"), "{}", err.message);
        let zeros = format!(
            "{{\"resourceSpans\":[{{\"resource\":{{\"attributes\":[{}]}}}}]}}",
            "0,".repeat(MAX_ELEMENTS_PER_REQUEST) + "0"
        );
        let err = decode(zeros.as_bytes(), Encoding::Json).unwrap_err();
        assert!(
            err.message.contains("at most 1000000 attributes"),
            "{}",
            err.message
        );
    }

    #[test]
    fn attribute_values_are_dumped_as_python_does() {
        let dumped = |value: proto::Value| {
            let mut out = String::new();
            dump(Some(&AnyValue { value: Some(value) }), &mut out);
            out
        };
        assert_eq!(dumped(proto::Value::Double(f64::NAN)), "NaN");
        assert_eq!(dumped(proto::Value::Double(f64::NEG_INFINITY)), "-Infinity");
        assert_eq!(dumped(proto::Value::Double(2.0)), "2.0");
        assert_eq!(dumped(proto::Value::String("日本\n".into())), "\"日本\\n\"");
        assert_eq!(dumped(proto::Value::Bytes(vec![0, 1])), "\"AAE=\"");
    }
}
