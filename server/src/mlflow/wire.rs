//! MLflow's JSON forms: lenient readers for int64 (number or string), doubles
//! (number, or "NaN" / "Infinity" strings), ids (string or number) and lists
//! (one value or many); writers for experiments, runs and metrics; page tokens.

use base64::Engine;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use trainyard_domain::tracking::{
    Dataset, DatasetInput, DatasetSummary, Experiment, LoggedModel, ModelVersion, Point,
    RegisteredModel, Run, RunInfo, RunIo,
};

use super::ApiError;

/// A JSON scalar read without buffering: number (integer or float) or string.
enum Scalar {
    Int(i64),
    Float(f64),
    Str(String),
}

struct ScalarVisitor;

impl<'de> serde::de::Visitor<'de> for ScalarVisitor {
    type Value = Option<Scalar>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a number or a string")
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(Scalar::Int(v)))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        i64::try_from(v)
            .map(|v| Some(Scalar::Int(v)))
            .or(Ok(Some(Scalar::Float(v as f64))))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(Scalar::Float(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Scalar::Str(v.to_owned())))
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Scalar>, D::Error> {
    d.deserialize_option(ScalarVisitor)
}

pub fn opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error;
    match scalar(d)? {
        None => Ok(None),
        Some(Scalar::Int(i)) => Ok(Some(i)),
        Some(Scalar::Float(f)) if f.fract() == 0.0 && f.abs() < 9.2e18 => Ok(Some(f as i64)),
        Some(Scalar::Float(f)) => Err(D::Error::custom(format!("{f} is not an integer"))),
        Some(Scalar::Str(s)) if s.trim().is_empty() => Ok(None),
        Some(Scalar::Str(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("`{s}` is not an integer"))),
    }
}

pub fn opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    use serde::de::Error;
    match scalar(d)? {
        None => Ok(None),
        Some(Scalar::Int(i)) => Ok(Some(i as f64)),
        Some(Scalar::Float(f)) => Ok(Some(f)),
        Some(Scalar::Str(s)) => match s.trim() {
            "NaN" | "nan" => Ok(Some(f64::NAN)),
            "Infinity" | "inf" => Ok(Some(f64::INFINITY)),
            "-Infinity" | "-inf" => Ok(Some(f64::NEG_INFINITY)),
            other => other
                .parse()
                .map(Some)
                .map_err(|_| D::Error::custom(format!("`{s}` is not a number"))),
        },
    }
}

/// An id that MLflow types as a string but that clients may send as a number.
pub fn opt_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match scalar(d)? {
        None => None,
        Some(Scalar::Int(i)) => Some(i.to_string()),
        Some(Scalar::Float(f)) => Some(f.to_string()),
        Some(Scalar::Str(s)) => Some(s),
    })
}

/// A list that a GET query may carry as a single value.
pub fn list<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        Many(Vec<T>),
        One(T),
    }
    Ok(match Option::<OneOrMany<T>>::deserialize(d)? {
        None => Vec::new(),
        Some(OneOrMany::Many(v)) => v,
        Some(OneOrMany::One(v)) => vec![v],
    })
}

/// Lenient experiment ids (strings or numbers) in a list.
pub fn id_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let values: Vec<Value> = list(d)?;
    Ok(values
        .into_iter()
        .map(|v| match v {
            Value::String(s) => s,
            other => other.to_string(),
        })
        .collect())
}

pub fn parse_experiment_id(id: &str) -> Result<i64, ApiError> {
    id.trim().parse().map_err(|_| {
        ApiError::invalid(format!(
            "Invalid experiment ID '{id}'. Experiment ID must be a valid integer."
        ))
    })
}

pub fn required<T>(value: Option<T>, name: &str) -> Result<T, ApiError> {
    value.ok_or_else(|| {
        ApiError::invalid(format!(
            "Missing value for required parameter '{name}'. See the API docs for more information about request parameters."
        ))
    })
}

/// A double as MLflow writes it: a number, or "NaN" / "Infinity" / "-Infinity".
pub fn double(v: f64) -> Value {
    if v.is_nan() {
        json!("NaN")
    } else if v == f64::INFINITY {
        json!("Infinity")
    } else if v == f64::NEG_INFINITY {
        json!("-Infinity")
    } else {
        json!(v)
    }
}

