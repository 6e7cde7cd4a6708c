//! Hand-built SQL that runs on SQLite and PostgreSQL alike: placeholders in
//! the engine's style, and the run query language translated to WHERE and
//! ORDER BY clauses.

use sea_orm::{DatabaseBackend, Statement, Value};
use trainyard_domain::query::{
    AssessmentKind, Attribute, CmpOp, DatasetKey, Expr, Field, Literal, Predicate, Scope, SpanKey,
};

/// A statement under construction with its bound values.
pub struct Sql {
    backend: DatabaseBackend,
    pub text: String,
    values: Vec<Value>,
}

impl Sql {
    pub fn new(backend: DatabaseBackend) -> Sql {
        Sql {
            backend,
            text: String::new(),
            values: Vec::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Binds a value and writes its placeholder.
    pub fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        self.values.push(value.into());
        if self.backend == DatabaseBackend::Postgres {
            self.text.push_str(&format!("${}", self.values.len()));
        } else {
            self.text.push('?');
        }
        self
    }

    /// `(?, ?, …)` for a list of values.
    pub fn bind_list<V: Into<Value>>(&mut self, values: impl IntoIterator<Item = V>) -> &mut Self {
        self.push("(");
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(v);
        }
        self.push(")")
    }

    /// A list of whole numbers written into the text, not bound: a search
    /// may name tens of thousands of experiments (the mlflow client's
    /// `search_all_experiments` names every one), past the binds a
    /// statement may hold (32,766 on SQLite). Numbers cannot carry SQL.
    pub fn int_list(&mut self, values: &[i64]) -> &mut Self {
        if values.is_empty() {
            // `IN ()` is not SQL; no row has a NULL id.
            return self.push("(NULL)");
        }
        let mut text = String::with_capacity(values.len() * 8 + 2);
        text.push('(');
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str(&v.to_string());
        }
        text.push(')');
        self.push(&text)
    }

    pub fn is_postgres(&self) -> bool {
        self.backend == DatabaseBackend::Postgres
    }

    pub fn build(self) -> Statement {
        Statement::from_sql_and_values(self.backend, self.text, self.values)
    }
}

/// `(key, value)` pairs with the last value of each key, in first-seen order.
pub(crate) fn last_per_key(pairs: &[(String, String)]) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for (k, v) in pairs {
        match out.iter_mut().find(|(key, _)| *key == k.as_str()) {
            Some(slot) => slot.1 = v.as_str(),
            None => out.push((k.as_str(), v.as_str())),
        }
    }
    out
}

/// The keys one owner (a logged model, a registered model, a version, a
/// trace) holds in one of its key-value tables in all: requests are
/// bounded one by one, and this bounds what they add up to, so that reading
/// an owner whole stays bounded too.
pub const MAX_KEYS_HELD: usize = 10_000;
/// The characters of those keys and values in all: 10,000 values of 65,536
/// characters would be gigabytes for every read of the owner.
pub const MAX_CHARS_HELD: i64 = 8 << 20;

/// Sets key-value rows of one owner in one statement, last write wins:
/// `INSERT INTO <table> (<owner columns>, key, value) … ON CONFLICT … DO
/// UPDATE`. The tags and params of models, registered models, versions and
/// traces all have this shape. Refused when the owner would then hold more
/// than [`MAX_KEYS_HELD`] keys there, or more than [`MAX_CHARS_HELD`]
/// characters of keys and values; `conn` must be a transaction, which
/// the caller then drops, for the refusal to leave nothing behind.
pub(crate) async fn upsert_pairs(
    conn: &impl sea_orm::ConnectionTrait,
    mut sql: Sql,
    table: &str,
    owner: &[(&str, Value)],
    pairs: &[(String, String)],
) -> Result<(), crate::StoreError> {
    let last = last_per_key(pairs);
    if last.is_empty() {
        return Ok(());
    }
    let backend = if sql.is_postgres() {
        DatabaseBackend::Postgres
    } else {
        DatabaseBackend::Sqlite
    };
    lock_owner(conn, backend, &format!("{table}:{owner:?}")).await?;
    let columns: Vec<&str> = owner.iter().map(|(c, _)| *c).collect();
    let columns = columns.join(", ");
    sql.push(&format!(
        "INSERT INTO {table} ({columns}, key, value) VALUES "
    ));
    for (i, (key, value)) in last.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.push("(");
        for (_, v) in owner {
            sql.bind(v.clone()).push(", ");
        }
        sql.bind((*key).to_owned())
            .push(", ")
            .bind((*value).to_owned())
            .push(")");
    }
    sql.push(&format!(
        " ON CONFLICT ({columns}, key) DO UPDATE SET value = excluded.value"
    ));
    conn.execute_raw(sql.build()).await?;
    let row = owner_row(
        conn,
        table,
        owner,
        "COUNT(*) AS n, COALESCE(SUM(LENGTH(key) + LENGTH(value)), 0) AS chars",
    )
    .await?;
    let (held, chars): (i64, i64) = match row {
        Some(row) => (row.try_get("", "n")?, row.try_get("", "chars")?),
        None => (0, 0),
    };
    if held as usize > MAX_KEYS_HELD {
        return Err(crate::StoreError::Rejected(too_many(table, held)));
    }
    if chars > MAX_CHARS_HELD {
        return Err(crate::StoreError::Rejected(too_long(table, chars)));
    }
    Ok(())
}

