//! Templates: the catalog's ready-made jobs. A template fixes the command,
//! image and default resources, and declares typed parameters with defaults
//! and ranges; a submission picks one and sets some of its parameters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::FieldError;
use crate::job::{ParamValue, ResourceSpec};

pub const MAX_TITLE_LEN: usize = 200;
pub const MAX_DESCRIPTION_LEN: usize = 10_000;
pub const MAX_PARAMETERS: usize = 50;
pub const MAX_REQUIREMENTS: usize = 100;

/// A template as written in `templates/<slug>/template.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateSpec {
    pub title: String,
    pub description: String,
    /// The container image (Kubernetes executor).
    #[serde(default)]
    pub image: Option<String>,
    /// Run in the job's folder, which holds a copy of the template's files;
    /// `{name}` takes a parameter's value.
    pub command: String,
    #[serde(default)]
    pub parameters: BTreeMap<String, ParamSpec>,
    #[serde(default)]
    pub resources: ResourceSpec,
    /// What data it expects, in words.
    #[serde(default)]
    pub data: Option<String>,
    /// Runs the submitter's project archive (the form offers the upload).
    #[serde(default)]
    pub project: bool,
    /// Reads datasets the submitter names (the form offers the field).
    #[serde(default)]
    pub datasets: bool,
    /// Python packages (requirements.txt lines) installed into a virtual
    /// environment before the command runs; cached by their hash.
    #[serde(default)]
    pub requirements: Vec<String>,
    #[serde(default)]
    pub max_runtime: Option<String>,
}

/// One typed parameter of a template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    #[serde(rename = "type")]
    pub kind: ParamType,
    /// Without a default, a submission must set it.
    #[serde(default)]
    pub default: Option<ParamValue>,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    /// The allowed values of a `choice`.
    #[serde(default)]
    pub choices: Vec<String>,
    /// One line for the form.
    #[serde(default)]
    pub help: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    Int,
    Float,
    Bool,
    String,
    Choice,
}

/// One entry of the catalog as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Template {
    pub slug: String,
    /// Shipped with Trainyard (a file), not made by an admin.
    pub builtin: bool,
    pub spec: TemplateSpec,
}

impl ParamSpec {
    /// The value as this parameter's type, or what is wrong with it.
    fn accept(&self, value: &ParamValue) -> Result<ParamValue, String> {
        let value = match (self.kind, value) {
            (ParamType::Int, ParamValue::Int(i)) => ParamValue::Int(*i),
            (ParamType::Int, ParamValue::Float(x)) if x.fract() == 0.0 && x.abs() < 9.0e15 => {
                ParamValue::Int(*x as i64)
            }
            (ParamType::Float, ParamValue::Float(x)) if x.is_finite() => ParamValue::Float(*x),
            (ParamType::Float, ParamValue::Int(i)) => ParamValue::Float(*i as f64),
            (ParamType::Bool, ParamValue::Bool(b)) => ParamValue::Bool(*b),
            (ParamType::String, ParamValue::Text(t)) => ParamValue::Text(t.clone()),
            (ParamType::Choice, ParamValue::Text(t)) if self.choices.contains(t) => {
                ParamValue::Text(t.clone())
            }
            (ParamType::Choice, _) => {
                return Err(format!("must be one of {}", self.choices.join(", ")));
            }
            (kind, _) => {
                let what = match kind {
                    ParamType::Int => "a whole number",
                    ParamType::Float => "a number",
                    ParamType::Bool => "true or false",
                    _ => "text",
                };
                return Err(format!("must be {what}, not `{value}`"));
            }
        };
        let number = match &value {
            ParamValue::Int(i) => Some(*i as f64),
            ParamValue::Float(x) => Some(*x),
            _ => None,
        };
        if let Some(n) = number {
            if let Some(min) = self.min
                && n < min
            {
                return Err(format!("is {n}; the smallest allowed is {min}"));
            }
            if let Some(max) = self.max
                && n > max
            {
                return Err(format!("is {n}; the largest allowed is {max}"));
            }
        }
        Ok(value)
    }
}

