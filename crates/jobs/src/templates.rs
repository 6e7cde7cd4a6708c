//! Templates shipped as files: `<templates_dir>/<slug>/template.yaml`, with
//! the files its command uses beside it, copied into each job's folder.

use std::path::Path;

use trainyard_domain::template::TemplateSpec;

pub const TEMPLATE_FILE: &str = "template.yaml";
const MAX_TEMPLATE_BYTES: u64 = 256 * 1024;

/// A slug names a folder and appears in URLs: `a-z`, `0-9` and `-`.
pub fn valid_slug(slug: &str) -> bool {
    (1..=100).contains(&slug.len())
        && !slug.starts_with('-')
        && slug
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Reads every template in `dir`, in slug order. A folder that is missing
/// gives an empty catalog; a template that is not valid stops the start,
/// naming its file and field.
pub fn load_dir(dir: &Path) -> Result<Vec<(String, TemplateSpec)>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("templates_dir: cannot read {}: {e}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("templates_dir {}: {e}", dir.display()))?;
        let path = entry.path().join(TEMPLATE_FILE);
        if !path.is_file() {
            continue;
        }
        let slug = entry.file_name().to_string_lossy().into_owned();
        if !valid_slug(&slug) {
            return Err(format!(
                "{}: the folder name `{slug}` is not a template name; use a-z, 0-9 and -",
                path.display()
            ));
        }
        let size = path.metadata().map(|m| m.len()).unwrap_or(0);
        if size > MAX_TEMPLATE_BYTES {
            return Err(format!(
                "{}: larger than {MAX_TEMPLATE_BYTES} bytes",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        let value: serde_json::Value = serde_saphyr::from_str(&text)
            .map_err(|e| format!("{}: not valid YAML: {e}", path.display()))?;
        let spec: TemplateSpec = serde_path_to_error::deserialize(value).map_err(|e| {
            let words = trainyard_domain::serde_in_words(&e.inner().to_string());
            format!("{}: {}: {words}", path.display(), e.path())
        })?;
        spec.check().map_err(|errors| {
            let list: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect();
            format!("{}: {}", path.display(), list.join("; "))
        })?;
        out.push((slug, spec));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Copies a template's files into a job's folder: all but its
/// `template.yaml`. Links are skipped: a template cannot reach outside its
/// folder.
pub fn copy_template_files(from: &Path, to: &Path) -> std::io::Result<()> {
    copy(from, to, Some(TEMPLATE_FILE))
}

/// Copies a folder's files and folders (links skipped) into another.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    copy(from, to, None)
}

fn copy(from: &Path, to: &Path, skip: Option<&str>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let name = entry.file_name();
        if skip.is_some_and(|s| name == s) {
            continue;
        }
        let target = to.join(&name);
        if kind.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy(&entry.path(), &target, None)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_templates_are_valid() {
        // From cargo as it runs the test: a binary from a shared build
        // cache may have been built in another checkout.
        let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
            || env!("CARGO_MANIFEST_DIR").into(),
            std::path::PathBuf::from,
        );
        let dir = crate_dir.join("../../templates");
        let templates = load_dir(&dir).unwrap();
        let slugs: Vec<&str> = templates.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            slugs,
            ["byo-script", "cpu-demo", "pytorch-image-classifier"]
        );
    }

    #[test]
    fn a_broken_template_names_its_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bad")).unwrap();
        std::fs::write(
            dir.path().join("bad").join(TEMPLATE_FILE),
            "title: Bad\ndescription: x\ncommand: run\nparameters:\n  lr:\n    type: float\n    default: 5\n    max: 1\n",
        )
        .unwrap();
        let err = load_dir(dir.path()).unwrap_err();
        assert!(err.contains("bad/template.yaml"), "{err}");
        assert!(
            err.contains("parameters.lr.default: is 5; the largest allowed is 1"),
            "{err}"
        );
        std::fs::write(
            dir.path().join("bad").join(TEMPLATE_FILE),
            "title: Bad\ndescription: x\ncommand: run\nresources:\n  gpu: 1\n",
        )
        .unwrap();
        let err = load_dir(dir.path()).unwrap_err();
        assert!(err.contains("resources"), "{err}");
        assert!(err.contains("`gpu` is not a field here"), "{err}");
    }

    #[test]
    fn slugs_are_plain() {
        assert!(valid_slug("cpu-demo"));
        assert!(!valid_slug("../etc"));
        assert!(!valid_slug("-x"));
        assert!(!valid_slug("CPU"));
    }
}
