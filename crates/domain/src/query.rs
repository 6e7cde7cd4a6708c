//! The run query language, shared by the MLflow search API and the explorer:
//! MLflow's filter grammar (`metrics.acc > 0.9 and params.model = 'cnn'`)
//! plus what MLflow lacks: `OR`, parentheses, `NOT`, `NOT IN`, `BETWEEN`,
//! and numeric comparison of params. Errors point at a character position.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A query that does not parse, with the character offset where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryError {
    pub position: usize,
    pub message: String,
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at position {}: {}", self.position, self.message)
    }
}

impl std::error::Error for QueryError {}

/// What a query searches: runs, or experiments (other attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Runs,
    Experiments,
    /// MLflow 3's logged models.
    LoggedModels,
    /// The model registry's registered models, and their versions.
    RegisteredModels,
    ModelVersions,
    /// MLflow 3's traces: `metadata.<key>` reads their request metadata.
    Traces,
    /// MLflow 3's evaluation datasets.
    EvaluationDatasets,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Attribute {
    RunId,
    RunName,
    UserId,
    Status,
    ArtifactUri,
    StartTime,
    EndTime,
    ExperimentId,
    Name,
    CreationTime,
    LastUpdateTime,
    ModelId,
    ModelType,
    SourceRunId,
    VersionNumber,
    SourcePath,
    TraceId,
    ExecutionTime,
    CreatedBy,
    LastUpdatedBy,
    /// A prompt version a trace used: `prompt = "name/version"`.
    Prompt,
    /// The id a trace's caller gave its request.
    ClientRequestId,
}

impl Attribute {
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            Attribute::StartTime
                | Attribute::EndTime
                | Attribute::CreationTime
                | Attribute::LastUpdateTime
                | Attribute::VersionNumber
                | Attribute::ExecutionTime
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Attribute::RunId => "run_id",
            Attribute::RunName => "run_name",
            Attribute::UserId => "user_id",
            Attribute::Status => "status",
            Attribute::ArtifactUri => "artifact_uri",
            Attribute::StartTime => "start_time",
            Attribute::EndTime => "end_time",
            Attribute::ExperimentId => "experiment_id",
            Attribute::Name => "name",
            Attribute::CreationTime => "creation_time",
            Attribute::LastUpdateTime => "last_update_time",
            Attribute::ModelId => "model_id",
            Attribute::ModelType => "model_type",
            Attribute::SourceRunId => "source_run_id",
            Attribute::VersionNumber => "version_number",
            Attribute::SourcePath => "source_path",
            Attribute::TraceId => "trace_id",
            Attribute::ExecutionTime => "execution_time_ms",
            Attribute::CreatedBy => "created_by",
            Attribute::LastUpdatedBy => "last_updated_by",
            Attribute::Prompt => "prompt",
            Attribute::ClientRequestId => "client_request_id",
        }
    }

    fn lookup(scope: Scope, key: &str) -> Option<Attribute> {
        let attr = match (scope, key) {
            (Scope::Runs, "run_id" | "run_uuid" | "id") => Attribute::RunId,
            (Scope::Runs, "run_name" | "run name" | "Run name" | "Run Name") => Attribute::RunName,
            (Scope::Runs, "user_id" | "user") => Attribute::UserId,
            (Scope::Runs, "status") => Attribute::Status,
            (Scope::Runs, "artifact_uri") => Attribute::ArtifactUri,
            (Scope::Runs, "start_time" | "created" | "Created") => Attribute::StartTime,
            (Scope::Runs, "end_time") => Attribute::EndTime,
            (Scope::Experiments, "experiment_id") => Attribute::ExperimentId,
            (Scope::Experiments, "name") => Attribute::Name,
            (Scope::Experiments, "creation_time") => Attribute::CreationTime,
            (Scope::Experiments, "last_update_time") => Attribute::LastUpdateTime,
            (Scope::LoggedModels, "name") => Attribute::Name,
            (Scope::LoggedModels, "model_id") => Attribute::ModelId,
            (Scope::LoggedModels, "model_type") => Attribute::ModelType,
            (Scope::LoggedModels, "status") => Attribute::Status,
            (Scope::LoggedModels, "source_run_id") => Attribute::SourceRunId,
            (Scope::LoggedModels, "creation_timestamp" | "creation_time") => {
                Attribute::CreationTime
            }
            (Scope::LoggedModels, "last_updated_timestamp" | "last_updated_time") => {
                Attribute::LastUpdateTime
            }
            (Scope::RegisteredModels | Scope::ModelVersions, "name") => Attribute::Name,
            (
                Scope::RegisteredModels | Scope::ModelVersions,
                "creation_timestamp" | "timestamp",
            ) => Attribute::CreationTime,
            (Scope::RegisteredModels | Scope::ModelVersions, "last_updated_timestamp") => {
                Attribute::LastUpdateTime
            }
            (Scope::ModelVersions, "run_id") => Attribute::RunId,
            (Scope::ModelVersions, "source_path") => Attribute::SourcePath,
            (Scope::ModelVersions, "version_number") => Attribute::VersionNumber,
            (Scope::Traces, "trace_id" | "request_id") => Attribute::TraceId,
            (Scope::Traces, "timestamp_ms" | "timestamp") => Attribute::CreationTime,
            (Scope::Traces, "execution_time_ms" | "execution_time") => Attribute::ExecutionTime,
            (Scope::Traces, "status" | "state") => Attribute::Status,
            (Scope::Traces, "name") => Attribute::Name,
            (Scope::Traces, "run_id") => Attribute::RunId,
            (Scope::Traces, "prompt") => Attribute::Prompt,
            (Scope::Traces, "end_time_ms" | "end_time") => Attribute::EndTime,
            (Scope::Traces, "client_request_id") => Attribute::ClientRequestId,
            (Scope::EvaluationDatasets, "name") => Attribute::Name,
            (Scope::EvaluationDatasets, "created_time") => Attribute::CreationTime,
            (Scope::EvaluationDatasets, "last_update_time") => Attribute::LastUpdateTime,
            (Scope::EvaluationDatasets, "created_by") => Attribute::CreatedBy,
            (Scope::EvaluationDatasets, "last_updated_by") => Attribute::LastUpdatedBy,
            _ => return None,
        };
        Some(attr)
    }

    fn valid_names(scope: Scope) -> &'static str {
        match scope {
            Scope::Runs => "run_id, run_name, user_id, status, artifact_uri, start_time, end_time",
            Scope::Experiments => "name, experiment_id, creation_time, last_update_time",
            Scope::LoggedModels => {
                "name, model_id, model_type, status, source_run_id, creation_timestamp, last_updated_timestamp"
            }
            Scope::RegisteredModels => "name, creation_timestamp, last_updated_timestamp",
            Scope::ModelVersions => {
                "name, run_id, source_path, version_number, creation_timestamp, last_updated_timestamp"
            }
            Scope::Traces => {
                "trace_id, name, status, timestamp_ms, execution_time_ms, end_time_ms, client_request_id, run_id, prompt"
            }
            Scope::EvaluationDatasets => {
                "name, created_time, last_update_time, created_by, last_updated_by"
            }
        }
    }
}