/// How many rows of `table` one owner holds (`owner`: its columns and
/// values), counted inside the writer's transaction after it inserted, so
/// that a write past a bound is refused and rolled back whole.
pub(crate) async fn held_rows(
    conn: &impl sea_orm::ConnectionTrait,
    table: &str,
    owner: &[(&str, Value)],
) -> Result<i64, crate::StoreError> {
    Ok(
        match owner_row(conn, table, owner, "COUNT(*) AS n").await? {
            Some(row) => row.try_get("", "n")?,
            None => 0,
        },
    )
}

/// `SELECT <what> FROM <table> WHERE` the owner's columns equal its values.
async fn owner_row(
    conn: &impl sea_orm::ConnectionTrait,
    table: &str,
    owner: &[(&str, Value)],
    what: &str,
) -> Result<Option<sea_orm::QueryResult>, crate::StoreError> {
    let mut sql = Sql::new(conn.get_database_backend());
    sql.push(&format!("SELECT {what} FROM {table} WHERE "));
    for (i, (column, v)) in owner.iter().enumerate() {
        if i > 0 {
            sql.push(" AND ");
        }
        sql.push(&format!("{column} = ")).bind(v.clone());
    }
    Ok(conn.query_one_raw(sql.build()).await?)
}

/// On PostgreSQL, holds a lock named `name` (one owner's rows of a table)
/// until the transaction ends, so that two writers cannot both pass a count
/// of those rows. SQLite writes one transaction at a time already.
pub(crate) async fn lock_owner(
    conn: &impl sea_orm::ConnectionTrait,
    backend: DatabaseBackend,
    name: &str,
) -> Result<(), crate::StoreError> {
    if backend == DatabaseBackend::Postgres {
        let mut sql = Sql::new(backend);
        sql.push("SELECT pg_advisory_xact_lock(hashtext(")
            .bind(name.to_owned())
            .push("))");
        conn.execute_raw(sql.build()).await?;
    }
    Ok(())
}

/// The refusal of a write that would make one owner hold `held` rows of
/// `table`, past [`MAX_KEYS_HELD`]: what holds what, and what to do.
pub(crate) fn too_many(table: &str, held: i64) -> String {
    let (owner, what, hint) = owner_of(table);
    format!(
        "One {owner} holds at most {} {what}; this request would make it {}: {hint}.",
        trainyard_domain::format_count(MAX_KEYS_HELD as i64),
        trainyard_domain::format_count(held)
    )
}

/// What holds the rows of `table`, what they are, and what to do when
/// they are too many.
fn owner_of(table: &str) -> (&'static str, &'static str, &'static str) {
    match table {
        "logged_model_params" => ("logged model", "parameters", "keep the rest in an artifact"),
        "logged_model_tags" => (
            "logged model",
            "tags",
            "delete some tags first, or keep the rest in an artifact",
        ),
        "registered_model_tags" => ("registered model", "tags", "delete some tags first"),
        "registered_model_aliases" => ("registered model", "aliases", "delete some aliases first"),
        "model_version_tags" => ("model version", "tags", "delete some tags first"),
        "trace_tags" => ("trace", "tags", "delete some tags first"),
        "evaluation_dataset_tags" => ("evaluation dataset", "tags", "delete some tags first"),
        "trace_metadata" => (
            "trace",
            "metadata keys",
            "keep the rest in the trace's spans",
        ),
        _ => ("record", "keys", "keep the rest elsewhere"),
    }
}

