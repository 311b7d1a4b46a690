//! How sortie compares the names of statuses and labels: a leaf module the config, the
//! trackers and the pipeline all use (it imports nothing of the crate).

/// Whether two status or label names are the same for sortie: compared ignoring case
/// and surrounding whitespace (`In Review` is `in review`). Every adapter and the
/// pipeline compare names with this, never with `==`.
pub fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    // Lowercasing allocates: only names with non-ASCII letters need it (issue #29: a
    // tick compared every ticket's status with every stage's this way).
    !(a.is_ascii() && b.is_ascii()) && a.to_lowercase() == b.to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::same_name;

    #[test]
    fn names_compare_ignoring_case_and_surrounding_whitespace() {
        assert!(same_name("In Review", " in review "));
        assert!(same_name("Ärger", "ärger"));
        assert!(!same_name("ready", "ready-for-design"));
        assert!(!same_name("Ärger", "arger"));
    }
}