fn kv_list(items: &[(String, String)]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|(k, v)| json!({ "key": k, "value": v }))
            .collect(),
    )
}

pub fn experiment(e: &Experiment) -> Value {
    let mut out = json!({
        "experiment_id": e.id.to_string(),
        "name": e.name,
        "artifact_location": e.artifact_location,
        "lifecycle_stage": e.lifecycle_stage,
        "last_update_time": e.last_update_time,
        "creation_time": e.creation_time,
    });
    if !e.tags.is_empty() {
        out["tags"] = kv_list(&e.tags);
    }
    out
}

pub fn run_info(info: &RunInfo) -> Value {
    let mut out = json!({
        "run_id": info.run_id,
        "run_uuid": info.run_id,
        "run_name": info.run_name,
        "experiment_id": info.experiment_id.to_string(),
        "user_id": info.user_id,
        "status": info.status,
        "start_time": info.start_time,
        "artifact_uri": info.artifact_uri,
        "lifecycle_stage": info.lifecycle_stage,
    });
    if let Some(end) = info.end_time {
        out["end_time"] = json!(end);
    }
    out
}

/// A double in MLflow's JSON form (non-finite values as strings), written
/// without building a `Value`.
pub struct Double(pub f64);

impl serde::Serialize for Double {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v == f64::INFINITY {
            s.serialize_str("Infinity")
        } else if v == f64::NEG_INFINITY {
            s.serialize_str("-Infinity")
        } else {
            s.serialize_f64(v)
        }
    }
}

/// A metric point in MLflow's JSON form, written without building a `Value`
/// (a history can hold millions).
pub struct MetricJson<'a> {
    pub key: &'a str,
    pub point: &'a Point,
}

impl serde::Serialize for MetricJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut m = s.serialize_struct("Metric", 4)?;
        m.serialize_field("key", self.key)?;
        m.serialize_field("value", &Double(self.point.value))?;
        m.serialize_field("timestamp", &self.point.timestamp)?;
        m.serialize_field("step", &self.point.step)?;
        m.end()
    }
}

pub fn metric(key: &str, p: &Point) -> Value {
    json!({ "key": key, "value": double(p.value), "timestamp": p.timestamp, "step": p.step })
}

pub fn run(r: &Run) -> Value {
    run_with_io(r, None)
}

/// A run with what it read and wrote (datasets, models), as MLflow 3 sends it.
pub fn run_with_io(r: &Run, io: Option<&RunIo>) -> Value {
    let metrics: Vec<Value> = r.metrics.iter().map(|m| metric(&m.key, &m.point)).collect();
    let mut inputs = json!({});
    let mut outputs = json!({});
    if let Some(io) = io {
        if !io.datasets.is_empty() {
            inputs["dataset_inputs"] = io.datasets.iter().map(dataset_input).collect();
        }
        if !io.model_inputs.is_empty() {
            inputs["model_inputs"] = io
                .model_inputs
                .iter()
                .map(|id| json!({ "model_id": id }))
                .collect();
        }
        if !io.model_outputs.is_empty() {
            outputs["model_outputs"] = io
                .model_outputs
                .iter()
                .map(|(id, step)| json!({ "model_id": id, "step": step }))
                .collect();
        }
    }
    json!({
        "info": run_info(&r.info),
        "data": {
            "metrics": metrics,
            "params": kv_list(&r.params),
            "tags": kv_list(&r.tags),
        },
        "inputs": inputs,
        "outputs": outputs,
    })
}

pub fn dataset(d: &Dataset) -> Value {
    let mut out = json!({
        "name": d.name,
        "digest": d.digest,
        "source_type": d.source_type,
        "source": d.source,
    });
    if let Some(schema) = &d.schema {
        out["schema"] = json!(schema);
    }
    if let Some(profile) = &d.profile {
        out["profile"] = json!(profile);
    }
    out
}

fn dataset_input(input: &DatasetInput) -> Value {
    let mut out = json!({ "dataset": dataset(&input.dataset) });
    if !input.tags.is_empty() {
        out["tags"] = kv_list(&input.tags);
    }
    out
}

