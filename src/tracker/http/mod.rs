//! The one HTTP layer every HTTP tracker adapter sends through: the client and its
//! timeouts, the clock, the request observer tests use, rate-limit waits and
//! `Retry-After`, the one retry after a server or connection error, conditional
//! requests and their cache, `Link` / offset / cursor paging, and reading a GraphQL
//! answer's `errors`.
//!
//! What differs per vendor (the auth header, how an error body is read, GitHub's
//! secondary limits, Linear's GraphQL errors, Jira's reset times) stays in each
//! adapter's own client, a thin wrapper around [`HttpClient`].

mod client;
mod clock;
mod conditional;
pub(crate) mod graphql;
mod observer;
mod options;
mod paging;
mod rate_limit;
mod retry;
mod url;

pub use self::clock::{system_clock, Clock};
pub use self::observer::{Exchange, ExchangeObserver};
pub use self::paging::{next_link, next_offset, PageWalk, MAX_PAGES};
pub use self::url::encode;

pub(crate) use self::client::{fmt_options, no_answer, HttpClient};
pub use self::client::{Reply, DEFAULT_RETRY_BACKOFF, DEFAULT_TIMEOUT};
pub(crate) use self::conditional::{CachedPage, ResponseCache};
pub(crate) use self::options::adapter_options;
pub(crate) use self::rate_limit::{
    header_u64, refuse_until, round_up, Remaining, WaitGate, DEFAULT_WAIT, MAX_WAIT,
};
pub(crate) use self::retry::{Retry, RetryOnce};
pub(crate) use self::url::{path_of, strip_query};
