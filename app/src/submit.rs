//! The submit form read into a job spec: numbers parsed with field errors,
//! a template's parameters typed by its declaration, a custom job's
//! `name=value` lines guessed. The server checks the spec itself after.

use std::collections::BTreeMap;

use trainyard_domain::FieldError;
use trainyard_domain::job::{JobSpec, ParamValue, ResourceSpec};
use trainyard_domain::template::{ParamType, TemplateSpec};

use crate::api::SubmitForm;

fn text(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

fn number<T: std::str::FromStr>(
    field: &str,
    value: &str,
    default: T,
    (what, least, most): (&str, f64, f64),
    errors: &mut Vec<FieldError>,
) -> T {
    match text(value) {
        None => default,
        Some(v) => v.parse().unwrap_or_else(|_| {
            // Say what is wrong with a number this field cannot hold.
            let why = match v.parse::<f64>() {
                Ok(n) if n.is_finite() && n.fract() == 0.0 && (least..=most).contains(&n) => {
                    format!("`{v}`: write it as a whole number, {}", n as i64)
                }
                Ok(n) if n.is_finite() && n.fract() == 0.0 => format!(
                    "`{v}` is out of range: give {what} from {} to {}",
                    least as i64, most as i64
                ),
                _ => format!("`{v}` is not {what}"),
            };
            errors.push(FieldError::new(field, why));
            default
        }),
    }
}

/// A value as its declared type; text when it does not read as one (the
/// server then says what the parameter wants).
fn typed(value: &str, kind: Option<ParamType>) -> ParamValue {
    let value = value.trim();
    match kind {
        Some(ParamType::Int) => value
            .parse()
            .map(ParamValue::Int)
            .unwrap_or_else(|_| ParamValue::Text(value.to_owned())),
        Some(ParamType::Float) => value
            .parse()
            .map(ParamValue::Float)
            .unwrap_or_else(|_| ParamValue::Text(value.to_owned())),
        Some(ParamType::Bool) => match value {
            "true" | "on" => ParamValue::Bool(true),
            "false" | "off" => ParamValue::Bool(false),
            other => ParamValue::Text(other.to_owned()),
        },
        _ => ParamValue::Text(value.to_owned()),
    }
}

/// A guess for a value written by hand: a whole number, a number, a truth
/// value, or text.
fn guessed(value: &str) -> ParamValue {
    let value = value.trim();
    if let Ok(i) = value.parse() {
        ParamValue::Int(i)
    } else if let Ok(x) = value.parse::<f64>()
        && x.is_finite()
    {
        ParamValue::Float(x)
    } else if value == "true" || value == "false" {
        ParamValue::Bool(value == "true")
    } else {
        ParamValue::Text(value.to_owned())
    }
}

pub fn spec_from_form(
    form: &SubmitForm,
    template: Option<&TemplateSpec>,
) -> Result<JobSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let template_slug = text(&form.template);
    let hyperparameters: BTreeMap<String, ParamValue> = if template_slug.is_some() {
        form.hp
            .iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| {
                let kind = template.and_then(|t| t.parameters.get(k)).map(|p| p.kind);
                (k.clone(), typed(v, kind))
            })
            .collect()
    } else {
        let mut map = BTreeMap::new();
        for (n, line) in form.hyperparameters.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    map.insert(k.trim().to_owned(), guessed(v));
                }
                _ => errors.push(FieldError::new(
                    "hyperparameters",
                    format!("line {}: write name=value, like lr=0.01", n + 1),
                )),
            }
        }
        map
    };
    let resources = ResourceSpec {
        gpus: number(
            "resources.gpus",
            &form.gpus,
            0,
            (
                "a whole number",
                0.0,
                f64::from(trainyard_domain::job::MAX_GPUS),
            ),
            &mut errors,
        ),
        cpus: number(
            "resources.cpus",
            &form.cpus,
            1.0,
            ("a number", 0.0, f64::MAX),
            &mut errors,
        ),
        memory: text(&form.memory).unwrap_or_else(|| "4Gi".to_owned()),
    };
    let spec = JobSpec {
        name: form.name.trim().to_owned(),
        experiment: text(&form.experiment),
        command: if template_slug.is_some() {
            None
        } else {
            text(&form.command)
        },
        template: template_slug,
        image: None,
        resources: Some(resources),
        env: BTreeMap::new(),
        hyperparameters,
        max_runtime: text(&form.max_runtime),
        retries: number(
            "retries",
            &form.retries,
            0,
            (
                "a whole number",
                0.0,
                f64::from(trainyard_domain::job::MAX_RETRIES),
            ),
            &mut errors,
        ),
        priority: number(
            "priority",
            &form.priority,
            0,
            (
                "a whole number",
                f64::from(*trainyard_domain::job::PRIORITY_RANGE.start()),
                f64::from(*trainyard_domain::job::PRIORITY_RANGE.end()),
            ),
            &mut errors,
        ),
        project: text(&form.project),
        datasets: form
            .datasets
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(str::to_owned)
            .collect(),
        team: text(&form.team),
        preemptible: text(&form.never_preempt).is_none(),
        resume_from: text(&form.resume_from).and_then(|v| match v.parse() {
            Ok(id) => Some(id),
            Err(_) => {
                errors.push(FieldError::new(
                    "resume_from",
                    format!("`{v}` is not a job id"),
                ));
                None
            }
        }),
    };
    if errors.is_empty() {
        Ok(spec)
    } else {
        // What else is wrong, said at once: the spec's own checks of the
        // fields the boxes above did not already refuse.
        if let Err(more) = spec.check() {
            let said: Vec<String> = errors.iter().map(|e| e.field.clone()).collect();
            errors.extend(more.into_iter().filter(|e| !said.contains(&e.field)));
        }
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_form_becomes_a_spec() {
        let form = SubmitForm {
            name: " sweep ".into(),
            command: "python train.py".into(),
            hyperparameters: "lr=0.01\n# comment\nlayers = 3\namp=true\nopt=adam\n".into(),
            gpus: "1".into(),
            cpus: "2.5".into(),
            memory: "8Gi".into(),
            ..Default::default()
        };
        let spec = spec_from_form(&form, None).unwrap();
        assert_eq!(spec.name, "sweep");
        assert_eq!(spec.command.as_deref(), Some("python train.py"));
        assert_eq!(spec.hyperparameters["lr"], ParamValue::Float(0.01));
        assert_eq!(spec.hyperparameters["layers"], ParamValue::Int(3));
        assert_eq!(spec.hyperparameters["amp"], ParamValue::Bool(true));
        assert_eq!(spec.hyperparameters["opt"], ParamValue::Text("adam".into()));
        assert_eq!(spec.resources().gpus, 1);
        assert_eq!(spec.resources().cpus, 2.5);
    }

    #[test]
    fn a_ticked_resume_box_names_the_job_it_resumes_from() {
        let form = SubmitForm {
            name: "again".into(),
            command: "python train.py".into(),
            resume_from: "42".into(),
            ..Default::default()
        };
        assert_eq!(spec_from_form(&form, None).unwrap().resume_from, Some(42));
        let unticked = SubmitForm {
            resume_from: String::new(),
            ..form.clone()
        };
        assert_eq!(spec_from_form(&unticked, None).unwrap().resume_from, None);
        let forged = SubmitForm {
            resume_from: "../7".into(),
            ..form
        };
        let errors = spec_from_form(&forged, None).unwrap_err();
        assert_eq!(errors[0].field, "resume_from");
    }

    #[test]
    fn mistyped_boxes_name_their_field() {
        let form = SubmitForm {
            name: "x".into(),
            command: "run".into(),
            gpus: "two".into(),
            hyperparameters: "no equals sign".into(),
            ..Default::default()
        };
        let errors = spec_from_form(&form, None).unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["hyperparameters", "resources.gpus"]);
    }

    /// Numbers a box cannot hold say why, and the other wrong boxes are
    /// named beside them, not one round later.
    #[test]
    fn every_wrong_box_is_named_at_once_with_its_cause() {
        let form = SubmitForm {
            name: "x".into(),
            command: "run".into(),
            gpus: "-1".into(),
            retries: "1.5".into(),
            priority: "-99999999999".into(),
            cpus: "-1".into(),
            memory: "lots".into(),
            ..Default::default()
        };
        let errors = spec_from_form(&form, None).unwrap_err();
        let said: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.field.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            &said[..3],
            [
                (
                    "resources.gpus",
                    "`-1` is out of range: give a whole number from 0 to 64"
                ),
                ("retries", "`1.5` is not a whole number"),
                (
                    "priority",
                    "`-99999999999` is out of range: give a whole number from -10 to 10"
                ),
            ]
        );
        let rest: Vec<&str> = said[3..].iter().map(|(f, _)| *f).collect();
        assert_eq!(rest, ["resources.cpus", "resources.memory"]);
        let written = SubmitForm {
            gpus: "1.0".into(),
            ..form
        };
        let errors = spec_from_form(&written, None).unwrap_err();
        assert_eq!(errors[0].message, "`1.0`: write it as a whole number, 1");
    }
}
