//! Who is calling: the one place API requests are authenticated. Until
//! sign-in and API tokens exist (the identity issue), the server accepts
//! anonymous requests from its own machine only, and refuses any credential,
//! since none can be valid yet.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::mlflow::ApiError;

/// The caller of a request, put into the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Someone on the server's own machine, without credentials.
    LocalAnonymous,
}

/// A credential as clients send it: `Bearer` (MLFLOW_TRACKING_TOKEN) or
/// `Basic` (MLFLOW_TRACKING_USERNAME / PASSWORD).
#[derive(Debug, PartialEq, Eq)]
enum Credential {
    Bearer,
    Basic,
}

fn credential(headers: &HeaderMap) -> Result<Option<Credential>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("");
    let scheme = text.split_whitespace().next().unwrap_or("");
    if scheme.eq_ignore_ascii_case("bearer") {
        Ok(Some(Credential::Bearer))
    } else if scheme.eq_ignore_ascii_case("basic") {
        Ok(Some(Credential::Basic))
    } else {
        Err(unauthenticated(
            "the Authorization header must be `Bearer <token>` or `Basic <credentials>`",
        ))
    }
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        code: "UNAUTHENTICATED",
        message: message.to_owned(),
    }
}

pub fn authenticate(peer: SocketAddr, headers: &HeaderMap) -> Result<Principal, ApiError> {
    match credential(headers)? {
        Some(Credential::Bearer) => Err(unauthenticated(
            "unknown token: this server issues no API tokens yet; unset MLFLOW_TRACKING_TOKEN and call from the server's machine",
        )),
        Some(Credential::Basic) => Err(unauthenticated(
            "unknown user: this server has no accounts yet; unset MLFLOW_TRACKING_USERNAME/PASSWORD and call from the server's machine",
        )),
        None if peer.ip().is_loopback() => Ok(Principal::LocalAnonymous),
        None => Err(unauthenticated(
            "anonymous requests are accepted only from the server's own machine; sign-in is not configured",
        )),
    }
}

/// Middleware: authenticates, or answers 401 in MLflow's error form.
pub async fn require(
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut request: Request,
    next: Next,
) -> Response {
    match authenticate(peer, request.headers()) {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(err) => err.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        h
    }

    #[test]
    fn loopback_callers_without_credentials_are_local() {
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let local6: SocketAddr = "[::1]:5000".parse().unwrap();
        assert_eq!(
            authenticate(local, &headers(None)).unwrap(),
            Principal::LocalAnonymous
        );
        assert_eq!(
            authenticate(local6, &headers(None)).unwrap(),
            Principal::LocalAnonymous
        );
    }

    #[test]
    fn remote_anonymous_and_any_credential_are_refused() {
        let remote: SocketAddr = "10.1.2.3:5000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let err = authenticate(remote, &headers(None)).unwrap_err();
        assert_eq!(
            (err.status, err.code),
            (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED")
        );
        assert!(
            authenticate(local, &headers(Some("Bearer abc")))
                .unwrap_err()
                .message
                .contains("token")
        );
        assert!(
            authenticate(local, &headers(Some("Basic dTpw")))
                .unwrap_err()
                .message
                .contains("user")
        );
        assert!(authenticate(local, &headers(Some("Digest x"))).is_err());
    }
}
