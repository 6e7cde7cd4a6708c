//! MLflow's input rules for names, values and batches, with its messages.
//! Over-long values are refused with a clear error, never silently cut.

use super::ApiError;

pub const MAX_KEY_LEN: usize = trainyard_domain::MAX_KEY_LEN;
/// Longest param and tag values, in characters. MLflow 3.17 cuts params at
/// 6,000 and tags at 8,000 without a word (its client too, by default); a
/// value that long is kept whole here, so that neither a script that runs
/// there fails nor its data is cut. A full batch (100 of each) still fits
/// the 4 MiB body when values are plain ASCII.
pub const MAX_PARAM_VALUE_LEN: usize = 65_536;
pub const MAX_TAG_VALUE_LEN: usize = 65_536;
pub const MAX_EXPERIMENT_TAG_VALUE_LEN: usize = 20000;
pub const MAX_METRICS_PER_BATCH: usize = 1000;
pub const MAX_PARAMS_TAGS_PER_BATCH: usize = 100;
pub const MAX_ENTITIES_PER_BATCH: usize = 1000;

/// A metric, param or tag key: MLflow's characters, no path tricks, ≤ 250.
pub fn key(name: &str, what: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(ApiError::invalid(format!(
            "Missing value for required parameter '{what}'."
        )));
    }
    let allowed = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ' | ':' | '/');
    if !name.chars().all(allowed) {
        return Err(ApiError::invalid(format!(
            "Invalid value \"{name}\" for parameter '{what}' supplied: Names may only contain alphanumerics, underscores (_), dashes (-), periods (.), spaces ( ), colon(:) and slashes (/)."
        )));
    }
    let normalized = normalize(name);
    if normalized != name || name == "." || name.starts_with("..") || name.starts_with('/') {
        return Err(ApiError::invalid(format!(
            "Invalid value \"{name}\" for parameter '{what}' supplied: Names may be treated as files in certain cases, and must not resolve to other names when treated as such. This name would resolve to '{normalized}'"
        )));
    }
    let len = name.chars().count();
    if len > MAX_KEY_LEN {
        return Err(ApiError::invalid(format!(
            "'{what}' exceeds the maximum length of {MAX_KEY_LEN} characters (it has {len})"
        )));
    }
    Ok(())
}

/// posixpath.normpath, for the names MLflow's rule compares with.
fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            ".." if absolute => {}
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

pub fn value(value: &str, limit: usize, what: &str, key: &str) -> Result<(), ApiError> {
    let len = value.chars().count();
    if len > limit {
        return Err(ApiError::invalid(format!(
            "{what} '{key}' has a value of {len} characters, longer than the limit of {limit}; shorten it"
        )));
    }
    Ok(())
}

pub fn batch_limits(metrics: usize, params: usize, tags: usize) -> Result<(), ApiError> {
    let over = |n: usize, limit: usize, what: &str| {
        ApiError::invalid(format!(
            "A batch logging request can contain at most {limit} {what}. Got {n} {what}. Please split up {what} across multiple requests and try again."
        ))
    };
    if metrics > MAX_METRICS_PER_BATCH {
        return Err(over(metrics, MAX_METRICS_PER_BATCH, "metrics"));
    }
    if params > MAX_PARAMS_TAGS_PER_BATCH {
        return Err(over(params, MAX_PARAMS_TAGS_PER_BATCH, "params"));
    }
    if tags > MAX_PARAMS_TAGS_PER_BATCH {
        return Err(over(tags, MAX_PARAMS_TAGS_PER_BATCH, "tags"));
    }
    let total = metrics + params + tags;
    if total > MAX_ENTITIES_PER_BATCH {
        return Err(over(
            total,
            MAX_ENTITIES_PER_BATCH,
            "metrics, params, and tags",
        ));
    }
    Ok(())
}

/// PostgreSQL keeps no NUL character in text.
pub fn no_nul(text: &str, field: &str) -> Result<(), ApiError> {
    if text.contains('\0') {
        return Err(ApiError::invalid(format!(
            "'{field}' holds a NUL character, which cannot be stored; remove it"
        )));
    }
    Ok(())
}

pub fn run_id(id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 256
        && id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!("Invalid run ID: '{id}'")))
    }
}

/// A value as an error message shows it: its first 100 characters.
pub(super) fn shown(text: &str) -> String {
    if text.chars().count() <= 100 {
        text.to_owned()
    } else {
        text.chars().take(100).chain(['…']).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_mlflow() {
        for good in ["loss", "val/acc", "a b", "lr:0", "système", "x.y-z_1"] {
            assert!(key(good, "key").is_ok(), "{good}");
        }
        for bad in [
            "a//b", "a/", "./a", "/a", "../a", "a/./b", "a\\b", "a#b", ".",
        ] {
            assert!(key(bad, "key").is_err(), "{bad}");
        }
        assert!(
            key(&"k".repeat(251), "key")
                .unwrap_err()
                .message
                .contains("250")
        );
        assert!(key("", "key").is_err());
    }

    #[test]
    fn batches_are_bounded() {
        assert!(batch_limits(1000, 0, 0).is_ok());
        assert!(
            batch_limits(1001, 0, 0)
                .unwrap_err()
                .message
                .contains("at most 1000 metrics")
        );
        assert!(batch_limits(0, 101, 0).is_err());
        assert!(
            batch_limits(900, 100, 1)
                .unwrap_err()
                .message
                .contains("metrics, params, and tags")
        );
    }
}