pub fn dataset_summary(d: &DatasetSummary) -> Value {
    let mut out = json!({
        "experiment_id": d.experiment_id.to_string(),
        "name": d.name,
        "digest": d.digest,
    });
    if let Some(context) = &d.context {
        out["context"] = json!(context);
    }
    out
}

/// A logged model's status as the proto names it (FAILED is
/// `LOGGED_MODEL_UPLOAD_FAILED` there).
fn logged_model_status(status: &str) -> String {
    match status {
        "FAILED" => "LOGGED_MODEL_UPLOAD_FAILED".to_owned(),
        other => format!("LOGGED_MODEL_{other}"),
    }
}

/// A logged model in MLflow 3's form: `info` (with tags) and `data`
/// (params, metrics); the status as the proto's `LOGGED_MODEL_*` name.
pub fn logged_model(m: &LoggedModel) -> Value {
    let mut info = json!({
        "model_id": m.model_id,
        "experiment_id": m.experiment_id.to_string(),
        "name": m.name,
        "creation_timestamp_ms": m.creation_time,
        "last_updated_timestamp_ms": m.last_update_time,
        "artifact_uri": m.artifact_uri,
        "status": logged_model_status(&m.status),
        "model_type": m.model_type,
    });
    if let Some(run) = &m.source_run_id {
        info["source_run_id"] = json!(run);
    }
    if !m.status_message.is_empty() {
        info["status_message"] = json!(m.status_message);
    }
    if !m.tags.is_empty() {
        info["tags"] = kv_list(&m.tags);
    }
    let mut data = json!({});
    if !m.params.is_empty() {
        data["params"] = kv_list(&m.params);
    }
    if !m.metrics.is_empty() {
        data["metrics"] = m
            .metrics
            .iter()
            .map(|x| {
                let mut out = metric(&x.key, &x.point);
                out["model_id"] = json!(m.model_id);
                if let Some(run) = &x.run_id {
                    out["run_id"] = json!(run);
                }
                if let Some(name) = &x.dataset_name {
                    out["dataset_name"] = json!(name);
                }
                if let Some(digest) = &x.dataset_digest {
                    out["dataset_digest"] = json!(digest);
                }
                out
            })
            .collect();
    }
    json!({ "info": info, "data": data })
}

/// A model version in the registry's form (version as a string).
pub fn model_version(v: &ModelVersion) -> Value {
    let mut out = json!({
        "name": v.name,
        "version": v.version.to_string(),
        "creation_timestamp": v.creation_time,
        "last_updated_timestamp": v.last_update_time,
        "current_stage": v.stage,
        "description": v.description,
        "source": v.source,
        "run_id": v.run_id.clone().unwrap_or_default(),
        "status": "READY",
        "run_link": v.run_link,
    });
    if !v.user_id.is_empty() {
        out["user_id"] = json!(v.user_id);
    }
    if let Some(model_id) = &v.model_id {
        out["model_id"] = json!(model_id);
    }
    if !v.tags.is_empty() {
        out["tags"] = kv_list(&v.tags);
    }
    if !v.aliases.is_empty() {
        out["aliases"] = json!(v.aliases);
    }
    out
}

pub fn registered_model(m: &RegisteredModel) -> Value {
    let mut out = json!({
        "name": m.name,
        "creation_timestamp": m.creation_time,
        "last_updated_timestamp": m.last_update_time,
    });
    if let Some(description) = &m.description {
        out["description"] = json!(description);
    }
    if !m.latest_versions.is_empty() {
        out["latest_versions"] = m.latest_versions.iter().map(model_version).collect();
    }
    if !m.tags.is_empty() {
        out["tags"] = kv_list(&m.tags);
    }
    if !m.aliases.is_empty() {
        out["aliases"] = m
            .aliases
            .iter()
            .map(|(alias, version)| json!({ "alias": alias, "version": version.to_string() }))
            .collect();
    }
    out
}

/// The most fields one search orders by.
pub const MAX_ORDER_BY: usize = 10;
/// The most experiments one search names: the mlflow client's
/// `search_all_experiments=True` names every active one.
pub const MAX_EXPERIMENT_IDS: usize = 100_000;

/// Refuses a search's `order_by` of more than [`MAX_ORDER_BY`] fields.
pub fn order_by_bound<T>(order_by: &[T]) -> Result<(), ApiError> {
    if order_by.len() > MAX_ORDER_BY {
        return Err(ApiError::invalid(format!(
            "'order_by' lists {} fields; order by at most {MAX_ORDER_BY}",
            order_by.len()
        )));
    }
    Ok(())
}

