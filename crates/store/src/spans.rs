//! The spans of traces as `search_traces` filters them. The client keeps a
//! trace's spans in its `traces.json` artifact; when that file is written
//! (or, for traces kept before, at start) the server reads it once and
//! keeps here what a filter needs: each span's name, type, status,
//! attributes and JSON. Bounded: a trace's first [`MAX_SPANS`] spans,
//! [`MAX_ATTRIBUTES`] attributes among them, each cut to its bound; what
//! lies past them is not found by a filter (the file itself is kept whole).

use sea_orm::ConnectionTrait;
use serde_json::Value;

use crate::tracking::get;
use crate::{Store, StoreError, now_millis};

/// Most spans of one trace kept for search.
pub const MAX_SPANS: usize = 5_000;
/// Most attributes of one trace's spans kept for search, all spans together.
pub const MAX_ATTRIBUTES: usize = 20_000;
/// Longest attribute value kept, in characters; longer ones are cut (their
/// whole text is still in the span's content).
pub const MAX_ATTRIBUTE_CHARS: usize = 8_192;
/// Longest span content (its JSON) kept, in characters.
pub const MAX_CONTENT_CHARS: usize = 1 << 20;
const MAX_NAME_CHARS: usize = 1_000;
const MAX_KEY_CHARS: usize = 250;
const MAX_ID_CHARS: usize = 128;
const MAX_TYPE_CHARS: usize = 250;

/// A span as search keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchSpan {
    pub span_id: String,
    pub name: String,
    /// LLM, CHAIN… (`mlflow.spanType`); empty when untyped.
    pub span_type: String,
    /// OK, ERROR or UNSET.
    pub status: String,
    /// The span's JSON as the file has it.
    pub content: String,
    /// Each attribute's value as text: a JSON string's own text, anything
    /// else as JSON (`0.7`, `["a"]`).
    pub attributes: Vec<(String, String)>,
}

/// What of a `traces.json` search keeps, and whether some was left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchSpans {
    pub spans: Vec<SearchSpan>,
    pub cut: bool,
}

/// The text of an attribute's value. MLflow writes each value as JSON
/// text (`"\"LLM\""`, `"0.7"`); a JSON string reads as its own text.
pub fn attribute_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::String(inner)) => inner,
            _ => text.clone(),
        },
        other => other.to_string(),
    }
}