/// The refusal of a write that would make one owner's keys and values in
/// `table` `chars` characters long, past [`MAX_CHARS_HELD`].
pub(crate) fn too_long(table: &str, chars: i64) -> String {
    let (owner, what, hint) = owner_of(table);
    format!(
        "One {owner}'s {what} hold at most {} characters in all (keys and values); this request would make them {}: {hint}.",
        trainyard_domain::format_count(MAX_CHARS_HELD),
        trainyard_domain::format_count(chars)
    )
}

/// Writes a filter as a boolean SQL expression over `runs r` (runs scope),
/// `experiments e` (experiments scope), `logged_models m` (logged models),
/// `registered_models g` and (for versions) `model_versions v`, or
/// `traces t`.
pub fn filter(sql: &mut Sql, expr: &Expr, scope: Scope) {
    filter_on(sql, expr, scope, &[]);
}

/// A dataset that metric comparisons are held to: its name, and its digest
/// when given.
pub type DatasetRef = (String, Option<String>);

/// As [`filter`]; metric comparisons of logged models count only metrics
/// logged on one of `datasets` (when any), as MLflow's `datasets` clause.
pub fn filter_on(sql: &mut Sql, expr: &Expr, scope: Scope, datasets: &[DatasetRef]) {
    match expr {
        // Comparisons of spans joined by AND hold for one span, as MLflow's.
        Expr::And(parts) if parts.iter().any(is_span_test) => {
            let (spans, others): (Vec<&Expr>, Vec<&Expr>) =
                parts.iter().partition(|p| is_span_test(p));
            sql.push("(");
            span_tests(sql, &spans);
            for part in others {
                sql.push(" AND ");
                filter_on(sql, part, scope, datasets);
            }
            sql.push(")");
        }
        Expr::And(parts) | Expr::Or(parts) => {
            let joiner = if matches!(expr, Expr::And(_)) {
                " AND "
            } else {
                " OR "
            };
            sql.push("(");
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    sql.push(joiner);
                }
                filter_on(sql, part, scope, datasets);
            }
            sql.push(")");
        }
        Expr::Not(inner) => {
            sql.push("NOT (");
            filter_on(sql, inner, scope, datasets);
            sql.push(")");
        }
        Expr::Test(field, predicate) => test(sql, field, predicate, scope, datasets),
    }
}

fn is_span_test(expr: &Expr) -> bool {
    matches!(expr, Expr::Test(Field::Span(..), _))
}

/// True when one of the trace's spans passes every one of `tests`.
fn span_tests(sql: &mut Sql, tests: &[&Expr]) {
    sql.push("EXISTS (SELECT 1 FROM trace_spans s WHERE s.trace_id = t.id");
    for test in tests {
        let Expr::Test(Field::Span(key, negated), predicate) = test else {
            continue;
        };
        sql.push(if *negated { " AND NOT (" } else { " AND (" });
        match key {
            SpanKey::Name => compare(sql, "s.name", predicate, false),
            SpanKey::Type => compare(sql, "s.span_type", predicate, false),
            SpanKey::Status => compare(sql, "s.status", predicate, false),
            SpanKey::Content => compare(sql, "s.content", predicate, false),
            SpanKey::Attribute(name) => {
                sql.push(
                    "EXISTS (SELECT 1 FROM trace_span_attributes a WHERE a.trace_id = s.trace_id \
                     AND a.span_id = s.span_id AND a.key = ",
                )
                .bind(name.clone())
                .push(" AND ");
                compare(sql, "a.value", predicate, false);
                sql.push(")");
            }
        }
        sql.push(")");
    }
    sql.push(")");
}