impl TemplateSpec {
    /// Checks a template as an admin or a file wrote it.
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut errors = Vec::new();
        let title = self.title.trim();
        if title.is_empty() || title.chars().count() > MAX_TITLE_LEN {
            errors.push(FieldError::new(
                "title",
                format!("must be 1 to {MAX_TITLE_LEN} characters"),
            ));
        }
        if self.description.len() > MAX_DESCRIPTION_LEN {
            errors.push(FieldError::new(
                "description",
                format!("is longer than {MAX_DESCRIPTION_LEN} bytes"),
            ));
        }
        if self.command.trim().is_empty() {
            errors.push(FieldError::new("command", "must not be empty"));
        } else if self.command.len() > crate::job::MAX_COMMAND_LEN {
            errors.push(FieldError::new(
                "command",
                format!(
                    "is {} bytes long; the limit is {}",
                    self.command.len(),
                    crate::job::MAX_COMMAND_LEN
                ),
            ));
        }
        if self.parameters.len() > MAX_PARAMETERS {
            errors.push(FieldError::new(
                "parameters",
                format!("has more than {MAX_PARAMETERS} parameters"),
            ));
        }
        if self.requirements.len() > MAX_REQUIREMENTS {
            errors.push(FieldError::new(
                "requirements",
                format!("has more than {MAX_REQUIREMENTS} lines"),
            ));
        }
        if self.requirements.iter().any(|r| r.contains('\n')) {
            errors.push(FieldError::new(
                "requirements",
                "give one requirement per entry",
            ));
        }
        if let Some((name, _)) = crate::job::placeholders(&self.command)
            .into_iter()
            .find(|(name, _)| !self.parameters.contains_key(*name))
        {
            errors.push(FieldError::new(
                "command",
                format!("`{{{name}}}` names no parameter; add `{name}` under parameters"),
            ));
        }
        for (name, param) in &self.parameters {
            let field = format!("parameters.{name}");
            if !crate::job::valid_param_name(name) {
                errors.push(FieldError::new(
                    &field,
                    "is not a parameter name: use letters, digits and _, not starting with a digit",
                ));
            }
            if param.kind == ParamType::Choice && param.choices.is_empty() {
                errors.push(FieldError::new(&field, "a choice needs its `choices`"));
            }
            if let (Some(min), Some(max)) = (param.min, param.max)
                && min > max
            {
                errors.push(FieldError::new(&field, "min is greater than max"));
            }
            if let Some(default) = &param.default
                && let Err(e) = param.accept(default)
            {
                errors.push(FieldError::new(&format!("{field}.default"), e));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The hyperparameters of a submission: each given one checked against
    /// its parameter, the others at their defaults. Errors name
    /// `hyperparameters.<name>`.
    pub fn resolve(
        &self,
        given: &BTreeMap<String, ParamValue>,
    ) -> Result<BTreeMap<String, ParamValue>, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut out = BTreeMap::new();
        for name in given.keys() {
            if !self.parameters.contains_key(name) {
                let known: Vec<&str> = self.parameters.keys().map(String::as_str).collect();
                errors.push(FieldError::new(
                    &format!("hyperparameters.{name}"),
                    if known.is_empty() {
                        "this template takes no parameters".to_owned()
                    } else {
                        format!(
                            "this template has no such parameter; it has {}",
                            known.join(", ")
                        )
                    },
                ));
            }
        }
        for (name, param) in &self.parameters {
            let field = format!("hyperparameters.{name}");
            match (given.get(name), &param.default) {
                (Some(value), _) => match param.accept(value) {
                    Ok(v) => {
                        out.insert(name.clone(), v);
                    }
                    Err(e) => errors.push(FieldError::new(&field, e)),
                },
                (None, Some(default)) => {
                    out.insert(name.clone(), default.clone());
                }
                (None, None) => errors.push(FieldError::new(
                    &field,
                    "is required by this template and has no default",
                )),
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> TemplateSpec {
        serde_json::from_value(serde_json::json!({
            "title": "Demo",
            "description": "trains a small model",
            "command": "python train.py --lr {lr} --epochs {epochs}",
            "parameters": {
                "lr": {"type": "float", "default": 0.1, "min": 0.0001, "max": 10},
                "epochs": {"type": "int", "default": 20, "min": 1, "max": 1000},
                "optimizer": {"type": "choice", "choices": ["sgd", "adam"], "default": "sgd"},
                "seed": {"type": "int"}
            },
            "resources": {"cpus": 1, "memory": "512Mi"}
        }))
        .unwrap()
    }

    #[test]
    fn given_values_are_checked_and_the_rest_defaulted() {
        let t = template();
        t.check().unwrap();
        let given = BTreeMap::from([
            ("lr".to_owned(), ParamValue::Int(1)),
            ("seed".to_owned(), ParamValue::Float(7.0)),
        ]);
        let resolved = t.resolve(&given).unwrap();
        assert_eq!(resolved["lr"], ParamValue::Float(1.0));
        assert_eq!(resolved["seed"], ParamValue::Int(7));
        assert_eq!(resolved["epochs"], ParamValue::Int(20));
        assert_eq!(resolved["optimizer"], ParamValue::Text("sgd".into()));
    }

    #[test]
    fn wrong_values_name_their_hyperparameter() {
        let t = template();
        let given = BTreeMap::from([
            ("lr".to_owned(), ParamValue::Float(50.0)),
            ("epochs".to_owned(), ParamValue::Float(2.5)),
            ("optimizer".to_owned(), ParamValue::Text("lion".into())),
            ("momentum".to_owned(), ParamValue::Float(0.9)),
        ]);
        let errors = t.resolve(&given).unwrap_err();
        let fields: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.field.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                (
                    "hyperparameters.momentum",
                    "this template has no such parameter; it has epochs, lr, optimizer, seed"
                ),
                (
                    "hyperparameters.epochs",
                    "must be a whole number, not `2.5`"
                ),
                ("hyperparameters.lr", "is 50; the largest allowed is 10"),
                ("hyperparameters.optimizer", "must be one of sgd, adam"),
                (
                    "hyperparameters.seed",
                    "is required by this template and has no default"
                ),
            ]
        );
    }

    #[test]
    fn a_template_with_a_bad_default_is_refused() {
        let mut t = template();
        t.parameters.get_mut("lr").unwrap().default = Some(ParamValue::Float(100.0));
        t.parameters.get_mut("optimizer").unwrap().choices.clear();
        let errors = t.check().unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "parameters.lr.default",
                "parameters.optimizer",
                "parameters.optimizer.default"
            ]
        );
    }

    #[test]
    fn a_command_naming_no_parameter_is_refused() {
        let mut t = template();
        t.command = "python train.py --lr {lr} --bs {batch_size} | awk '{print}'".into();
        let errors = t.check().unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "command");
        assert!(
            errors[0]
                .message
                .contains("`{batch_size}` names no parameter"),
            "{}",
            errors[0].message
        );
    }
}
