//! The errors the HTTP surface answers with, as `{"error": {"code": "...", "message":
//! "..."}}`: used by the router and by every page and endpoint module.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::Shared;

/// An error of the HTTP API, answered as `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with its HTTP status, a stable code and a message for a person.
    pub(super) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

/// 401: no bearer token, or not the right one.
pub(super) fn unauthorized() -> Response {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "bearer token required (Authorization: Bearer <token>)",
    )
    .into_response()
}

/// 503 for endpoints that need a pipeline before one could be built.
pub(super) fn no_pipeline(shared: &Shared) -> Response {
    let reason = shared
        .status()
        .not_ready
        .clone()
        .unwrap_or_else(|| "starting".to_string());
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_ready",
        format!("no pipeline yet: {reason}"),
    )
    .into_response()
}