/// A key-value entity: its table and key.
fn kv_table(field: &Field, scope: Scope) -> Option<(&'static str, &str)> {
    match (field, scope) {
        (Field::Metric(k), Scope::LoggedModels) => Some(("logged_model_metrics", k)),
        (Field::Param(k), Scope::LoggedModels) => Some(("logged_model_params", k)),
        (Field::Tag(k), Scope::LoggedModels) => Some(("logged_model_tags", k)),
        (Field::Tag(k), Scope::RegisteredModels) => Some(("registered_model_tags", k)),
        (Field::Tag(k), Scope::ModelVersions) => Some(("model_version_tags", k)),
        (Field::Tag(k), Scope::Traces) => Some(("trace_tags", k)),
        (Field::Param(k), Scope::Traces) => Some(("trace_metadata", k)),
        (Field::Tag(k), Scope::EvaluationDatasets) => Some(("evaluation_dataset_tags", k)),
        (Field::Metric(k), _) => Some(("latest_metrics", k)),
        (Field::Param(k), _) => Some(("params", k)),
        (Field::Tag(k), Scope::Runs) => Some(("tags", k)),
        (Field::Tag(k), Scope::Experiments) => Some(("experiment_tags", k)),
        (
            Field::Attr(_)
            | Field::Assessment(..)
            | Field::Dataset(_)
            | Field::Span(..)
            | Field::TraceText,
            _,
        ) => None,
    }
}

pub(crate) fn attr_column(attr: Attribute, scope: Scope) -> &'static str {
    if scope == Scope::Traces {
        return match attr {
            Attribute::TraceId => "t.id",
            Attribute::CreationTime => "t.request_time",
            Attribute::ExecutionTime => "t.execution_time",
            // None while the trace is in progress.
            Attribute::EndTime => "(t.request_time + t.execution_time)",
            Attribute::Status => "t.state",
            Attribute::RunId => "t.run_id",
            Attribute::ClientRequestId => "t.client_request_id",
            _ => "t.name",
        };
    }
    if scope == Scope::EvaluationDatasets {
        return match attr {
            Attribute::CreationTime => "d.created_time",
            Attribute::LastUpdateTime => "d.last_update_time",
            Attribute::CreatedBy => "d.created_by",
            Attribute::LastUpdatedBy => "d.last_updated_by",
            _ => "d.name",
        };
    }
    if matches!(scope, Scope::RegisteredModels | Scope::ModelVersions) {
        return match attr {
            Attribute::RunId => "v.run_id",
            Attribute::SourcePath => "v.source",
            Attribute::VersionNumber => "v.version",
            Attribute::CreationTime if scope == Scope::ModelVersions => "v.creation_time",
            Attribute::LastUpdateTime if scope == Scope::ModelVersions => "v.last_update_time",
            Attribute::CreationTime => "g.creation_time",
            Attribute::LastUpdateTime => "g.last_update_time",
            _ => "g.name",
        };
    }
    if scope == Scope::LoggedModels {
        return match attr {
            Attribute::Name => "m.name",
            Attribute::Status => "m.status",
            Attribute::CreationTime => "m.creation_time",
            Attribute::LastUpdateTime => "m.last_update_time",
            Attribute::ModelType => "m.model_type",
            Attribute::SourceRunId => "m.source_run_id",
            _ => "m.id",
        };
    }
    match attr {
        Attribute::RunId => "r.id",
        Attribute::RunName => "r.name",
        Attribute::UserId => "r.user_name",
        Attribute::Status => "r.status",
        Attribute::ArtifactUri => "r.artifact_uri",
        Attribute::StartTime => "r.start_time",
        Attribute::EndTime => "r.end_time",
        Attribute::ExperimentId => "e.id",
        Attribute::Name => "e.name",
        Attribute::CreationTime => "e.creation_time",
        Attribute::LastUpdateTime => "e.last_update_time",
        // Only the other scopes have these (above).
        Attribute::ModelId
        | Attribute::ModelType
        | Attribute::SourceRunId
        | Attribute::VersionNumber
        | Attribute::SourcePath
        | Attribute::TraceId
        | Attribute::ExecutionTime
        | Attribute::CreatedBy
        | Attribute::LastUpdatedBy
        | Attribute::Prompt
        | Attribute::ClientRequestId => "NULL",
    }
}