/// What a comparison looks at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Field {
    /// The run's latest value of a metric.
    Metric(String),
    Param(String),
    Tag(String),
    Attr(Attribute),
    /// A trace's valid (not overridden) feedback or expectation of this
    /// name: `feedback.relevance = 'true'`, `feedback.score > 0.5`.
    Assessment(AssessmentKind, String),
    /// A run's input datasets: true when one of them matches
    /// (`datasets.name = 'train'`, `datasets.context = 'eval'`).
    Dataset(DatasetKey),
    /// A trace's spans, as MLflow searches them: true when one span
    /// matches, and comparisons of spans joined by AND must hold for the
    /// same span (`span.type = 'LLM' AND span.status = 'ERROR'`). The flag
    /// is an inline `NOT IN` or `NOT LIKE`, which (as in MLflow) asks for
    /// a span that is not so, where `NOT (span.… )` asks for no such span.
    Span(SpanKey, bool),
    /// Any of a trace's spans' text (`trace.text LIKE '%timeout%'`).
    TraceText,
}

/// What of a trace's span a filter looks at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpanKey {
    Name,
    /// LLM, CHAIN, TOOL, RETRIEVER… as the client typed it.
    Type,
    /// OK, ERROR or UNSET.
    Status,
    /// The span's JSON: name, type, attributes, inputs and outputs.
    Content,
    /// One attribute's value (`span.attributes.model = 'gpt-4'`).
    Attribute(String),
}

impl SpanKey {
    fn describe(&self) -> String {
        match self {
            SpanKey::Name => "span.name".to_owned(),
            SpanKey::Type => "span.type".to_owned(),
            SpanKey::Status => "span.status".to_owned(),
            SpanKey::Content => "span.content".to_owned(),
            SpanKey::Attribute(key) => format!("span.attributes.{key}"),
        }
    }
}

/// What of a run's input dataset a filter looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DatasetKey {
    Name,
    Digest,
    /// The input's `mlflow.data.context` tag (`training`, `eval`…).
    Context,
}

impl DatasetKey {
    pub fn name(self) -> &'static str {
        match self {
            DatasetKey::Name => "name",
            DatasetKey::Digest => "digest",
            DatasetKey::Context => "context",
        }
    }
}

/// Which assessments of traces a filter looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AssessmentKind {
    Feedback,
    Expectation,
}

