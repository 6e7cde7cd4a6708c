//! The error every server function returns, mapped once from the store's.

use serde::{Deserialize, Serialize};
use trainyard_domain::FieldError;

use leptos::server_fn::codec::JsonEncoding;
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum AppError {
    /// Input broke a rule; the field says where.
    #[error("{0}")]
    Invalid(FieldError),
    /// A form with several wrong fields (a job spec).
    #[error("{}", .0.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; "))]
    Fields(Vec<FieldError>),
    /// A run query that does not parse, with where it went wrong.
    #[error("{0}")]
    Query(trainyard_domain::query::QueryError),
    /// What was asked for does not exist.
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// It cannot be done at the moment; asked again later, it may be.
    #[error("{0}")]
    Unavailable(String),
    /// Something failed on the server; the details are in its log.
    #[error("{0}")]
    Internal(String),
    /// The call itself failed (network, encoding).
    #[error("{0}")]
    Call(ServerFnErrorErr),
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        AppError::Call(value)
    }
}

impl AppError {
    /// The HTTP status this error answers with: a refusal of the input 400,
    /// not found 404, not allowed 403, a clash 409, a failure 500, not at
    /// the moment 503.
    pub fn status(&self) -> u16 {
        match self {
            AppError::Invalid(_) | AppError::Fields(_) | AppError::Query(_) => 400,
            AppError::NotFound(_) => 404,
            AppError::Forbidden(_) => 403,
            AppError::Conflict(_) => 409,
            AppError::Internal(_) | AppError::Call(_) => 500,
            AppError::Unavailable(_) => 503,
        }
    }

    /// The field a form should mark, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            AppError::Invalid(e) => Some(&e.field),
            AppError::Fields(list) => list.first().map(|e| e.field.as_str()),
            _ => None,
        }
    }

    /// What is wrong with one field of a form.
    pub fn message_for(&self, field: &str) -> Option<String> {
        match self {
            AppError::Invalid(e) if e.field == field => Some(e.message.clone()),
            AppError::Fields(list) => list
                .iter()
                .find(|e| e.field == field)
                .map(|e| e.message.clone()),
            _ => None,
        }
    }
}

#[cfg(feature = "ssr")]
impl From<trainyard_store::StoreError> for AppError {
    /// Maps a store error, and sets the HTTP status of the server function's
    /// response to match (400, 409 or 500).
    fn from(err: trainyard_store::StoreError) -> Self {
        use http::StatusCode;
        use trainyard_store::StoreError;
        let (status, error) = match err {
            StoreError::Invalid(e) => (StatusCode::BAD_REQUEST, AppError::Invalid(e)),
            StoreError::NotFound(what) => (StatusCode::NOT_FOUND, AppError::NotFound(what)),
            StoreError::Rejected(why) => (
                StatusCode::BAD_REQUEST,
                AppError::Invalid(FieldError::new("request", why)),
            ),
            StoreError::Forbidden(why) => (StatusCode::FORBIDDEN, AppError::Forbidden(why)),
            StoreError::Unavailable(why) => {
                (StatusCode::SERVICE_UNAVAILABLE, AppError::Unavailable(why))
            }
            StoreError::Conflict { what } => (
                StatusCode::CONFLICT,
                AppError::Conflict(format!("{what} already exists; choose another name")),
            ),
            other => {
                tracing::error!(error = %other, "store error in a server function");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    AppError::Internal(
                        "the server could not read or write its database; try again, \
                         and tell an admin if it persists"
                            .to_owned(),
                    ),
                )
            }
        };
        set_error_status(status);
        error
    }
}

/// Whether this request is a form posted without JavaScript: a POST that
/// accepts HTML and names the page it came from, which the framework
/// answers with a redirect back to that page.
#[cfg(feature = "ssr")]
pub fn plain_form_post() -> bool {
    leptos::prelude::use_context::<http::request::Parts>().is_some_and(|parts| {
        parts.method == http::Method::POST
            && parts.headers.contains_key(http::header::REFERER)
            && parts
                .headers
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|accept| accept.contains("text/html"))
    })
}

/// Sets the status of a failed server function's response, or of the page
/// being rendered (400, 403, 404, …), except for a form posted without
/// JavaScript (a POST that accepts HTML and names the page it came from):
/// the framework answers that with a redirect back to the form, which then
/// shows the errors, and a browser does not follow a redirect whose status
/// is an error's.
#[cfg(feature = "ssr")]
pub fn set_error_status(status: http::StatusCode) {
    use leptos::prelude::use_context;
    if plain_form_post() {
        return;
    }
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(status);
    }
}

/// Marks the page being rendered as not found (404) when its resource finds
/// nothing: a page of no job, run or trace is still drawn, with its words
/// and the navigation, but says so in its status. Only a blocking resource
/// can set it, since the status leaves with the page's first bytes. Does
/// nothing in the browser.
pub fn page_not_found() {
    #[cfg(feature = "ssr")]
    set_error_status(http::StatusCode::NOT_FOUND);
}

#[cfg(feature = "ssr")]
impl From<trainyard_jobs::SubmitError> for AppError {
    fn from(err: trainyard_jobs::SubmitError) -> Self {
        match err {
            trainyard_jobs::SubmitError::Invalid(fields) => {
                set_error_status(http::StatusCode::BAD_REQUEST);
                AppError::Fields(fields)
            }
            trainyard_jobs::SubmitError::Store(e) => e.into(),
        }
    }
}