/// A span's status code as MLflow names it: OK, ERROR or UNSET.
pub fn span_status(span: &Value) -> String {
    let code = match span.get("status") {
        Some(Value::Object(status)) => status.get("code"),
        other => other,
    };
    let code = match code {
        Some(Value::String(code)) => code.trim_start_matches("STATUS_CODE_").to_owned(),
        _ => String::new(),
    };
    if code.is_empty() {
        "UNSET".to_owned()
    } else {
        code
    }
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

/// What search keeps of a `traces.json` (`{"spans": [...]}`): spans without
/// an id, or with one seen before, are left out.
pub fn search_spans(json: &Value) -> SearchSpans {
    let mut out = SearchSpans::default();
    let Some(spans) = json.get("spans").and_then(Value::as_array) else {
        return out;
    };
    let mut seen = std::collections::HashSet::new();
    let mut attributes_left = MAX_ATTRIBUTES;
    for span in spans {
        if out.spans.len() == MAX_SPANS {
            out.cut = true;
            break;
        }
        let span_id = match span.get("span_id") {
            Some(Value::String(id)) => id.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => continue,
        };
        if span_id.is_empty()
            || span_id.chars().count() > MAX_ID_CHARS
            || !seen.insert(span_id.clone())
        {
            continue;
        }
        let mut attributes = Vec::new();
        let mut span_type = String::new();
        if let Some(Value::Object(all)) = span.get("attributes") {
            for (key, value) in all {
                if key == "mlflow.spanType" {
                    span_type = cut(&attribute_text(value), MAX_TYPE_CHARS);
                }
                if key.is_empty() || key.chars().count() > MAX_KEY_CHARS {
                    continue;
                }
                if attributes_left == 0 {
                    out.cut = true;
                    break;
                }
                attributes_left -= 1;
                attributes.push((
                    key.clone(),
                    cut(&attribute_text(value), MAX_ATTRIBUTE_CHARS),
                ));
            }
        }
        let whole = span.to_string();
        let content = cut(&whole, MAX_CONTENT_CHARS);
        out.cut |= content.len() < whole.len();
        out.spans.push(SearchSpan {
            span_id,
            name: cut(
                span.get("name").and_then(Value::as_str).unwrap_or_default(),
                MAX_NAME_CHARS,
            ),
            span_type,
            status: cut(&span_status(span), 32),
            content,
            attributes,
        });
    }
    out
}

/// Rows one INSERT carries.
const ROWS_PER_INSERT: usize = 200;

impl Store {
    /// Keeps `spans` as the trace's spans for search, in place of any kept
    /// before, and notes that the trace's spans were read; with `if_unread`,
    /// only if they never were (what a file written meanwhile gave stands).
    /// A trace that is gone is not an error: it was deleted while its file
    /// was read. Ok is whether the spans were kept.
    pub async fn index_trace_spans(
        &self,
        trace_id: &str,
        spans: &[SearchSpan],
        if_unread: bool,
    ) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut sql = self.sql();
        sql.push("UPDATE traces SET spans_indexed = ")
            .bind(now_millis())
            .push(" WHERE id = ")
            .bind(trace_id.to_owned());
        if if_unread {
            sql.push(" AND spans_indexed IS NULL");
        }
        if txn.execute_raw(sql.build()).await?.rows_affected() == 0 {
            return Ok(false);
        }
        for table in ["trace_span_attributes", "trace_spans"] {
            let mut sql = self.sql();
            sql.push(&format!("DELETE FROM {table} WHERE trace_id = "))
                .bind(trace_id.to_owned());
            txn.execute_raw(sql.build()).await?;
        }
        self.insert_spans(&txn, trace_id, spans).await?;
        txn.commit().await?;
        Ok(true)
    }

    /// Keeps more spans of a trace for search (sent over OTLP, a batch at a
    /// time), in the trace's turn: a span kept before under the same id is
    /// replaced, and the trace's bounds ([`MAX_SPANS`], [`MAX_ATTRIBUTES`])
    /// hold, spans past them left out. Ok is whether some were.
    pub(crate) async fn add_spans_in(
        &self,
        txn: &sea_orm::DatabaseTransaction,
        trace_id: &str,
        spans: &[SearchSpan],
    ) -> Result<bool, StoreError> {
        let mut sql = self.sql();
        sql.push("UPDATE traces SET spans_indexed = ")
            .bind(now_millis())
            .push(" WHERE id = ")
            .bind(trace_id.to_owned());
        txn.execute_raw(sql.build()).await?;
        let ids: Vec<String> = spans.iter().map(|s| s.span_id.clone()).collect();
        for chunk in ids.chunks(ROWS_PER_INSERT) {
            for table in ["trace_span_attributes", "trace_spans"] {
                let mut sql = self.sql();
                sql.push(&format!("DELETE FROM {table} WHERE trace_id = "))
                    .bind(trace_id.to_owned())
                    .push(" AND span_id IN ")
                    .bind_list(chunk.iter().cloned());
                txn.execute_raw(sql.build()).await?;
            }
        }
        let mut held = Vec::with_capacity(2);
        for table in ["trace_spans", "trace_span_attributes"] {
            let mut sql = self.sql();
            sql.push(&format!(
                "SELECT COUNT(*) AS n FROM {table} WHERE trace_id = "
            ))
            .bind(trace_id.to_owned());
            let n: i64 = match txn.query_one_raw(sql.build()).await? {
                Some(row) => get(&row, "n")?,
                None => 0,
            };
            held.push(usize::try_from(n).unwrap_or(usize::MAX));
        }
        let (mut spans_left, mut attributes_left) = (
            MAX_SPANS.saturating_sub(held[0]),
            MAX_ATTRIBUTES.saturating_sub(held[1]),
        );
        let mut kept = Vec::with_capacity(spans.len());
        for span in spans {
            if spans_left == 0 || span.attributes.len() > attributes_left {
                break;
            }
            spans_left -= 1;
            attributes_left -= span.attributes.len();
            kept.push(span.clone());
        }
        let cut = kept.len() < spans.len();
        self.insert_spans(txn, trace_id, &kept).await?;
        Ok(cut)
    }

    async fn insert_spans(
        &self,
        txn: &sea_orm::DatabaseTransaction,
        trace_id: &str,
        spans: &[SearchSpan],
    ) -> Result<(), StoreError> {
        for chunk in spans.chunks(ROWS_PER_INSERT) {
            let mut sql = self.sql();
            sql.push(
                "INSERT INTO trace_spans (trace_id, span_id, name, span_type, status, content) VALUES ",
            );
            for (i, span) in chunk.iter().enumerate() {
                sql.push(if i == 0 { "(" } else { ", (" })
                    .bind(trace_id.to_owned())
                    .push(", ")
                    .bind(span.span_id.clone())
                    .push(", ")
                    .bind(span.name.clone())
                    .push(", ")
                    .bind(span.span_type.clone())
                    .push(", ")
                    .bind(span.status.clone())
                    .push(", ")
                    .bind(span.content.clone())
                    .push(")");
            }
            txn.execute_raw(sql.build()).await?;
        }
        let attributes: Vec<(&str, &str, &str)> = spans
            .iter()
            .flat_map(|s| {
                s.attributes
                    .iter()
                    .map(|(k, v)| (s.span_id.as_str(), k.as_str(), v.as_str()))
            })
            .collect();
        for chunk in attributes.chunks(ROWS_PER_INSERT) {
            let mut sql = self.sql();
            sql.push("INSERT INTO trace_span_attributes (trace_id, span_id, key, value) VALUES ");
            for (i, (span_id, key, value)) in chunk.iter().enumerate() {
                sql.push(if i == 0 { "(" } else { ", (" })
                    .bind(trace_id.to_owned())
                    .push(", ")
                    .bind(span_id.to_string())
                    .push(", ")
                    .bind(key.to_string())
                    .push(", ")
                    .bind(value.to_string())
                    .push(")");
            }
            txn.execute_raw(sql.build()).await?;
        }
        Ok(())
    }

    /// Traces whose spans were never read for search (kept before search
    /// read them), after `after` in id order: (id, experiment id).
    pub async fn traces_with_unread_spans(
        &self,
        after: &str,
        limit: u64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT id, experiment_id FROM traces WHERE spans_indexed IS NULL AND id > ")
            .bind(after.to_owned())
            .push(" ORDER BY id LIMIT ")
            .bind(limit.min(i64::MAX as u64) as i64);
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| Ok((get(row, "id")?, get(row, "experiment_id")?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_client_file_is_read_within_bounds() {
        let span = |id: Value| {
            json!({
                "name": "answer",
                "span_id": id,
                "status": {"code": "STATUS_CODE_ERROR"},
                "attributes": {
                    "mlflow.spanType": "\"LLM\"",
                    "model": "\"gpt-4\"",
                    "temperature": "0.7",
                    "docs": "[\"a\", \"b\"]",
                    "raw": 3,
                    "broken": "not json",
                },
            })
        };
        let read = search_spans(
            &json!({"spans": [span(json!("a")), span(json!("a")), span(json!("")), span(Value::Null)]}),
        );
        assert_eq!(
            read.spans.len(),
            1,
            "a repeated, empty or missing id is left out"
        );
        let first = &read.spans[0];
        assert_eq!(
            (first.span_type.as_str(), first.status.as_str()),
            ("LLM", "ERROR")
        );
        let value = |k: &str| {
            first
                .attributes
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(value("model"), Some("gpt-4"));
        assert_eq!(value("temperature"), Some("0.7"));
        assert_eq!(value("docs"), Some("[\"a\", \"b\"]"));
        assert_eq!(value("raw"), Some("3"));
        assert_eq!(value("broken"), Some("not json"));
        assert!(first.content.contains("gpt-4"));
        assert!(!read.cut);
        // No status reads as UNSET; not a file of spans reads as none.
        assert_eq!(span_status(&json!({})), "UNSET");
        assert_eq!(search_spans(&json!([1, 2])), SearchSpans::default());

        // Past the bounds: the first spans and attributes, and a mark.
        let many: Vec<Value> = (0..MAX_SPANS + 1)
            .map(|i| span(json!(i.to_string())))
            .collect();
        let read = search_spans(&json!({ "spans": many }));
        assert!(read.cut);
        assert_eq!(read.spans.len(), MAX_SPANS);
        let kept: usize = read.spans.iter().map(|s| s.attributes.len()).sum();
        assert_eq!(kept, MAX_ATTRIBUTES);
        let long = "x".repeat(MAX_ATTRIBUTE_CHARS + 10);
        let read =
            search_spans(&json!({"spans": [{"span_id": "l", "attributes": {"long": long}}]}));
        assert_eq!(
            read.spans[0].attributes[0].1.chars().count(),
            MAX_ATTRIBUTE_CHARS
        );
    }
}
