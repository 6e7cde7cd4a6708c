//! MLflow 3's assessments of traces under `/api/3.0/mlflow/traces/{id}/
//! assessments`: `mlflow.log_feedback`, `mlflow.log_expectation`,
//! `mlflow.override_feedback`, `mlflow.update_assessment`,
//! `mlflow.delete_assessment`, and the scorers' verdicts that
//! `mlflow.genai.evaluate` records on each trace.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use trainyard_domain::tracking::Assessment;
use trainyard_store::Access;
use trainyard_store::assessments::{AssessmentChange, NewAssessment};

use super::request::Req;
use super::traces::{format_time, pairs_of};
use super::validate::no_nul;
use super::wire::required;
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::Caller;

/// Largest feedback or expectation object (its value), in bytes of JSON.
const MAX_VALUE_BYTES: usize = 256 << 10;
/// Longest rationale, in characters.
const MAX_RATIONALE_CHARS: usize = 100_000;
/// Most metadata entries one assessment carries.
const MAX_METADATA: usize = 100;
const SOURCE_TYPES: [&str; 4] = ["SOURCE_TYPE_UNSPECIFIED", "HUMAN", "LLM_JUDGE", "CODE"];

/// An assessment in MLflow's JSON (`mlflow.assessments.Assessment`).
pub fn assessment_json(a: &Assessment) -> Value {
    let mut out = json!({
        "assessment_id": a.assessment_id,
        "assessment_name": a.name,
        "trace_id": a.trace_id,
        "source": { "source_type": a.source_type, "source_id": a.source_id },
        "create_time": format_time(a.create_time),
        "last_update_time": format_time(a.last_update_time),
        "valid": a.valid,
    });
    let body: Value = serde_json::from_str(&a.body).unwrap_or_else(|_| json!({}));
    out[a.kind.as_str()] = body;
    if let Some(span) = &a.span_id {
        out["span_id"] = json!(span);
    }
    if let Some(rationale) = &a.rationale {
        out["rationale"] = json!(rationale);
    }
    if !a.metadata.is_empty() {
        out["metadata"] = a
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<_, _>>()
            .into();
    }
    if let Some(overrides) = &a.overrides {
        out["overrides"] = json!(overrides);
    }
    out
}

#[derive(Deserialize)]
pub struct Source {
    source_type: Option<Value>,
    source_id: Option<String>,
}

#[derive(Deserialize)]
pub struct Body {
    assessment_id: Option<String>,
    assessment_name: Option<String>,
    span_id: Option<String>,
    source: Option<Source>,
    create_time: Option<String>,
    feedback: Option<Value>,
    expectation: Option<Value>,
    issue: Option<Value>,
    rationale: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    overrides: Option<String>,
    valid: Option<bool>,
}

#[derive(Deserialize)]
pub struct Create {
    assessment: Option<Body>,
}

#[derive(Deserialize)]
pub struct Update {
    assessment: Option<Body>,
    update_mask: Option<Value>,
}

/// An id of ours or a client's: letters, digits, - and _, at most 64.
fn id(text: &str, what: &str) -> Result<(), ApiError> {
    let ok = !text.is_empty()
        && text.len() <= 64
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "Invalid {what} `{text}`: letters, digits, - and _, at most 64"
        )))
    }
}

fn name(text: Option<String>) -> Result<String, ApiError> {
    let name = required(
        text.filter(|n| !n.trim().is_empty()),
        "assessment.assessment_name",
    )?;
    if name.chars().count() > 250 {
        return Err(ApiError::invalid(
            "'assessment.assessment_name' is longer than 250 characters",
        ));
    }
    no_nul(&name, "assessment.assessment_name")?;
    Ok(name)
}

/// The feedback's or expectation's object, checked: a JSON object of at
/// most [`MAX_VALUE_BYTES`].
fn value_object(kind: &str, value: Value) -> Result<String, ApiError> {
    if !value.is_object() {
        return Err(ApiError::invalid(format!(
            "'assessment.{kind}' must be an object, e.g. {{\"value\": true}}"
        )));
    }
    let text = value.to_string();
    if text.len() > MAX_VALUE_BYTES {
        return Err(ApiError::invalid(format!(
            "'assessment.{kind}' is {} bytes of JSON; at most {} (keep a larger value in an artifact)",
            text.len(),
            MAX_VALUE_BYTES
        )));
    }
    Ok(text)
}

