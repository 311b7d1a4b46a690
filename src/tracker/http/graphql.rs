//! The parts of a GraphQL answer every GraphQL adapter reads alike (Linear, GitHub
//! Projects): the body as JSON, its `errors`, each error's code as the vendor puts it,
//! and one line naming them for messages. What a code means is the adapter's.

use serde_json::Value;

/// Where a vendor puts an error's code and its text for people.
pub(crate) struct Dialect {
    /// JSON pointer to the code (`/extensions/code` on Linear, `/type` on GitHub).
    pub code: &'static str,
    /// JSON pointers to the text, first found wins (`message` last).
    pub text: &'static [&'static str],
}

/// A GraphQL answer body, read.
pub(crate) struct Answer {
    /// The body as JSON, when it is JSON.
    pub parsed: Option<Value>,
    /// Its `errors`, empty when none.
    pub errors: Vec<Value>,
    /// Every error's text with its code in parentheses, `; `-separated.
    pub message: String,
    dialect: &'static Dialect,
}

impl Answer {
    /// Read `body` as `dialect` writes errors.
    pub fn read(body: &str, dialect: &'static Dialect) -> Self {
        let parsed: Option<Value> = serde_json::from_str(body).ok();
        let errors: Vec<Value> = parsed
            .as_ref()
            .and_then(|v| v.get("errors"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut answer = Answer {
            parsed,
            errors,
            message: String::new(),
            dialect,
        };
        answer.message = answer
            .errors
            .iter()
            .map(|e| {
                let text = dialect
                    .text
                    .iter()
                    .find_map(|p| e.pointer(p).and_then(Value::as_str))
                    .unwrap_or("no message");
                match answer.code(e).as_str() {
                    "" => text.to_string(),
                    c => format!("{text} ({c})"),
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        answer
    }

    /// The code of error `e`, upper case; empty when it has none.
    pub fn code(&self, e: &Value) -> String {
        e.pointer(self.dialect.code)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_uppercase()
    }

    /// Whether any error has code `code`.
    pub fn has(&self, code: &str) -> bool {
        self.errors.iter().any(|e| self.code(e) == code)
    }

    /// The `data` of the answer, unless it is missing or null.
    pub fn data(self) -> Option<Value> {
        self.parsed
            .and_then(|mut v| v.get_mut("data").map(Value::take))
            .filter(|d| !d.is_null())
    }
}