fn test(
    sql: &mut Sql,
    field: &Field,
    predicate: &Predicate,
    scope: Scope,
    datasets: &[DatasetRef],
) {
    let link = match scope {
        Scope::Runs => "x.run_id = r.id",
        Scope::Experiments => "x.experiment_id = e.id",
        Scope::LoggedModels => "x.model_id = m.id",
        Scope::RegisteredModels => "x.registered_model_id = g.id",
        Scope::ModelVersions => {
            "x.registered_model_id = v.registered_model_id AND x.version = v.version"
        }
        Scope::Traces => "x.trace_id = t.id",
        Scope::EvaluationDatasets => "x.dataset_id = d.id",
    };
    if let Field::Assessment(kind, name) = field {
        assessment_test(sql, *kind, name, predicate);
        return;
    }
    if let Field::Dataset(key) = field {
        dataset_test(sql, *key, predicate);
        return;
    }
    if let Field::Span(..) = field {
        span_tests(sql, &[&Expr::Test(field.clone(), predicate.clone())]);
        return;
    }
    if let Field::TraceText = field {
        sql.push("EXISTS (SELECT 1 FROM trace_spans s WHERE s.trace_id = t.id AND ");
        compare(sql, "s.content", predicate, false);
        sql.push(")");
        return;
    }
    // The parser lets `prompt` through only as `= 'name/version'`.
    if let (Field::Attr(Attribute::Prompt), Predicate::Cmp(_, Literal::Str(prompt))) =
        (field, predicate)
    {
        sql.push("EXISTS (SELECT 1 FROM trace_prompts x WHERE x.trace_id = t.id AND x.prompt = ")
            .bind(prompt.clone())
            .push(")");
        return;
    }
    let Some((table, key)) = kv_table(field, scope) else {
        let Field::Attr(attr) = field else { return };
        let column = attr_column(*attr, scope);
        if *predicate == Predicate::IsNull {
            sql.push(&format!("({column} IS NULL)"));
        } else {
            // Experiment ids are quoted strings in queries, integers in the table.
            let numeric = attr.is_numeric() || *attr == Attribute::ExperimentId;
            compare(sql, column, predicate, numeric);
        }
        return;
    };
    let on_named_datasets = matches!(
        (field, scope, datasets.is_empty()),
        (Field::Metric(_), Scope::LoggedModels, false)
    );
    if *predicate == Predicate::IsNull {
        sql.push(&format!(
            "NOT EXISTS (SELECT 1 FROM {table} x WHERE {link} AND x.key = "
        ));
        sql.bind(key.to_owned());
        if on_named_datasets {
            // No value on those datasets, whatever was logged elsewhere.
            sql.push(" AND ");
            on_datasets(sql, "x", datasets);
        }
        sql.push(")");
        return;
    }
    // In the registry, a model without the tag differs from any value: the
    // client hides prompts with `tags.mlflow.prompt.is_prompt != 'true'`.
    if let (
        Field::Tag(_),
        Predicate::Cmp(CmpOp::Ne, value),
        Scope::RegisteredModels | Scope::ModelVersions,
    ) = (field, predicate, scope)
    {
        sql.push(&format!(
            "NOT EXISTS (SELECT 1 FROM {table} x WHERE {link} AND x.key = "
        ));
        sql.bind(key.to_owned());
        sql.push(" AND x.value = ");
        bind_literal(sql, value, false);
        sql.push(")");
        return;
    }
    sql.push(&format!(
        "EXISTS (SELECT 1 FROM {table} x WHERE {link} AND x.key = "
    ));
    sql.bind(key.to_owned());
    sql.push(" AND ");
    if on_named_datasets {
        on_datasets(sql, "x", datasets);
        sql.push(" AND ");
    }
    match field {
        Field::Metric(_) => compare(sql, "x.value", predicate, true),
        Field::Param(_) if has_number(predicate) => {
            // Params are text; a number in the query compares them as numbers,
            // and a param that is not a number does not match.
            let numeric = numeric_text(sql.is_postgres(), "x.value");
            compare(sql, &numeric, predicate, true);
        }
        _ => compare(sql, "x.value", predicate, false),
    }
    sql.push(")");
}