/// Which of feedback and expectation the body holds, and its object.
fn kind_and_body(body: &mut Body) -> Result<Option<(String, String)>, ApiError> {
    if body.issue.is_some() {
        return Err(ApiError::invalid(
            "Issue assessments are not supported by this server; log feedback or an expectation",
        ));
    }
    match (body.feedback.take(), body.expectation.take()) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "An assessment is feedback or an expectation, not both",
        )),
        (Some(f), None) => Ok(Some(("feedback".to_owned(), value_object("feedback", f)?))),
        (None, Some(e)) => Ok(Some((
            "expectation".to_owned(),
            value_object("expectation", e)?,
        ))),
        (None, None) => Ok(None),
    }
}

fn rationale(text: Option<String>) -> Result<Option<String>, ApiError> {
    match text {
        Some(r) if r.chars().count() > MAX_RATIONALE_CHARS => Err(ApiError::invalid(format!(
            "'assessment.rationale' is longer than {MAX_RATIONALE_CHARS} characters"
        ))),
        Some(r) if r.contains('\0') => no_nul(&r, "assessment.rationale").map(|_| None),
        other => Ok(other.filter(|r| !r.is_empty())),
    }
}

fn metadata(map: BTreeMap<String, String>) -> Result<Vec<(String, String)>, ApiError> {
    pairs_of(map, "An assessment", "metadata entries", MAX_METADATA)
}

fn source(source: Option<Source>) -> Result<(String, String), ApiError> {
    let Some(source) = source else {
        return Ok((SOURCE_TYPES[0].to_owned(), String::new()));
    };
    let kind = match source.source_type {
        None | Some(Value::Null) => SOURCE_TYPES[0].to_owned(),
        Some(Value::String(s)) if SOURCE_TYPES.contains(&s.as_str()) => s,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n < 4) => {
            SOURCE_TYPES[n.as_u64().unwrap_or(0) as usize].to_owned()
        }
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Invalid 'assessment.source.source_type' {other}: use HUMAN, LLM_JUDGE or CODE"
            )));
        }
    };
    let id = source.source_id.unwrap_or_default();
    if id.chars().count() > 250 {
        return Err(ApiError::invalid(
            "'assessment.source.source_id' is longer than 250 characters",
        ));
    }
    no_nul(&id, "assessment.source.source_id")?;
    Ok((kind, id))
}

/// `POST /api/3.0/mlflow/traces/{trace_id}/assessments`.
pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(trace_id): Path<String>,
    Req(req): Req<Create>,
) -> ApiResult {
    let mut body = required(req.assessment, "assessment")?;
    let name = name(body.assessment_name.take())?;
    let (kind, value) = required(
        kind_and_body(&mut body)?,
        "assessment.feedback or assessment.expectation",
    )?;
    let (source_type, source_id) = source(body.source.take())?;
    if let Some(a) = &body.assessment_id {
        id(a, "assessment_id")?;
    }
    if let Some(span) = &body.span_id {
        id(span, "span_id")?;
    }
    if let Some(o) = &body.overrides {
        id(o, "overrides")?;
    }
    let create_time = body
        .create_time
        .as_deref()
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t.trim())
                .map(|t| t.timestamp_millis())
                .map_err(|_| {
                    ApiError::invalid(format!(
                        "Invalid 'assessment.create_time' `{t}`: use RFC 3339, e.g. 2026-12-05T10:00:00.000Z"
                    ))
                })
        })
        .transpose()?;
    state
        .store
        .trace_as(&principal.user, &trace_id, Access::Change)
        .await?;
    super::traces::job_may_write(&state, &principal, &trace_id).await?;
    let saved = state
        .store
        .create_assessment(NewAssessment {
            assessment_id: body.assessment_id.filter(|a| !a.is_empty()),
            trace_id,
            name,
            kind,
            body: value,
            source_type,
            source_id,
            span_id: body.span_id.filter(|s| !s.is_empty()),
            rationale: rationale(body.rationale)?,
            metadata: metadata(body.metadata)?,
            overrides: body.overrides.filter(|o| !o.is_empty()),
            create_time,
        })
        .await?;
    Ok(Json(json!({ "assessment": assessment_json(&saved) })))
}

/// `GET /api/3.0/mlflow/traces/{trace_id}/assessments/{assessment_id}`.
pub async fn get(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path((trace_id, assessment_id)): Path<(String, String)>,
) -> ApiResult {
    state
        .store
        .trace_as(&principal.user, &trace_id, Access::Read)
        .await?;
    let found = state
        .store
        .get_assessment(&trace_id, &assessment_id)
        .await?;
    Ok(Json(json!({ "assessment": assessment_json(&found) })))
}