impl AssessmentKind {
    /// As MLflow names it (and as it is stored).
    pub fn name(self) -> &'static str {
        match self {
            AssessmentKind::Feedback => "feedback",
            AssessmentKind::Expectation => "expectation",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Literal {
    Num(f64),
    Str(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn sql(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Predicate {
    Cmp(CmpOp, Literal),
    /// Inclusive at both ends.
    Between(Literal, Literal),
    In(Vec<Literal>),
    /// SQL pattern (`%`, `_`), case-sensitive.
    Like(String),
    /// SQL pattern, case-insensitive.
    ILike(String),
    /// The run has no such metric, param or tag (or the attribute is unset).
    IsNull,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    Test(Field, Predicate),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderBy {
    pub field: Field,
    pub ascending: bool,
}

/// The longest filter or order field read, in characters. A query people
/// write, or a list of a few hundred run ids, fits many times over.
pub const MAX_QUERY_CHARS: usize = 32_768;

/// How deep parentheses and `NOT`s may nest. The parser (and the SQL made
/// from its tree) recurse once per level: the bound keeps a hostile query
/// from exhausting the stack.
pub const MAX_NESTING: usize = 32;

/// How many comparisons one filter may hold; each becomes a term of the SQL.
pub const MAX_COMPARISONS: usize = 500;

/// The runs search box's plain words, as MLflow's UI takes them: text with
/// no operator, quote or parenthesis, not naming a key (`metrics.…`), is a
/// search of run names, `attributes.run_name ILIKE '%text%'`. None for
/// anything else, which is parsed as a filter.
pub fn name_search(text: &str) -> Option<String> {
    let text = text.trim();
    let keyword = |w: &str| {
        matches!(
            w.to_ascii_uppercase().as_str(),
            "AND" | "OR" | "NOT" | "IN" | "LIKE" | "ILIKE" | "IS" | "NULL" | "BETWEEN"
        )
    };
    let names_a_key = [
        "metrics.",
        "params.",
        "tags.",
        "attributes.",
        "attribute.",
        "metric.",
        "param.",
        "tag.",
    ]
    .iter()
    .any(|prefix| text.to_ascii_lowercase().starts_with(prefix));
    let plain = !text.is_empty()
        && !names_a_key
        && !text.contains(['=', '<', '>', '!', '(', ')', '\'', '"', '`', '\\'])
        && !text.split_whitespace().any(keyword);
    plain.then(|| format!("attributes.run_name ILIKE '%{text}%'"))
}

/// Parses a filter; an empty or blank filter is `None` (everything matches).
pub fn parse_filter(input: &str, scope: Scope) -> Result<Option<Expr>, QueryError> {
    let tokens = lex(input)?;
    if tokens.is_empty() {
        return Ok(None);
    }
    let mut p = Parser::new(tokens, scope, input);
    let expr = p.or()?;
    if let Some(tok) = p.peek() {
        return Err(p.error_at(
            tok.pos,
            format!(
                "unexpected {}; expected AND, OR or the end",
                tok.kind.describe()
            ),
        ));
    }
    Ok(Some(expr))
}

/// Parses one `order_by` element: `<field> [ASC|DESC]`.
pub fn parse_order_by(input: &str, scope: Scope) -> Result<OrderBy, QueryError> {
    let tokens = lex(input)?;
    let mut p = Parser::new(tokens, scope, input);
    let field = p.field()?;
    match field {
        Field::Dataset(_) => {
            return Err(p.error_at(
                0,
                "runs cannot be ordered by their datasets; filter on them with datasets.name = '…'",
            ));
        }
        Field::Span(..) | Field::TraceText => {
            return Err(p.error_at(
                0,
                "traces cannot be ordered by their spans; filter on them with span.name = '…'",
            ));
        }
        _ => {}
    }
    let mut ascending = true;
    if let Some(word) = p.peek_keyword() {
        match word.as_str() {
            "ASC" => {
                p.pos += 1;
            }
            "DESC" => {
                ascending = false;
                p.pos += 1;
            }
            _ => {}
        }
    }
    if let Some(tok) = p.peek() {
        return Err(p.error_at(
            tok.pos,
            format!(
                "unexpected {} after the order field; use ASC or DESC",
                tok.kind.describe()
            ),
        ));
    }
    Ok(OrderBy { field, ascending })
}

#[derive(Debug, Clone, PartialEq)]
enum TokKind {
    /// A bare word: keyword, entity-prefixed key, attribute.
    Word(String),
    /// `backticks` or "double quotes": a key, or (double) a string value.
    Quoted {
        text: String,
        double: bool,
    },
    /// 'single quotes': a string value.
    Str(String),
    Num(f64),
    Op(CmpOp),
    LParen,
    RParen,
    Comma,
}

impl TokKind {
    fn describe(&self) -> String {
        match self {
            TokKind::Word(w) => format!("`{w}`"),
            TokKind::Quoted { text, .. } => format!("quoted `{text}`"),
            TokKind::Str(s) => format!("string '{s}'"),
            TokKind::Num(n) => format!("number {n}"),
            TokKind::Op(op) => format!("`{}`", op.sql()),
            TokKind::LParen => "`(`".to_owned(),
            TokKind::RParen => "`)`".to_owned(),
            TokKind::Comma => "`,`".to_owned(),
        }
    }
}

#[derive(Debug, Clone)]
struct Tok {
    kind: TokKind,
    /// Character offset of the token's first character.
    pos: usize,
}

fn lex(input: &str) -> Result<Vec<Tok>, QueryError> {
    // Bytes bound characters from above: a cheap test first.
    if input.len() > MAX_QUERY_CHARS && input.chars().count() > MAX_QUERY_CHARS {
        return Err(QueryError {
            position: MAX_QUERY_CHARS,
            message: format!(
                "the query is longer than {MAX_QUERY_CHARS} characters; shorten it \
                 (a long IN list can often be a LIKE pattern or a tag)"
            ),
        });
    }
    let chars: Vec<char> = input.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let kind = match c {
            '(' => {
                i += 1;
                TokKind::LParen
            }
            ')' => {
                i += 1;
                TokKind::RParen
            }
            ',' => {
                i += 1;
                TokKind::Comma
            }
            '=' => {
                i += if chars.get(i + 1) == Some(&'=') { 2 } else { 1 };
                TokKind::Op(CmpOp::Eq)
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                i += 2;
                TokKind::Op(CmpOp::Ne)
            }
            '<' => match chars.get(i + 1) {
                Some('=') => {
                    i += 2;
                    TokKind::Op(CmpOp::Le)
                }
                Some('>') => {
                    i += 2;
                    TokKind::Op(CmpOp::Ne)
                }
                _ => {
                    i += 1;
                    TokKind::Op(CmpOp::Lt)
                }
            },
            '>' => {
                if chars.get(i + 1) == Some(&'=') {
                    i += 2;
                    TokKind::Op(CmpOp::Ge)
                } else {
                    i += 1;
                    TokKind::Op(CmpOp::Gt)
                }
            }
            '\'' | '"' | '`' => {
                let quote = c;
                let mut text = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(QueryError {
                                position: start,
                                message: format!("unterminated {quote}…{quote}; close the quote"),
                            });
                        }
                        // A doubled quote stands for the quote itself.
                        Some(&q) if q == quote && chars.get(i + 1) == Some(&quote) => {
                            text.push(quote);
                            i += 2;
                        }
                        Some(&q) if q == quote => {
                            i += 1;
                            break;
                        }
                        Some(&other) => {
                            text.push(other);
                            i += 1;
                        }
                    }
                }
                match quote {
                    '\'' => TokKind::Str(text),
                    '"' => TokKind::Quoted { text, double: true },
                    _ => TokKind::Quoted {
                        text,
                        double: false,
                    },
                }
            }
            c if c.is_ascii_digit()
                || ((c == '-' || c == '+' || c == '.') && next_starts_number(&chars, i)) =>
            {
                let mut j = i + 1;
                while j < chars.len()
                    && (chars[j].is_ascii_digit()
                        || chars[j] == '.'
                        || chars[j] == 'e'
                        || chars[j] == 'E'
                        || ((chars[j] == '-' || chars[j] == '+')
                            && matches!(chars[j - 1], 'e' | 'E')))
                {
                    j += 1;
                }
                let text: String = chars[i..j].iter().collect();
                let value: f64 = text.parse().map_err(|_| QueryError {
                    position: start,
                    message: format!("`{text}` is not a number"),
                })?;
                i = j;
                TokKind::Num(value)
            }
            c if is_word_char(c) => {
                let mut j = i + 1;
                while j < chars.len() && (is_word_char(chars[j]) || chars[j] == '-') {
                    j += 1;
                }
                let text: String = chars[i..j].iter().collect();
                i = j;
                TokKind::Word(text)
            }
            other => {
                return Err(QueryError {
                    position: start,
                    message: format!("unexpected character `{other}`"),
                });
            }
        };
        out.push(Tok { kind, pos: start });
    }
    Ok(out)
}

fn next_starts_number(chars: &[char], i: usize) -> bool {
    match chars.get(i + 1) {
        Some(c) if c.is_ascii_digit() => true,
        Some('.') => chars.get(i + 2).is_some_and(char::is_ascii_digit),
        _ => false,
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '.' | ':' | '/')
}

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
    scope: Scope,
    end: usize,
    /// Parentheses and `NOT`s open around the current token.
    depth: usize,
    comparisons: usize,
}

impl Parser {
    fn new(tokens: Vec<Tok>, scope: Scope, input: &str) -> Parser {
        Parser {
            tokens,
            pos: 0,
            scope,
            end: input.chars().count(),
            depth: 0,
            comparisons: 0,
        }
    }

    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    fn peek_keyword(&self) -> Option<String> {
        match self.peek() {
            Some(Tok {
                kind: TokKind::Word(w),
                ..
            }) => Some(w.to_ascii_uppercase()),
            _ => None,
        }
    }

    fn here(&self) -> usize {
        self.peek().map(|t| t.pos).unwrap_or(self.end)
    }

    fn error_at(&self, position: usize, message: impl Into<String>) -> QueryError {
        QueryError {
            position,
            message: message.into(),
        }
    }

    fn eat_keyword(&mut self, word: &str) -> bool {
        if self.peek_keyword().as_deref() == Some(word) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_keyword(&mut self, word: &str, context: &str) -> Result<(), QueryError> {
        if self.eat_keyword(word) {
            Ok(())
        } else {
            Err(self.error_at(self.here(), format!("expected {word} {context}")))
        }
    }

    fn or(&mut self) -> Result<Expr, QueryError> {
        let mut parts = vec![self.and()?];
        while self.eat_keyword("OR") {
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Expr::Or(parts)
        })
    }