/// The experiment ids a search names, at most [`MAX_EXPERIMENT_IDS`].
pub fn experiment_ids(ids: &[String], field: &str) -> Result<Vec<i64>, ApiError> {
    if ids.len() > MAX_EXPERIMENT_IDS {
        return Err(ApiError::invalid(format!(
            "'{field}' names {} experiments; name at most {MAX_EXPERIMENT_IDS} in one search",
            ids.len()
        )));
    }
    ids.iter().map(|id| parse_experiment_id(id)).collect()
}

/// MLflow's page token: base64 of `{"offset": N}`.
pub fn page_token(offset: u64) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{{\"offset\": {offset}}}"))
}

pub fn parse_page_token(token: Option<&str>) -> Result<u64, ApiError> {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Ok(0);
    };
    // An offset the databases take (a signed 64-bit number).
    decode_page_token(token)?["offset"]
        .as_u64()
        .filter(|offset| i64::try_from(*offset).is_ok())
        .ok_or_else(|| invalid_page_token(token))
}

/// The JSON inside a base64 page token.
pub fn decode_page_token(token: &str) -> Result<Value, ApiError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .map_err(|_| invalid_page_token(token))?;
    serde_json::from_slice(&bytes).map_err(|_| invalid_page_token(token))
}

pub fn invalid_page_token(token: &str) -> ApiError {
    ApiError::invalid(format!(
        "Invalid page token `{token}`; pass the next_page_token of a previous answer"
    ))
}

/// A page of search results in MLflow's form. `found` holds up to
/// `limit + 1` items; the extra one only says that another page exists.
pub fn page<T>(
    mut found: Vec<T>,
    limit: u64,
    offset: u64,
    field: &str,
    to_json: impl Fn(&T) -> Value,
) -> Value {
    let mut out = json!({});
    if found.len() as u64 > limit {
        found.truncate(limit as usize);
        out["next_page_token"] = json!(page_token(offset + limit));
    }
    if !found.is_empty() {
        out[field] = Value::Array(found.iter().map(to_json).collect());
    }
    out
}

/// `max_results` with MLflow's default and bounds.
pub fn max_results(value: Option<i64>, default: i64, limit: i64) -> Result<u64, ApiError> {
    let n = value.unwrap_or(default);
    if n <= 0 {
        return Err(ApiError::invalid(format!(
            "Invalid value {n} for parameter 'max_results' supplied. It must be a positive integer"
        )));
    }
    if n > limit {
        return Err(ApiError::invalid(format!(
            "Invalid value {n} for parameter 'max_results' supplied. It must be at most {limit}"
        )));
    }
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_match_mlflow() {
        assert_eq!(page_token(1000), "eyJvZmZzZXQiOiAxMDAwfQ==");
        assert_eq!(
            parse_page_token(Some("eyJvZmZzZXQiOiAxMDAwfQ==")).unwrap(),
            1000
        );
        assert_eq!(parse_page_token(None).unwrap(), 0);
        assert!(parse_page_token(Some("garbage!")).is_err());
    }

    #[test]
    fn doubles_keep_non_finite_values() {
        assert_eq!(double(f64::NAN), json!("NaN"));
        assert_eq!(double(f64::NEG_INFINITY), json!("-Infinity"));
        assert_eq!(double(0.5), json!(0.5));
        #[derive(Deserialize)]
        struct V {
            #[serde(default, deserialize_with = "opt_f64")]
            v: Option<f64>,
            #[serde(default, deserialize_with = "opt_i64")]
            t: Option<i64>,
        }
        let v: V = serde_json::from_value(json!({"v": "Infinity", "t": "17"})).unwrap();
        assert_eq!((v.v, v.t), (Some(f64::INFINITY), Some(17)));
        let v: V = serde_json::from_value(json!({"v": 2, "t": 3.0})).unwrap();
        assert_eq!((v.v, v.t), (Some(2.0), Some(3)));
        assert!(serde_json::from_value::<V>(json!({"t": 1.5})).is_err());
        assert!(serde_json::from_value::<V>(json!({"v": "abc"})).is_err());
    }
}