/// The paths of a protobuf field mask: JSON's `"a,bC"` (lowerCamelCase) or
/// `{"paths": ["a", "b_c"]}`, in snake_case.
fn mask_paths(mask: &Value) -> Result<Vec<String>, ApiError> {
    let paths: Vec<String> = match mask {
        Value::String(s) => s.split(',').map(str::to_owned).collect(),
        Value::Object(o) => match o.get("paths") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let snake = |p: &str| {
        let mut out = String::new();
        for c in p.trim().chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    };
    let paths: Vec<String> = paths
        .iter()
        .map(|p| snake(p))
        .filter(|p| !p.is_empty())
        .collect();
    if paths.is_empty() {
        return Err(ApiError::invalid(
            "'update_mask' names no field: give the fields to change, e.g. \"feedback,rationale\"",
        ));
    }
    Ok(paths)
}

/// `PATCH /api/3.0/mlflow/traces/{trace_id}/assessments/{assessment_id}`:
/// the fields its update mask names (name, feedback or expectation,
/// rationale, metadata merged, valid).
pub async fn update(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path((trace_id, assessment_id)): Path<(String, String)>,
    Req(req): Req<Update>,
) -> ApiResult {
    let mut body = required(req.assessment, "assessment")?;
    let paths = mask_paths(&required(req.update_mask, "update_mask")?)?;
    let mut change = AssessmentChange::default();
    for path in &paths {
        match path.as_str() {
            "assessment_name" => change.name = Some(name(body.assessment_name.take())?),
            "feedback" | "expectation" => {
                let given = kind_and_body(&mut body)?;
                match given {
                    Some((kind, value)) if kind == *path => change.body = Some((kind, value)),
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "'update_mask' names {path}, but the assessment given has no {path}"
                        )));
                    }
                }
            }
            // Given empty or left out, the rationale goes.
            "rationale" => {
                change.rationale = Some(rationale(body.rationale.take())?.unwrap_or_default())
            }
            "metadata" => change.metadata = Some(metadata(std::mem::take(&mut body.metadata))?),
            "valid" => change.valid = Some(body.valid.unwrap_or(true)),
            other => {
                return Err(ApiError::invalid(format!(
                    "'update_mask' names `{other}`, which cannot be changed: use assessment_name, feedback, expectation, rationale, metadata or valid"
                )));
            }
        }
    }
    state
        .store
        .trace_as(&principal.user, &trace_id, Access::Change)
        .await?;
    // The gate keeps jobs' tokens from here; this holds if it ever does not.
    super::traces::job_may_write(&state, &principal, &trace_id).await?;
    let saved = state
        .store
        .update_assessment(&trace_id, &assessment_id, change)
        .await?;
    Ok(Json(json!({ "assessment": assessment_json(&saved) })))
}

/// `DELETE /api/3.0/mlflow/traces/{trace_id}/assessments/{assessment_id}`.
pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path((trace_id, assessment_id)): Path<(String, String)>,
) -> ApiResult {
    state
        .store
        .trace_as(&principal.user, &trace_id, Access::Change)
        .await?;
    super::traces::job_may_write(&state, &principal, &trace_id).await?;
    state
        .store
        .delete_assessment(&trace_id, &assessment_id)
        .await?;
    Ok(Json(json!({})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_masks_come_as_protobuf_json_writes_them() {
        assert_eq!(
            mask_paths(&json!("assessmentName,feedback")).unwrap(),
            ["assessment_name", "feedback"]
        );
        assert_eq!(
            mask_paths(&json!({"paths": ["rationale", "metadata"]})).unwrap(),
            ["rationale", "metadata"]
        );
        assert!(mask_paths(&json!("")).is_err());
        assert!(mask_paths(&json!(3)).is_err());
    }

    #[test]
    fn sources_are_mlflows_enum_by_name_or_number() {
        let given = |t: Value| {
            source(Some(Source {
                source_type: Some(t),
                source_id: Some("ana".into()),
            }))
        };
        assert_eq!(given(json!("HUMAN")).unwrap().0, "HUMAN");
        assert_eq!(given(json!(2)).unwrap().0, "LLM_JUDGE");
        assert!(given(json!("ROBOT")).is_err());
        assert!(given(json!(7)).is_err());
        assert_eq!(source(None).unwrap().0, "SOURCE_TYPE_UNSPECIFIED");
    }
}
