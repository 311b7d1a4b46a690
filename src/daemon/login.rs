//! Who may open the dashboard's ticket pages and run logs when `http.token_env` is set:
//! a request with the bearer token, or a browser that logged in with it once
//! (`POST /login` sets an HttpOnly, SameSite=Strict session cookie derived from the token;
//! the token itself never goes into a URL or a cookie).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Form;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::Shared;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "sortie_session";

/// What the session cookie's value is derived from, besides the token: a new token
/// (or a new version of this text) logs every browser out.
const SESSION_CONTEXT: &[u8] = b"sortie dashboard session v1";

/// The configured bearer token: `None` when `http.token_env` is not set (everything
/// open), `Some(None)` when it names a variable that is not set (everything refused).
fn configured_token(shared: &Shared) -> Option<Option<String>> {
    let var = shared.config().http.token_env.clone()?;
    Some(std::env::var(&var).ok().filter(|t| !t.is_empty()))
}

/// The session cookie's value for `token`: hex HMAC-SHA256 of a fixed text under it.
fn session_value(token: &str) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(SESSION_CONTEXT);
    hex::encode(mac.finalize().into_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `headers` carry `Authorization: Bearer <token>`.
fn has_bearer(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
}

/// Whether `headers` carry the session cookie of `token`.
fn has_session(headers: &HeaderMap, token: &str) -> bool {
    let want = session_value(token);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(name, value)| {
            name == SESSION_COOKIE && constant_time_eq(value.as_bytes(), want.as_bytes())
        })
}

/// Whether a request may change something (`POST /api/v1/...`): no token configured,
/// or the right bearer token. A cookie is not enough here.
pub(super) fn may_act(shared: &Shared, headers: &HeaderMap) -> bool {
    match configured_token(shared) {
        None => true,
        Some(None) => false,
        Some(Some(token)) => has_bearer(headers, &token),
    }
}

/// Whether a request may read ticket pages and run logs: no token configured, the
/// right bearer token, or the session cookie of a browser that logged in.
pub(super) fn may_view(shared: &Shared, headers: &HeaderMap) -> bool {
    match configured_token(shared) {
        None => true,
        Some(None) => false,
        Some(Some(token)) => has_bearer(headers, &token) || has_session(headers, &token),
    }
}

/// Whether the daemon asks for a token at all (the dashboard then offers to log in).
pub(super) fn token_required(shared: &Shared) -> bool {
    configured_token(shared).is_some()
}

/// Whether the client is a browser asking for a page (it gets the login form with the
/// 401, not the JSON envelope).
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// A local path to go back to after logging in: `/` unless `next` is a path of this
/// site (never `//host` or a full URL, so the form cannot send anyone elsewhere).
fn local_path(next: Option<&str>) -> String {
    match next {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.contains('\\')
                && !p.chars().any(char::is_control) =>
        {
            p.to_string()
        }
        _ => "/".to_string(),
    }
}

/// The login form, with `message` above it.
fn login_page(status: StatusCode, next: &str, message: &str) -> Response {
    #[derive(serde::Serialize)]
    struct View<'a> {
        next: &'a str,
        message: &'a str,
    }
    match super::pages::render("login.html", &View { next, message }) {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => super::api_error::ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "render", e)
            .into_response(),
    }
}

/// The refusal of a page or log without the token: `401`, as the login form for a
/// browser (to come back to `path`), as the JSON envelope for anything else.
pub(super) fn refused(headers: &HeaderMap, path: &str) -> Response {
    if wants_html(headers) {
        login_page(
            StatusCode::UNAUTHORIZED,
            &local_path(Some(path)),
            "This daemon needs its API token (http.token_env) to show ticket pages and logs.",
        )
    } else {
        super::api_error::unauthorized()
    }
}

/// `?next=/path`: where to go once logged in.
#[derive(serde::Deserialize, Default)]
pub(super) struct NextQuery {
    next: Option<String>,
}

/// `GET /login`: the form.
pub(super) async fn form(Query(q): Query<NextQuery>) -> Response {
    login_page(StatusCode::OK, &local_path(q.next.as_deref()), "")
}

/// The fields of the login form.
#[derive(serde::Deserialize)]
pub(super) struct LoginForm {
    token: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /login`: the right token sets the session cookie and goes back to `next`;
/// a wrong one is `401` (the form again for a browser).
pub(super) async fn login(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = local_path(form.next.as_deref());
    let Some(Some(token)) = configured_token(&shared) else {
        if token_required(&shared) {
            tracing::error!("http.token_env names a variable that is not set");
        }
        // Nothing to log in to (no token configured), or no token to compare with.
        return if token_required(&shared) {
            refused(&headers, &next)
        } else {
            (StatusCode::SEE_OTHER, [(header::LOCATION, next)]).into_response()
        };
    };
    if !constant_time_eq(form.token.trim().as_bytes(), token.as_bytes()) {
        return if wants_html(&headers) {
            login_page(StatusCode::UNAUTHORIZED, &next, "That is not the token.")
        } else {
            super::api_error::unauthorized()
        };
    }
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        session_value(&token)
    );
    (
        StatusCode::SEE_OTHER,
        [(header::SET_COOKIE, cookie), (header::LOCATION, next)],
    )
        .into_response()
}

/// `POST /logout`: forget the session cookie.
pub(super) async fn logout() -> Response {
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/".to_string()),
        ],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(local_path(Some("/tickets/4")), "/tickets/4");
        assert_eq!(
            local_path(Some("/runs/r1/log?follow=1")),
            "/runs/r1/log?follow=1"
        );
        for bad in [
            "//evil.example/x",
            "https://evil.example",
            "/\\evil",
            "x",
            "",
        ] {
            assert_eq!(local_path(Some(bad)), "/", "{bad}");
        }
        assert_eq!(local_path(None), "/");
    }

    #[test]
    fn the_session_cookie_is_not_the_token_and_changes_with_it() {
        let v = session_value("s3cret");
        assert!(!v.contains("s3cret"));
        assert_eq!(v, session_value("s3cret"));
        assert_ne!(v, session_value("other"));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            format!("a=b; {SESSION_COOKIE}={v}").parse().unwrap(),
        );
        assert!(has_session(&h, "s3cret"));
        assert!(!has_session(&h, "other"));
    }
}