    fn and(&mut self) -> Result<Expr, QueryError> {
        let mut parts = vec![self.unary()?];
        while self.eat_keyword("AND") {
            parts.push(self.unary()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Expr::And(parts)
        })
    }

    fn unary(&mut self) -> Result<Expr, QueryError> {
        if self.depth >= MAX_NESTING {
            return Err(self.error_at(
                self.here(),
                format!(
                    "the query nests parentheses and NOTs more than {MAX_NESTING} deep; \
                     flatten it (AND and OR need no parentheses of their own)"
                ),
            ));
        }
        self.depth += 1;
        let expr = self.unary_inner();
        self.depth -= 1;
        expr
    }

    fn unary_inner(&mut self) -> Result<Expr, QueryError> {
        if self.eat_keyword("NOT") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if let Some(Tok {
            kind: TokKind::LParen,
            pos,
        }) = self.peek().cloned()
        {
            self.pos += 1;
            let inner = self.or()?;
            match self.peek() {
                Some(Tok {
                    kind: TokKind::RParen,
                    ..
                }) => {
                    self.pos += 1;
                    Ok(inner)
                }
                _ => Err(self.error_at(
                    self.here(),
                    format!("the `(` at position {pos} is not closed; add `)`"),
                )),
            }
        } else {
            self.comparison()
        }
    }

    fn field(&mut self) -> Result<Field, QueryError> {
        let Some(tok) = self.peek().cloned() else {
            return Err(self.error_at(
                self.end,
                "expected a field such as metrics.loss, params.lr, tags.team or status",
            ));
        };
        self.pos += 1;
        let (prefix, key, key_pos) = match tok.kind {
            TokKind::Word(word) => match word.split_once('.') {
                Some((prefix, "")) => {
                    // `tags.` followed by a quoted key: tags.`my key`, tags."my key"
                    match self.peek().cloned() {
                        Some(Tok {
                            kind: TokKind::Quoted { text, .. },
                            pos,
                        }) if pos == tok.pos + word.chars().count() => {
                            self.pos += 1;
                            (Some(prefix.to_owned()), text, pos)
                        }
                        _ => {
                            return Err(self
                                .error_at(tok.pos, format!("`{word}` lacks a key after the dot")));
                        }
                    }
                }
                Some((prefix, key)) => {
                    let mut key = key.to_owned();
                    // span.attributes.`my key`: the rest of the key quoted.
                    if key.ends_with('.')
                        && let Some(Tok {
                            kind: TokKind::Quoted { text, .. },
                            pos,
                        }) = self.peek().cloned()
                        && pos == tok.pos + word.chars().count()
                    {
                        self.pos += 1;
                        key.push_str(&text);
                    }
                    (
                        Some(prefix.to_owned()),
                        key,
                        tok.pos + prefix.chars().count() + 1,
                    )
                }
                None => (None, word, tok.pos),
            },
            TokKind::Quoted { text, .. } => (None, text, tok.pos),
            other => {
                return Err(self.error_at(
                    tok.pos,
                    format!(
                        "expected a field such as metrics.loss, params.lr or status, found {}",
                        other.describe()
                    ),
                ));
            }
        };
        let entity = prefix.as_deref().map(str::to_ascii_lowercase);
        let field = match (self.scope, entity.as_deref()) {
            (Scope::Runs | Scope::LoggedModels, Some("metric" | "metrics")) => Field::Metric(key),
            (
                Scope::Runs | Scope::LoggedModels,
                Some("param" | "params" | "parameter" | "parameters"),
            ) => Field::Param(key),
            (_, Some("tag" | "tags")) => Field::Tag(key),
            // Request metadata lives in a key-value table as params do.
            (Scope::Traces, Some("metadata" | "request_metadata")) => Field::Param(key),
            (Scope::Traces, Some("feedback")) => Field::Assessment(AssessmentKind::Feedback, key),
            (Scope::Runs, Some("dataset" | "datasets")) => {
                Field::Dataset(match key.to_ascii_lowercase().as_str() {
                    "name" => DatasetKey::Name,
                    "digest" => DatasetKey::Digest,
                    "context" => DatasetKey::Context,
                    _ => {
                        return Err(self.error_at(
                            key_pos,
                            format!(
                                "unknown dataset key `{key}`; use datasets.name, datasets.digest or datasets.context"
                            ),
                        ));
                    }
                })
            }
            (Scope::Traces, Some("expectation")) => {
                Field::Assessment(AssessmentKind::Expectation, key)
            }
            (Scope::Traces, Some("span" | "spans")) => {
                Field::Span(self.span_key(&key, key_pos)?, false)
            }
            (Scope::Traces, Some("trace")) if key.eq_ignore_ascii_case("text") => Field::TraceText,
            (Scope::Traces, Some("trace")) => match Attribute::lookup(self.scope, &key) {
                Some(attr) => Field::Attr(attr),
                None => {
                    return Err(self.error_at(
                        key_pos,
                        format!(
                            "unknown attribute `{key}`; use one of {}",
                            Attribute::valid_names(self.scope)
                        ),
                    ));
                }
            },
            (_, None | Some("attribute" | "attributes" | "attr" | "run")) => {
                match Attribute::lookup(self.scope, &key) {
                    Some(attr) => Field::Attr(attr),
                    None => {
                        return Err(self.error_at(
                            key_pos,
                            format!(
                                "unknown attribute `{key}`; use one of {} or prefix metrics., params. or tags.",
                                Attribute::valid_names(self.scope)
                            ),
                        ));
                    }
                }
            }
            (_, Some(other)) => {
                let valid = match self.scope {
                    Scope::Runs => "metrics, params, tags, datasets, attributes",
                    Scope::LoggedModels => "metrics, params, tags, attributes",
                    Scope::Experiments
                    | Scope::RegisteredModels
                    | Scope::ModelVersions
                    | Scope::EvaluationDatasets => "tags, attributes",
                    Scope::Traces => {
                        "tags, metadata, feedback, expectation, span, trace, attributes"
                    }
                };
                return Err(self.error_at(
                    tok.pos,
                    format!("unknown entity `{other}`; use one of {valid}"),
                ));
            }
        };
        if key_is_empty(&field) {
            return Err(self.error_at(key_pos, "empty key"));
        }
        Ok(field)
    }

