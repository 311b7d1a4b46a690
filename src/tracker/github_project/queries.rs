//! The GraphQL documents the GitHub Project adapter sends, each validated against
//! GitHub's published schema by `tests/it/github_project_schema.rs` and, at run time,
//! by the project model in the tests.
//!
//! Every query also asks for `rateLimit { cost remaining resetAt }`: GraphQL has no
//! conditional requests, so the points each query costs are what the adapter watches.

/// The issue fields a ticket is made of.
const ISSUE_FIELDS: &str = "fragment SortieIssue on Issue {
  number
  title
  body
  url
  state
  createdAt
  updatedAt
  repository { nameWithOwner }
  labels(first: 50) { nodes { name } }
  assignees(first: 20) { nodes { login } }
}";

/// An item's value of the status field, when it is a single-select option.
const STATUS_VALUE: &str = "fieldValueByName(name: $field) {
        __typename
        ... on ProjectV2ItemFieldSingleSelectValue { name optionId }
      }";

/// Items per page: 50 items with 50 labels and 20 assignees each stay far under
/// GitHub's 500,000-node limit and cost one point per page.
pub const ITEMS_PER_PAGE: u32 = 50;

/// One page of the project's items, with each item's status value and, for issues,
/// the issue; and the status field with its options (on every page, at no extra point:
/// a field is not a connection).
pub fn items() -> String {
    format!(
        "query SortieProjectItems($owner: String!, $number: Int!, $field: String!, $after: String) {{
  rateLimit {{ cost remaining resetAt }}
  repositoryOwner(login: $owner) {{
    ... on ProjectV2Owner {{
      projectV2(number: $number) {{
        id
        title
        {FIELD_SELECTION}
        items(first: {ITEMS_PER_PAGE}, after: $after) {{
          pageInfo {{ hasNextPage endCursor }}
          nodes {{
            id
            type
            isArchived
            {STATUS_VALUE}
            content {{
              __typename
              ... on Issue {{ ...SortieIssue }}
            }}
          }}
        }}
      }}
    }}
  }}
}}
{ISSUE_FIELDS}"
    )
}

/// The status field with its options, on a project.
const FIELD_SELECTION: &str = "field(name: $field) {
          __typename
          ... on ProjectV2SingleSelectField { id name options { id name } }
        }";

/// The project's id and its status field with the field's options (the listing reads
/// them with its first page; this is for a transition to an option the listing did not
/// see, a re-read before the first listing, and `tracker check`).
pub const FIELD: &str =
    "query SortieProjectField($owner: String!, $number: Int!, $field: String!) {
  rateLimit { cost remaining resetAt }
  repositoryOwner(login: $owner) {
    ... on ProjectV2Owner {
      projectV2(number: $number) {
        id
        title
        field(name: $field) {
          __typename
          ... on ProjectV2SingleSelectField { id name options { id name } }
        }
      }
    }
  }
}";

/// One issue, with its items on every project (the adapter keeps the one on its own).
pub fn issue() -> String {
    format!(
        "query SortieProjectIssue($owner: String!, $name: String!, $number: Int!, $field: String!) {{
  rateLimit {{ cost remaining resetAt }}
  repository(owner: $owner, name: $name) {{
    issue(number: $number) {{
      ...SortieIssue
      projectItems(first: 50, includeArchived: false) {{
        nodes {{
          id
          project {{ id }}
          {STATUS_VALUE}
        }}
      }}
    }}
  }}
}}
{ISSUE_FIELDS}"
    )
}

/// Set an item's status field to an option.
pub const MOVE: &str =
    "mutation SortieProjectMove($input: UpdateProjectV2ItemFieldValueInput!, $field: String!) {
  updateProjectV2ItemFieldValue(input: $input) {
    projectV2Item {
      id
      fieldValueByName(name: $field) {
        __typename
        ... on ProjectV2ItemFieldSingleSelectValue { name optionId }
      }
    }
  }
}";

/// Who the token belongs to, and the points left.
pub const VIEWER: &str = "query SortieViewer {
  rateLimit { cost remaining resetAt }
  viewer { login }
}";

/// Every document, by operation name, for the schema tests.
pub fn all() -> Vec<(&'static str, String)> {
    vec![
        ("SortieProjectItems", items()),
        ("SortieProjectField", FIELD.to_string()),
        ("SortieProjectIssue", issue()),
        ("SortieProjectMove", MOVE.to_string()),
        ("SortieViewer", VIEWER.to_string()),
    ]
}