/// A text column (a param's value) as a number where it is one, NULL
/// where not: what a number in a query compares it with, and what sorting
/// by a param orders by first. The digits and exponent are bounded, so
/// that no value (`1e999`) makes PostgreSQL's cast fail the query; SQLite
/// takes the same shapes, as near as its patterns allow.
pub(crate) fn numeric_text(postgres: bool, column: &str) -> String {
    if postgres {
        format!(
            "(CASE WHEN {column} ~ '^\\s*[-+]?([0-9]{{1,30}}\\.?[0-9]{{0,30}}|\\.[0-9]{{1,30}})([eE][-+]?[0-9]{{1,2}})?\\s*$' THEN CAST({column} AS DOUBLE PRECISION) END)"
        )
    } else {
        format!(
            "(CASE WHEN {column} <> '' AND length({column}) <= 64 AND trim({column}, '0123456789.-+eE ') = '' \
             AND {column} GLOB '*[0-9]*' AND {column} NOT GLOB '*.*.*' AND {column} NOT GLOB '*[eE]*[eE]*' \
             AND {column} NOT GLOB '*[eE][0-9][0-9][0-9]*' AND {column} NOT GLOB '*[eE][-+][0-9][0-9][0-9]*' \
             THEN CAST({column} AS REAL) END)"
        )
    }
}

/// A run's input datasets, as MLflow searches them: true when one of them
/// matches (so `!=` is "one dataset named otherwise"). The context is the
/// input's `mlflow.data.context` tag, kept in its JSON list of pairs.
fn dataset_test(sql: &mut Sql, key: DatasetKey, predicate: &Predicate) {
    sql.push(
        "EXISTS (SELECT 1 FROM run_datasets x JOIN datasets xd ON xd.id = x.dataset_id \
         WHERE x.run_id = r.id AND ",
    );
    match key {
        DatasetKey::Name => compare(sql, "xd.name", predicate, false),
        DatasetKey::Digest => compare(sql, "xd.digest", predicate, false),
        DatasetKey::Context => {
            let (pairs, tag_key, tag_value) = if sql.is_postgres() {
                (
                    "jsonb_array_elements(x.tags::jsonb) AS j(value)",
                    "(j.value->>0)",
                    "(j.value->>1)",
                )
            } else {
                (
                    "json_each(x.tags) j",
                    "json_extract(j.value, '$[0]')",
                    "json_extract(j.value, '$[1]')",
                )
            };
            sql.push(&format!("EXISTS (SELECT 1 FROM {pairs} WHERE {tag_key} = "))
                .bind("mlflow.data.context".to_owned())
                .push(" AND ");
            compare(sql, tag_value, predicate, false);
            sql.push(")");
        }
    }
    sql.push(")");
}

/// A trace's valid assessments of a kind and name, as MLflow searches them:
/// = and != match the value's JSON text with the text given, bare or as a
/// JSON string (`feedback.correct = 'true'` finds `true`, `feedback.tone =
/// 'calm'` finds `"calm"`); <, <=, > and >= compare numbers; IS NULL is a
/// trace without one.
fn assessment_test(sql: &mut Sql, kind: AssessmentKind, name: &str, predicate: &Predicate) {
    let exists = if *predicate == Predicate::IsNull {
        "NOT EXISTS"
    } else {
        "EXISTS"
    };
    sql.push(&format!(
        "{exists} (SELECT 1 FROM trace_assessments x WHERE x.trace_id = t.id AND x.kind = "
    ))
    .bind(kind.name())
    .push(" AND x.name = ")
    .bind(name.to_owned())
    .push(" AND x.valid = ")
    .bind(true);
    match predicate {
        Predicate::Cmp(op @ (CmpOp::Eq | CmpOp::Ne), Literal::Str(s)) => {
            let quoted = serde_json::to_string(s).unwrap_or_default();
            let not = if *op == CmpOp::Ne { "NOT " } else { "" };
            sql.push(&format!(" AND {not}(x.value_text = "))
                .bind(s.clone())
                .push(" OR x.value_text = ")
                .bind(quoted)
                .push(")");
        }
        Predicate::Cmp(op, Literal::Num(n)) => {
            sql.push(&format!(" AND x.value_number {} ", op.sql()))
                .bind(*n);
        }
        // The parser lets nothing else through.
        _ => {}
    }
    sql.push(")");
}

