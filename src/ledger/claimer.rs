//! Claimer ids: who holds a claim, as `host:pid:uuid` (the host from `SORTIE_HOST_ID`,
//! else the host name). One type for the id wherever it goes: claims, run history, the
//! pipeline's own id; the ledger stores it as text.

use serde::{Deserialize, Serialize};

/// Who holds a claim: `host:pid:uuid` for ids sortie builds ([`ClaimerId::fresh`]); any
/// other text read back (an id written by hand or by an older sortie) is kept as it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClaimerId(String);

impl ClaimerId {
    /// A fresh id for this process, unique per call: which host and process hold a
    /// claim. The pipeline builds its claimer id with this.
    pub fn fresh() -> Self {
        Self::for_host(&super::host_id())
    }

    /// A fresh id for this process claiming as `host` (a `:` in it becomes `_`, as in
    /// `SORTIE_HOST_ID`): several pipelines of one process then act as several hosts.
    pub fn for_host(host: &str) -> Self {
        ClaimerId(format!(
            "{}:{}:{}",
            host.replace(':', "_"),
            std::process::id(),
            uuid::Uuid::new_v4()
        ))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The host part (the whole id when it has no `:`).
    pub fn host(&self) -> &str {
        host_of(&self.0)
    }

    /// The process id part, for ids sortie built.
    pub fn pid(&self) -> Option<u32> {
        self.0.rsplit(':').nth(1)?.parse().ok()
    }
}

/// The host part of a claimer id given as text.
pub(crate) fn host_of(claimer_id: &str) -> &str {
    claimer_id.split(':').next().unwrap_or(claimer_id)
}

impl std::ops::Deref for ClaimerId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ClaimerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for ClaimerId {
    fn from(id: String) -> Self {
        ClaimerId(id)
    }
}

impl From<&str> for ClaimerId {
    fn from(id: &str) -> Self {
        ClaimerId(id.to_string())
    }
}

impl PartialEq<str> for ClaimerId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ClaimerId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for ClaimerId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_names_its_host_and_process() {
        let id = ClaimerId::from("build-1:42:abcd1234");
        assert_eq!(id.host(), "build-1");
        assert_eq!(id.pid(), Some(42));
        assert_eq!(ClaimerId::from("cron").host(), "cron");
        assert_eq!(ClaimerId::from("nonsense").pid(), None);
    }
}
