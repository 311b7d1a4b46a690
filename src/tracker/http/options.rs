//! The options struct every HTTP adapter takes: the per-request timeout and the clock
//! they all share, then the adapter's own fields, each declared once with its default.

/// Declares an adapter's options: `timeout` (default [`DEFAULT_TIMEOUT`]) and `clock`
/// (default the system clock), then the listed fields with their defaults, with `Clone`
/// and `Default`. Tests build them as `XOptions { clock, ..XOptions::default() }`.
///
/// [`DEFAULT_TIMEOUT`]: crate::tracker::http::DEFAULT_TIMEOUT
macro_rules! adapter_options {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident: $ty:ty = $default:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone)]
        pub struct $name {
            /// Per-request timeout. Default 30 s.
            pub timeout: std::time::Duration,
            /// Where "now" comes from (rate-limit waits). Default the system clock.
            pub clock: $crate::tracker::http::Clock,
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    timeout: $crate::tracker::http::DEFAULT_TIMEOUT,
                    clock: $crate::tracker::http::system_clock(),
                    $( $field: $default, )*
                }
            }
        }
    };
}
pub(crate) use adapter_options;