    /// The key after `span.`: name, type, status, content or
    /// `attributes.<key>` (a key with dots may follow as it is).
    fn span_key(&self, key: &str, key_pos: usize) -> Result<SpanKey, QueryError> {
        let (head, rest) = match key.split_once('.') {
            Some((head, rest)) => (head, Some(rest)),
            None => (key, None),
        };
        Ok(match (head.to_ascii_lowercase().as_str(), rest) {
            ("name", None) => SpanKey::Name,
            ("type", None) => SpanKey::Type,
            ("status", None) => SpanKey::Status,
            ("content", None) => SpanKey::Content,
            ("attributes" | "attribute", Some(name)) if !name.is_empty() => {
                SpanKey::Attribute(name.to_owned())
            }
            _ => {
                return Err(self.error_at(
                    key_pos,
                    format!(
                        "unknown span field `{key}`; use span.name, span.type, span.status, span.content or span.attributes.<key>"
                    ),
                ));
            }
        })
    }

    fn comparison(&mut self) -> Result<Expr, QueryError> {
        let field_pos = self.here();
        self.comparisons += 1;
        if self.comparisons > MAX_COMPARISONS {
            return Err(self.error_at(
                field_pos,
                format!(
                    "the query holds more than {MAX_COMPARISONS} comparisons; \
                     use IN (…) for lists of values"
                ),
            ));
        }
        let field = self.field()?;
        let op_pos = self.here();
        let negated = self.eat_keyword("NOT");
        let predicate = match self.peek().cloned() {
            Some(Tok {
                kind: TokKind::Op(op),
                ..
            }) if !negated => {
                self.pos += 1;
                let value = self.literal()?;
                Predicate::Cmp(op, value)
            }
            Some(Tok {
                kind: TokKind::Word(w),
                ..
            }) => match w.to_ascii_uppercase().as_str() {
                "IN" => {
                    self.pos += 1;
                    Predicate::In(self.list()?)
                }
                "LIKE" | "ILIKE" => {
                    self.pos += 1;
                    let pattern_pos = self.here();
                    match self.literal()? {
                        Literal::Str(s) if w.eq_ignore_ascii_case("LIKE") => Predicate::Like(s),
                        Literal::Str(s) => Predicate::ILike(s),
                        Literal::Num(_) => {
                            return Err(self.error_at(
                                pattern_pos,
                                "LIKE takes a quoted pattern such as 'resnet%'",
                            ));
                        }
                    }
                }
                "BETWEEN" => {
                    self.pos += 1;
                    let low = self.literal()?;
                    self.expect_keyword("AND", "between the two ends of BETWEEN")?;
                    let high = self.literal()?;
                    Predicate::Between(low, high)
                }
                "IS" if !negated => {
                    self.pos += 1;
                    let not = self.eat_keyword("NOT");
                    self.expect_keyword("NULL", "after IS")?;
                    let test = Expr::Test(field.clone(), Predicate::IsNull);
                    check(&field, &Predicate::IsNull, field_pos)?;
                    return Ok(if not { Expr::Not(Box::new(test)) } else { test });
                }
                _ => return Err(self.error_at(op_pos, expected_operator(&w))),
            },
            Some(tok) => {
                return Err(self.error_at(tok.pos, expected_operator(&tok.kind.describe())));
            }
            None => {
                return Err(self.error_at(
                    self.end,
                    "expected an operator such as =, <, IN or LIKE after the field",
                ));
            }
        };
        // As in MLflow, `=` on the tag the client writes of a trace's
        // prompts is searched through its links.
        let field = match (&field, &predicate) {
            (Field::Tag(tag), Predicate::Cmp(CmpOp::Eq, _))
                if self.scope == Scope::Traces && tag == "mlflow.linkedPrompts" =>
            {
                Field::Attr(Attribute::Prompt)
            }
            _ => field,
        };
        check(&field, &predicate, op_pos)?;
        // `span.type NOT IN (…)` is a span of another type, as in MLflow.
        if let (Field::Span(key, false), true) = (&field, negated) {
            return Ok(Expr::Test(Field::Span(key.clone(), true), predicate));
        }
        let test = Expr::Test(field, predicate);
        Ok(if negated {
            Expr::Not(Box::new(test))
        } else {
            test
        })
    }

    fn literal(&mut self) -> Result<Literal, QueryError> {
        match self.peek().cloned() {
            Some(Tok {
                kind: TokKind::Num(n),
                ..
            }) => {
                self.pos += 1;
                Ok(Literal::Num(n))
            }
            Some(Tok {
                kind: TokKind::Str(s),
                ..
            })
            | Some(Tok {
                kind:
                    TokKind::Quoted {
                        text: s,
                        double: true,
                    },
                ..
            }) => {
                self.pos += 1;
                Ok(Literal::Str(s))
            }
            Some(tok) => Err(self.error_at(
                tok.pos,
                format!(
                    "expected a number or a 'quoted string', found {}",
                    tok.kind.describe()
                ),
            )),
            None => Err(self.error_at(
                self.end,
                "expected a number or a 'quoted string' at the end",
            )),
        }
    }

