//! Every GraphQL document the Linear adapter can send, in one place, so a test can
//! validate each one against Linear's published schema
//! (`tests/fixtures/linear.schema.graphql`) and the test model can refuse anything else.
//!
//! Every connection asks for a small `first:` so that no query comes near Linear's
//! 10,000-point complexity ceiling (see `docs/trackers/linear.md` for the costs).

/// Issues per page of a listing.
pub const ISSUES_PER_PAGE: u32 = 25;
/// Comments per page.
pub const COMMENTS_PER_PAGE: u32 = 50;

/// The fields sortie reads of an issue (listings and re-reads share them).
const ISSUE_FIELDS: &str = r#"
fragment SortieIssue on Issue {
  id
  identifier
  title
  description
  priority
  url
  createdAt
  updatedAt
  state { id name type }
  labels(first: 10) { nodes { name } pageInfo { hasNextPage } }
  assignee { id name email }
  inverseRelations(first: 5) {
    nodes { type issue { identifier state { name type } } }
    pageInfo { hasNextPage }
  }
}
"#;

/// Who the key belongs to.
pub const VIEWER: &str = r#"
query SortieViewer {
  viewer { id name email }
}
"#;

/// The team and its workflow states, by team key.
pub const TEAM_STATES: &str = r#"
query SortieTeamStates($team: String!) {
  teams(filter: { key: { eq: $team } }, first: 1) {
    nodes {
      id
      key
      name
      states(first: 50) { nodes { id name type } pageInfo { hasNextPage } }
    }
  }
}
"#;

/// One page of the board: the team's issues in the given states (and filter).
pub fn issues() -> String {
    format!(
        r#"
query SortieIssues($filter: IssueFilter!, $after: String) {{
  issues(filter: $filter, first: {ISSUES_PER_PAGE}, after: $after, orderBy: createdAt) {{
    nodes {{ ...SortieIssue }}
    pageInfo {{ hasNextPage endCursor }}
  }}
}}
{ISSUE_FIELDS}"#
    )
}

/// One issue by identifier (`ENG-123`) or id.
pub fn issue() -> String {
    format!(
        r#"
query SortieIssue($id: String!) {{
  issue(id: $id) {{ ...SortieIssue }}
}}
{ISSUE_FIELDS}"#
    )
}

/// The issues blocking one issue, when the listing had more than it asked for.
pub const BLOCKERS: &str = r#"
query SortieBlockers($id: String!, $after: String) {
  issue(id: $id) {
    inverseRelations(first: 50, after: $after) {
      nodes { type issue { identifier state { name type } } }
      pageInfo { hasNextPage endCursor }
    }
  }
}
"#;

/// One page of an issue's comments, oldest first.
pub fn comments() -> String {
    format!(
        r#"
query SortieComments($id: String!, $after: String) {{
  issue(id: $id) {{
    comments(first: {COMMENTS_PER_PAGE}, after: $after, orderBy: createdAt) {{
      nodes {{ id body createdAt user {{ id name email }} }}
      pageInfo {{ hasNextPage endCursor }}
    }}
  }}
}}
"#
    )
}

/// One comment by id (to tell whether a refused create had already happened).
pub const COMMENT: &str = r#"
query SortieComment($id: String!) {
  comment(id: $id) { id body createdAt issue { identifier } user { id name email } }
}
"#;

/// Post a comment with a client-chosen id.
pub const COMMENT_CREATE: &str = r#"
mutation SortieCommentCreate($input: CommentCreateInput!) {
  commentCreate(input: $input) {
    success
    comment { id body createdAt user { id name email } }
  }
}
"#;

/// Move an issue to a workflow state.
pub const ISSUE_UPDATE: &str = r#"
mutation SortieIssueUpdate($id: String!, $stateId: String!) {
  issueUpdate(id: $id, input: { stateId: $stateId }) {
    success
    issue { identifier state { id name type } }
  }
}
"#;

/// What is left of the rate limit (`sortie tracker check`).
pub const RATE_LIMIT: &str = r#"
query SortieRateLimit {
  rateLimitStatus { kind limits { type remainingAmount allowedAmount reset } }
}
"#;

/// Every document, by operation name, for validation.
pub fn all() -> Vec<(&'static str, String)> {
    vec![
        ("SortieViewer", VIEWER.to_string()),
        ("SortieTeamStates", TEAM_STATES.to_string()),
        ("SortieIssues", issues()),
        ("SortieIssue", issue()),
        ("SortieBlockers", BLOCKERS.to_string()),
        ("SortieComments", comments()),
        ("SortieComment", COMMENT.to_string()),
        ("SortieCommentCreate", COMMENT_CREATE.to_string()),
        ("SortieIssueUpdate", ISSUE_UPDATE.to_string()),
        ("SortieRateLimit", RATE_LIMIT.to_string()),
    ]
}