/// `(x.dataset_name = … [AND x.dataset_digest = …] OR …)` for a table
/// alias `x` of logged-model metrics.
pub fn on_datasets(sql: &mut Sql, alias: &str, datasets: &[DatasetRef]) {
    sql.push("(");
    for (i, (name, digest)) in datasets.iter().enumerate() {
        if i > 0 {
            sql.push(" OR ");
        }
        sql.push(&format!("({alias}.dataset_name = "))
            .bind(name.clone());
        if let Some(digest) = digest {
            sql.push(&format!(" AND {alias}.dataset_digest = "))
                .bind(digest.clone());
        }
        sql.push(")");
    }
    sql.push(")");
}

fn has_number(predicate: &Predicate) -> bool {
    match predicate {
        Predicate::Cmp(_, Literal::Num(_)) => true,
        Predicate::Between(a, b) => matches!(a, Literal::Num(_)) || matches!(b, Literal::Num(_)),
        Predicate::In(values) => values.iter().any(|v| matches!(v, Literal::Num(_))),
        _ => false,
    }
}

fn bind_literal(sql: &mut Sql, literal: &Literal, numeric: bool) {
    match literal {
        Literal::Num(n) if numeric => sql.bind(*n),
        Literal::Num(n) => sql.bind(format_number(*n)),
        Literal::Str(s) if numeric => sql.bind(s.parse::<f64>().unwrap_or(f64::NAN)),
        Literal::Str(s) => sql.bind(s.clone()),
    };
}

fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

fn compare(sql: &mut Sql, column: &str, predicate: &Predicate, numeric: bool) {
    match predicate {
        Predicate::Cmp(op, value) => {
            // A NaN latest value is stored as NULL; NaN != x holds in MLflow.
            // In parentheses: the test sits among the key's own conditions.
            let nan_differs = *op == CmpOp::Ne && column == "x.value" && numeric;
            sql.push(&format!(
                "{}{column} {} ",
                if nan_differs { "(" } else { "" },
                op.sql()
            ));
            bind_literal(sql, value, numeric);
            if nan_differs {
                sql.push(&format!(" OR {column} IS NULL)"));
            }
        }
        Predicate::Between(low, high) => {
            sql.push(&format!("{column} BETWEEN "));
            bind_literal(sql, low, numeric);
            sql.push(" AND ");
            bind_literal(sql, high, numeric);
        }
        Predicate::In(values) => {
            sql.push(&format!("{column} IN ("));
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                bind_literal(sql, v, numeric);
            }
            sql.push(")");
        }
        Predicate::Like(pattern) => {
            if sql.is_postgres() {
                sql.push(&format!("{column} LIKE "));
                sql.bind(pattern.clone());
            } else {
                // SQLite's LIKE ignores case; GLOB does not, as MLflow's LIKE.
                sql.push(&format!("{column} GLOB "));
                sql.bind(like_to_glob(pattern));
            }
        }
        Predicate::ILike(pattern) => {
            let op = if sql.is_postgres() { "ILIKE" } else { "LIKE" };
            sql.push(&format!("{column} {op} "));
            sql.bind(pattern.clone());
        }
        Predicate::IsNull => {
            sql.push(&format!("{column} IS NULL"));
        }
    }
}

/// Turns an SQL LIKE pattern into an SQLite GLOB pattern.
pub fn like_to_glob(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    for c in pattern.chars() {
        match c {
            '%' => out.push('*'),
            '_' => out.push('?'),
            '*' => out.push_str("[*]"),
            '?' => out.push_str("[?]"),
            '[' => out.push_str("[[]"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_become_globs() {
        assert_eq!(like_to_glob("res%_v[1]*?"), "res*?v[[]1][*][?]");
    }

    #[test]
    fn placeholders_follow_the_engine() {
        let mut pg = Sql::new(DatabaseBackend::Postgres);
        pg.push("a = ")
            .bind(1)
            .push(" AND b IN ")
            .bind_list(["x", "y"]);
        assert_eq!(pg.text, "a = $1 AND b IN ($2, $3)");
        let mut lite = Sql::new(DatabaseBackend::Sqlite);
        lite.push("a = ").bind(1);
        assert_eq!(lite.text, "a = ?");
    }
}