    fn list(&mut self) -> Result<Vec<Literal>, QueryError> {
        match self.peek() {
            Some(Tok {
                kind: TokKind::LParen,
                ..
            }) => self.pos += 1,
            _ => {
                return Err(self.error_at(
                    self.here(),
                    "expected `(` to open the list, as in IN ('a', 'b')",
                ));
            }
        }
        let mut values = vec![self.literal()?];
        loop {
            match self.peek() {
                Some(Tok {
                    kind: TokKind::Comma,
                    ..
                }) => {
                    self.pos += 1;
                    values.push(self.literal()?);
                }
                Some(Tok {
                    kind: TokKind::RParen,
                    ..
                }) => {
                    self.pos += 1;
                    return Ok(values);
                }
                _ => return Err(self.error_at(self.here(), "expected `,` or `)` in the list")),
            }
        }
    }
}

fn key_is_empty(field: &Field) -> bool {
    match field {
        Field::Metric(k) | Field::Param(k) | Field::Tag(k) | Field::Assessment(_, k) => {
            k.is_empty()
        }
        Field::Span(SpanKey::Attribute(k), _) => k.is_empty(),
        Field::Attr(_) | Field::Dataset(_) | Field::Span(..) | Field::TraceText => false,
    }
}

fn expected_operator(found: &str) -> String {
    format!(
        "expected an operator (=, !=, <, <=, >, >=, IN, NOT IN, LIKE, ILIKE, BETWEEN, IS NULL), found {found}"
    )
}

/// Type rules: metrics and time attributes compare with numbers; tags and
/// text attributes with strings; params with either (numbers compare numerically).
fn check(field: &Field, predicate: &Predicate, position: usize) -> Result<(), QueryError> {
    if let Field::Assessment(..) = field {
        return check_assessment(field, predicate, position);
    }
    if let Field::Dataset(_) = field {
        return check_dataset(field, predicate, position);
    }
    if let Field::Span(..) | Field::TraceText = field {
        return check_span(field, predicate, position);
    }
    if *field == Field::Attr(Attribute::Prompt) {
        return match predicate {
            Predicate::Cmp(CmpOp::Eq, Literal::Str(s)) if s.matches('/').count() == 1 => Ok(()),
            _ => Err(QueryError {
                position,
                message: "prompt takes = and a prompt version: prompt = \"name/version\""
                    .to_owned(),
            }),
        };
    }
    let numeric_only = match field {
        Field::Metric(_) => true,
        Field::Attr(a) => a.is_numeric(),
        _ => false,
    };
    let string_only = match field {
        Field::Tag(_) => true,
        Field::Attr(a) => !a.is_numeric(),
        _ => false,
    };
    let literals: Vec<&Literal> = match predicate {
        Predicate::Cmp(_, v) => vec![v],
        Predicate::Between(a, b) => vec![a, b],
        Predicate::In(vs) => vs.iter().collect(),
        Predicate::Like(_) | Predicate::ILike(_) => {
            if numeric_only {
                return Err(QueryError {
                    position,
                    message: format!("{} is numeric; LIKE applies to text", describe(field)),
                });
            }
            vec![]
        }
        Predicate::IsNull => vec![],
    };
    for literal in literals {
        match literal {
            Literal::Str(s) if numeric_only => {
                return Err(QueryError {
                    position,
                    message: format!(
                        "{} is numeric; compare it with a number, not '{s}'",
                        describe(field)
                    ),
                });
            }
            Literal::Num(n) if string_only => {
                return Err(QueryError {
                    position,
                    message: format!("{} is text; quote the value, as in '{n}'", describe(field)),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// As MLflow: a dataset's name, digest or context is matched as text with
/// =, !=, IN, NOT IN, LIKE and ILIKE.
fn check_dataset(field: &Field, predicate: &Predicate, position: usize) -> Result<(), QueryError> {
    let fail = |message: String| Err(QueryError { position, message });
    let what = describe(field);
    match predicate {
        Predicate::Cmp(CmpOp::Eq | CmpOp::Ne, Literal::Str(_))
        | Predicate::Like(_)
        | Predicate::ILike(_) => Ok(()),
        Predicate::In(values) if values.iter().all(|v| matches!(v, Literal::Str(_))) => Ok(()),
        Predicate::Cmp(_, Literal::Num(n)) => {
            fail(format!("{what} is text; quote the value, as in '{n}'"))
        }
        Predicate::In(_) => fail(format!("{what} is text; quote every value in the list")),
        _ => fail(format!(
            "{what} takes =, !=, IN, NOT IN, LIKE or ILIKE and a quoted value"
        )),
    }
}

/// As MLflow: a span's name, type, status or attribute is matched as text
/// with =, !=, IN, NOT IN, LIKE and ILIKE; its content and the trace's text
/// with LIKE and ILIKE alone.
fn check_span(field: &Field, predicate: &Predicate, position: usize) -> Result<(), QueryError> {
    let what = describe(field);
    if let Field::TraceText | Field::Span(SpanKey::Content, _) = field {
        return match predicate {
            Predicate::Like(_) | Predicate::ILike(_) => Ok(()),
            _ => Err(QueryError {
                position,
                message: format!(
                    "{what} takes LIKE or ILIKE and a quoted pattern, as in {what} LIKE '%timeout%'"
                ),
            }),
        };
    }
    check_dataset(field, predicate, position)
}

/// As MLflow: an assessment's value is matched as text with = and !=
/// (`feedback.correct = 'true'`), and compared as a number with <, <=, >
/// and >= (`feedback.score >= 0.5`).
fn check_assessment(
    field: &Field,
    predicate: &Predicate,
    position: usize,
) -> Result<(), QueryError> {
    let what = describe(field);
    let fail = |message: String| Err(QueryError { position, message });
    match predicate {
        Predicate::IsNull => Ok(()),
        Predicate::Cmp(CmpOp::Eq | CmpOp::Ne, Literal::Str(_)) => Ok(()),
        Predicate::Cmp(CmpOp::Eq | CmpOp::Ne, Literal::Num(n)) => fail(format!(
            "{what} is matched as text with = and !=; quote the value, as in '{n}'"
        )),
        Predicate::Cmp(_, Literal::Num(_)) => Ok(()),
        Predicate::Cmp(_, Literal::Str(s)) => fail(format!(
            "{what} compares with <, <=, > and >= as a number, not '{s}'"
        )),
        _ => fail(format!("{what} takes =, !=, <, <=, >, >= or IS NULL")),
    }
}

fn describe(field: &Field) -> String {
    match field {
        Field::Metric(k) => format!("metrics.{k}"),
        Field::Param(k) => format!("params.{k}"),
        Field::Tag(k) => format!("tags.{k}"),
        Field::Attr(a) => a.name().to_owned(),
        Field::Assessment(kind, k) => format!("{}.{k}", kind.name()),
        Field::Dataset(key) => format!("datasets.{}", key.name()),
        Field::Span(key, _) => key.describe(),
        Field::TraceText => "trace.text".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn plain_words_search_run_names() {
        use super::name_search;
        assert_eq!(
            name_search(" trial-042 ").as_deref(),
            Some("attributes.run_name ILIKE '%trial-042%'")
        );
        assert_eq!(
            name_search("resnet sweep").as_deref(),
            Some("attributes.run_name ILIKE '%resnet sweep%'")
        );
        for filter in [
            "",
            "metrics.loss < 1",
            "metrics.loss",
            "lr = 1",
            "a and b",
            "x'",
        ] {
            assert_eq!(name_search(filter), None, "{filter}");
        }
        // What it makes parses, and finds the name.
        let made = name_search("trial-042").unwrap();
        assert!(
            super::parse_filter(&made, super::Scope::Runs)
                .unwrap()
                .is_some()
        );
    }
    use super::*;

    fn runs(q: &str) -> Expr {
        parse_filter(q, Scope::Runs).unwrap().unwrap()
    }

    fn err(q: &str) -> QueryError {
        parse_filter(q, Scope::Runs).unwrap_err()
    }

    fn metric(key: &str, op: CmpOp, n: f64) -> Expr {
        Expr::Test(
            Field::Metric(key.into()),
            Predicate::Cmp(op, Literal::Num(n)),
        )
    }

    #[test]
    fn mlflow_filters_parse() {
        assert_eq!(
            runs("metrics.rmse < 1 and params.model = 'tree'"),
            Expr::And(vec![
                metric("rmse", CmpOp::Lt, 1.0),
                Expr::Test(
                    Field::Param("model".into()),
                    Predicate::Cmp(CmpOp::Eq, Literal::Str("tree".into()))
                ),
            ])
        );
        assert_eq!(
            runs("tags.mlflow.source.type = 'LOCAL'"),
            Expr::Test(
                Field::Tag("mlflow.source.type".into()),
                Predicate::Cmp(CmpOp::Eq, Literal::Str("LOCAL".into()))
            )
        );
        assert_eq!(
            runs("attributes.status = \"FINISHED\""),
            Expr::Test(
                Field::Attr(Attribute::Status),
                Predicate::Cmp(CmpOp::Eq, Literal::Str("FINISHED".into()))
            )
        );
        assert_eq!(
            runs("tags.`my key` IS NULL"),
            Expr::Test(Field::Tag("my key".into()), Predicate::IsNull)
        );
        assert_eq!(
            runs("tags.\"my key\" IS NOT NULL"),
            Expr::Not(Box::new(Expr::Test(
                Field::Tag("my key".into()),
                Predicate::IsNull
            )))
        );
        assert_eq!(
            runs("attributes.`Run Name` LIKE 'exp%'"),
            Expr::Test(
                Field::Attr(Attribute::RunName),
                Predicate::Like("exp%".into())
            )
        );
        assert_eq!(
            runs("created >= 1700000000000"),
            Expr::Test(
                Field::Attr(Attribute::StartTime),
                Predicate::Cmp(CmpOp::Ge, Literal::Num(1.7e12))
            )
        );
        assert_eq!(
            runs("run_id IN ('a', 'b')"),
            Expr::Test(
                Field::Attr(Attribute::RunId),
                Predicate::In(vec![Literal::Str("a".into()), Literal::Str("b".into())])
            )
        );
        assert_eq!(
            runs("metrics.`a-b` != -1.5e-3"),
            metric("a-b", CmpOp::Ne, -1.5e-3)
        );
        assert_eq!(
            runs("metrics.system/gpu_0_util > 50"),
            metric("system/gpu_0_util", CmpOp::Gt, 50.0)
        );
        assert!(parse_filter("   ", Scope::Runs).unwrap().is_none());
    }

    #[test]
    fn runs_are_filtered_by_their_datasets_as_text_alone() {
        assert_eq!(
            runs("datasets.name = 'train'"),
            Expr::Test(
                Field::Dataset(DatasetKey::Name),
                Predicate::Cmp(CmpOp::Eq, Literal::Str("train".into()))
            )
        );
        assert!(matches!(
            runs("dataset.context IN ('eval')"),
            Expr::Test(Field::Dataset(DatasetKey::Context), Predicate::In(_))
        ));
        assert!(
            err("datasets.size = 'x'")
                .message
                .contains("unknown dataset key `size`")
        );
        assert!(err("datasets.name = 3").message.contains("quote the value"));
        assert!(err("datasets.digest > 'a'").message.contains("takes =, !="));
        assert!(err("datasets.name IS NULL").message.contains("takes =, !="));
        let order = parse_order_by("datasets.name", Scope::Runs).unwrap_err();
        assert!(
            order
                .message
                .contains("cannot be ordered by their datasets")
        );
        let models = parse_filter("datasets.name = 'a'", Scope::LoggedModels).unwrap_err();
        assert!(models.message.contains("unknown entity `datasets`"));
    }

    #[test]
    fn or_not_parentheses_and_ranges() {
        let q = runs(
            "(params.lr < 0.01 OR params.lr > 0.1) and not tags.team in ('a','b') AND metrics.acc BETWEEN 0.8 AND 0.9",
        );
        let Expr::And(parts) = q else {
            panic!("top level is AND")
        };
        assert_eq!(parts.len(), 3);
        assert!(matches!(&parts[0], Expr::Or(or) if or.len() == 2));
        assert!(matches!(&parts[1], Expr::Not(_)));
        assert_eq!(
            parts[2],
            Expr::Test(
                Field::Metric("acc".into()),
                Predicate::Between(Literal::Num(0.8), Literal::Num(0.9))
            )
        );
        // AND binds tighter than OR.
        let Expr::Or(parts) = runs("metrics.a > 1 or metrics.b > 2 and metrics.c > 3") else {
            panic!("top level is OR")
        };
        assert!(matches!(&parts[1], Expr::And(_)));
        assert!(matches!(runs("status NOT IN ('FAILED')"), Expr::Not(_)));
        assert!(matches!(runs("params.model NOT LIKE 'res%'"), Expr::Not(_)));
    }

    #[test]
    fn errors_point_at_the_problem() {
        let e = err("metrics.acc > 'high'");
        assert_eq!(e.position, 12);
        assert!(e.message.contains("numeric"), "{e}");
        let e = err("metrics.acc >");
        assert_eq!(e.position, 13);
        let e = err("foo = 'x'");
        assert_eq!(e.position, 0);
        assert!(e.message.contains("unknown attribute `foo`"), "{e}");
        let e = err("metrics.acc > 1 and (params.lr = '0.1'");
        assert!(e.message.contains("not closed"), "{e}");
        assert_eq!(e.position, 38);
        let e = err("tags.team = 'a");
        assert_eq!(e.position, 12);
        assert!(e.message.contains("unterminated"), "{e}");
        let e = err("tags.team = 5");
        assert!(e.message.contains("quote the value"), "{e}");
        let e = err("bogus.x = 1");
        assert!(e.message.contains("unknown entity `bogus`"), "{e}");
        let e = err("metrics.a > 1 metrics.b > 2");
        assert_eq!(e.position, 14);
        let e = err("metrics.a ~ 1");
        assert_eq!(e.position, 10);
        assert_eq!(err("metrics.a > 1 or").position, 16);
    }

    #[test]
    fn hostile_queries_are_refused_with_a_reason_not_a_crash() {
        // Deep enough to overflow any thread's stack without the bound.
        for deep in [
            "(".repeat(100_000) + "metrics.a > 1" + &")".repeat(100_000),
            "NOT ".repeat(30_000) + "metrics.a > 1",
        ] {
            let error = parse_filter(&deep, Scope::Runs).unwrap_err();
            assert!(error.message.contains("longer than"), "{error}");
        }
        let nested = "(".repeat(MAX_NESTING + 1) + "metrics.a > 1" + &")".repeat(MAX_NESTING + 1);
        let error = err(&nested);
        assert!(error.message.contains("nests"), "{error}");
        assert_eq!(error.position, MAX_NESTING);
        let not = "NOT ".repeat(MAX_NESTING + 1) + "metrics.a > 1";
        assert!(err(&not).message.contains("nests"));
        // Just inside the bound still parses.
        let fits = "(".repeat(MAX_NESTING - 1) + "metrics.a > 1" + &")".repeat(MAX_NESTING - 1);
        assert_eq!(runs(&fits), metric("a", CmpOp::Gt, 1.0));
        let many = vec!["metrics.a > 1"; MAX_COMPARISONS + 1].join(" OR ");
        assert!(err(&many).message.contains("comparisons"));
        let enough = vec!["metrics.a > 1"; MAX_COMPARISONS].join(" OR ");
        assert!(parse_filter(&enough, Scope::Runs).is_ok());
        let long = format!("tags.x = '{}'", "a".repeat(MAX_QUERY_CHARS));
        assert!(err(&long).message.contains("longer than"));
        assert!(parse_order_by(&long, Scope::Runs).is_err());
    }

    #[test]
    fn experiment_scope_has_its_own_attributes() {
        let q = parse_filter(
            "name LIKE 'mnist%' and tags.team = 'vision'",
            Scope::Experiments,
        )
        .unwrap();
        assert!(q.is_some());
        assert!(parse_filter("metrics.a > 1", Scope::Experiments).is_err());
        assert!(parse_filter("status = 'RUNNING'", Scope::Experiments).is_err());
        assert!(parse_filter("creation_time > 5", Scope::Experiments).is_ok());
    }

    #[test]
    fn order_by_parses() {
        assert_eq!(
            parse_order_by("metrics.acc DESC", Scope::Runs).unwrap(),
            OrderBy {
                field: Field::Metric("acc".into()),
                ascending: false
            }
        );
        assert_eq!(
            parse_order_by("attributes.start_time", Scope::Runs).unwrap(),
            OrderBy {
                field: Field::Attr(Attribute::StartTime),
                ascending: true
            }
        );
        assert_eq!(
            parse_order_by("params.`batch size` asc", Scope::Runs)
                .unwrap()
                .field,
            Field::Param("batch size".into())
        );
        assert!(parse_order_by("metrics.acc sideways", Scope::Runs).is_err());
        assert!(parse_order_by("name DESC", Scope::Experiments).is_ok());
    }

    #[test]
    fn traces_are_filtered_by_their_assessments_as_mlflow_does() {
        let traces = |q: &str| parse_filter(q, Scope::Traces);
        assert_eq!(
            traces("feedback.correct = 'true'").unwrap().unwrap(),
            Expr::Test(
                Field::Assessment(AssessmentKind::Feedback, "correct".into()),
                Predicate::Cmp(CmpOp::Eq, Literal::Str("true".into()))
            )
        );
        assert_eq!(
            traces("expectation.`expected answer` IS NOT NULL")
                .unwrap()
                .unwrap(),
            Expr::Not(Box::new(Expr::Test(
                Field::Assessment(AssessmentKind::Expectation, "expected answer".into()),
                Predicate::IsNull
            )))
        );
        assert!(traces("feedback.score >= 0.5").is_ok());
        let error = traces("feedback.score = 0.5").unwrap_err();
        assert!(
            error.message.contains("quote the value"),
            "{}",
            error.message
        );
        assert!(traces("feedback.score > 'high'").is_err());
        assert!(traces("feedback.score LIKE 'h%'").is_err());
        // Only traces have assessments.
        assert!(parse_filter("feedback.correct = 'true'", Scope::Runs).is_err());
        // The prompt versions a trace used: `=` and `name/version` only.
        let prompt = Expr::Test(
            Field::Attr(Attribute::Prompt),
            Predicate::Cmp(CmpOp::Eq, Literal::Str("greet/2".into())),
        );
        assert_eq!(
            traces("prompt = \"greet/2\"").unwrap(),
            Some(prompt.clone())
        );
        assert_eq!(
            traces("tags.`mlflow.linkedPrompts` = 'greet/2'").unwrap(),
            Some(prompt)
        );
        assert!(traces("prompt != 'greet/2'").is_err());
        // Other comparisons of the tag stay comparisons of its text.
        assert!(matches!(
            traces("tags.`mlflow.linkedPrompts` LIKE '%greet%'").unwrap(),
            Some(Expr::Test(Field::Tag(_), Predicate::Like(_)))
        ));
        assert!(traces("prompt = 'greet'").is_err());
        assert!(traces("prompt LIKE 'greet/%'").is_err());
        assert!(parse_filter("prompt = 'greet/2'", Scope::Runs).is_err());
    }
    #[test]
    fn traces_are_filtered_by_their_spans_as_mlflow_does() {
        let traces = |q: &str| parse_filter(q, Scope::Traces);
        let span = |key: SpanKey, not: bool, p: Predicate| Expr::Test(Field::Span(key, not), p);
        let s = |v: &str| Literal::Str(v.into());
        assert_eq!(
            traces("span.name = 'retrieve'").unwrap().unwrap(),
            span(
                SpanKey::Name,
                false,
                Predicate::Cmp(CmpOp::Eq, s("retrieve"))
            )
        );
        // An inline NOT asks for a span that is not so; NOT (…) for none.
        assert_eq!(
            traces("span.type NOT IN ('LLM', 'TOOL')").unwrap().unwrap(),
            span(
                SpanKey::Type,
                true,
                Predicate::In(vec![s("LLM"), s("TOOL")])
            )
        );
        assert_eq!(
            traces("NOT (span.status = 'ERROR')").unwrap().unwrap(),
            Expr::Not(Box::new(span(
                SpanKey::Status,
                false,
                Predicate::Cmp(CmpOp::Eq, s("ERROR"))
            )))
        );
        // Attribute keys keep their dots, bare or quoted.
        for q in [
            "span.attributes.similarity.threshold LIKE '%0.8%'",
            "span.attributes.`similarity.threshold` LIKE '%0.8%'",
        ] {
            assert_eq!(
                traces(q).unwrap().unwrap(),
                span(
                    SpanKey::Attribute("similarity.threshold".into()),
                    false,
                    Predicate::Like("%0.8%".into())
                ),
                "{q}"
            );
        }
        assert_eq!(
            traces("trace.text ILIKE '%timeout%'").unwrap().unwrap(),
            Expr::Test(Field::TraceText, Predicate::ILike("%timeout%".into()))
        );
        // What MLflow refuses, said with the fields there are.
        let error = traces("span.duration = '1000'").unwrap_err();
        assert!(error.message.contains("span.attributes.<key>"), "{error:?}");
        assert!(traces("span.attributes. = 'x'").is_err());
        assert!(
            traces("span.content = 'x'")
                .unwrap_err()
                .message
                .contains("LIKE")
        );
        assert!(traces("trace.text = 'x'").is_err());
        assert!(traces("span.name > 'a'").is_err());
        assert!(traces("span.name = 3").is_err());
        assert!(traces("span.name IS NULL").is_err());
        assert!(parse_filter("span.name = 'a'", Scope::Runs).is_err());
        assert!(parse_order_by("span.name", Scope::Traces).is_err());
    }
}
