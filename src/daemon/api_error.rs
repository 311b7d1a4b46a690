//! The errors the HTTP surface answers with, as `{"error": {"code": "...", "message":
//! "..."}}` (or, for a page a browser opens, as an HTML page): used by the router and
//! by every page and endpoint module.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
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

impl ApiError {
    /// The error as a page, for a route a browser opens (`/tickets/{id}`): the same
    /// status, the message in HTML with a link back to the dashboard (issue #52: a
    /// page never answers with raw JSON). The API routes keep the JSON envelope.
    pub(super) fn into_page(self) -> Response {
        let title = match self.code {
            "unknown_ticket" => "No such ticket",
            _ => self.status.canonical_reason().unwrap_or("Error"),
        };
        let view = serde_json::json!({
            "title": title,
            "message": self.message,
            "status": self.status.as_u16(),
            "code": self.code,
        });
        match super::pages::render("error.html", &view) {
            Ok(html) => (self.status, Html(html)).into_response(),
            Err(_) => self.into_response(),
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
