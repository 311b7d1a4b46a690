//! The GitLab and Gitea adapters one call at a time against their models: auth
//! variants, issue links and the tier 403, `tracker check` creating labels, and config
//! errors (issue #17).

use sortie::config::Config;
use sortie::tracker::gitea::{GiteaOptions, GiteaSettings, GiteaTracker};
use sortie::tracker::gitlab::{GitlabOptions, GitlabSettings, GitlabTracker};
use sortie::tracker::labels::LabelScheme;
use sortie::tracker::{Tracker, TrackerError};

use crate::{gitea_model, gitlab_model};

fn gitlab_settings(url: String, bearer: bool) -> GitlabSettings {
    GitlabSettings {
        url,
        project: gitlab_model::PROJECT.into(),
        bearer,
        labels: LabelScheme {
            status_prefix: "status::".into(),
            priority_prefix: "priority::".into(),
        },
        close_on: Vec::new(),
    }
}

#[tokio::test]
async fn gitlab_takes_a_private_token_or_a_bearer_token_and_names_the_user() {
    let model = gitlab_model::start().await;
    for bearer in [false, true] {
        let t = GitlabTracker::new(
            gitlab_settings(model.url(), bearer),
            gitlab_model::TOKEN.into(),
            GitlabOptions::default(),
        )
        .unwrap();
        assert_eq!(t.identity().await.unwrap(), gitlab_model::USER);
    }
    let wrong = GitlabTracker::new(
        gitlab_settings(model.url(), true),
        "nope".into(),
        GitlabOptions::default(),
    )
    .unwrap();
    match wrong.identity().await {
        Err(TrackerError::Unauthorized(m)) => assert!(m.contains("api` scope"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(
        model.log().iter().all(|l| !l.contains(gitlab_model::TOKEN)),
        "the token never travels in the URL"
    );
}

#[tokio::test]
async fn gitlab_reads_blockers_from_issue_links_and_a_tier_403_is_not_the_tokens_fault() {
    let model = gitlab_model::start().await;
    let blocker = model.add_issue("schema", &["status::code-review"]);
    let blocked = model.add_issue("api", &["status::ready"]);
    model.board().links.push((blocked, blocker));
    let t = GitlabTracker::new(
        gitlab_settings(model.url(), false),
        gitlab_model::TOKEN.into(),
        GitlabOptions::default(),
    )
    .unwrap();
    t.get(&blocked.to_string()).await.unwrap(); // learns the project id
    let blockers = t.blockers(&blocked.to_string()).await.unwrap();
    assert_eq!(blockers.len(), 1);
    assert_eq!(blockers[0].id, blocker.to_string());
    assert_eq!(blockers[0].status.as_deref(), Some("code-review"));
    assert!(
        t.blockers(&blocker.to_string()).await.unwrap().is_empty(),
        "`blocks` is not a blocker"
    );

    model.board().links_forbidden = true;
    match t.blockers(&blocked.to_string()).await {
        Err(TrackerError::Unsupported(m)) => {
            assert!(m.contains("tier") && m.contains("the token is fine"), "{m}")
        }
        other => panic!("expected Unsupported naming the tier, got {other:?}"),
    }
}

#[tokio::test]
async fn check_creates_the_missing_status_labels_on_both_forges() {
    let statuses = vec!["ready".to_string(), "done".to_string()];
    let gl = gitlab_model::start().await;
    let t = GitlabTracker::new(
        gitlab_settings(gl.url(), false),
        gitlab_model::TOKEN.into(),
        GitlabOptions::default(),
    )
    .unwrap();
    let report = t.check(&statuses, false).await.unwrap();
    assert!(!report.all_ok(), "{report:?}");
    let report = t.check(&statuses, true).await.unwrap();
    assert!(report.all_ok(), "{report:?}");
    assert_eq!(gl.labels(), ["status::done", "status::ready"]);
    assert!(
        report.rate_limit_remaining.is_some(),
        "RateLimit-Remaining read"
    );

    let gt = gitea_model::start().await;
    let settings = GiteaSettings {
        url: gt.url(),
        repo: gitea_model::REPO.into(),
        labels: LabelScheme {
            status_prefix: "status/".into(),
            priority_prefix: "priority/".into(),
        },
        close_on: Vec::new(),
    };
    let t =
        GiteaTracker::new(settings, gitea_model::TOKEN.into(), GiteaOptions::default()).unwrap();
    let report = t.check(&statuses, true).await.unwrap();
    assert!(report.all_ok(), "{report:?}");
    assert_eq!(gt.labels(), ["status/done", "status/ready"]);
}

#[tokio::test]
async fn gitlab_filters_labels_exclusions_and_the_assignee_on_the_server() {
    let model = gitlab_model::start().await;
    let wanted = model.add_issue("wanted", &["status::ready", "backend"]);
    model.edit(wanted, |i| i.assignees = vec![gitlab_model::USER.into()]);
    let other = model.add_issue("someone else's", &["status::ready", "backend"]);
    model.edit(other, |i| i.assignees = vec!["alice".into()]);
    model.add_issue("frontend", &["status::ready"]);
    let parked = model.add_issue("parked", &["status::ready", "backend", "wontfix"]);
    model.edit(parked, |i| i.assignees = vec![gitlab_model::USER.into()]);
    let t = GitlabTracker::new(
        gitlab_settings(model.url(), false),
        gitlab_model::TOKEN.into(),
        GitlabOptions::default(),
    )
    .unwrap();
    let filter = sortie::config::TicketFilter {
        labels: vec!["backend".into()],
        exclude_labels: vec!["wontfix".into()],
        assignee: Some("me".into()),
        project: None,
    };
    model.clear_log();
    let listing = t.list_filtered(&["ready".into()], &filter).await.unwrap();
    let ids: Vec<String> = listing.tickets.iter().map(|t| t.id.clone()).collect();
    assert_eq!(ids, [wanted.to_string()], "the server did the filtering");
    let log = model.log();
    assert!(
        log.iter().any(|l| l.contains(
            "labels=status%3A%3Aready%2Cbackend&not%5Blabels%5D=wontfix&assignee_username=sortie-bot"
        )),
        "{log:#?}"
    );
}

#[test]
fn forge_configs_are_checked_with_the_field_named() {
    let base =
        "state_root: s\nagent: {command: [\"true\"]}\nactive_states: [ready]\nterminal_states: [done]\nhandoff_state: review\n";
    let err = Config::parse_str(
        &format!("tracker: {{kind: gitlab, project: 'a b', auth: basic}}\n{base}"),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("tracker.project") && err.contains("group/sub/repo"),
        "{err}"
    );
    assert!(
        err.contains("tracker.auth") && err.contains("`private-token` or `bearer`"),
        "{err}"
    );
    let err = Config::parse_str(
        &format!("tracker: {{kind: gitea, url: 'https://g.example', repo: nope, close_on: ['']}}\n{base}"),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("tracker.repo") && err.contains("owner/name"),
        "{err}"
    );
    assert!(err.contains("tracker.close_on[0]"), "{err}");
    let ok = Config::parse_str(
        &format!("tracker: {{kind: gitlab, project: grp/sub/widgets}}\n{base}"),
        None,
    )
    .unwrap();
    assert_eq!(ok.tracker.name(), "gitlab:grp/sub/widgets");
    assert_eq!(ok.secret_env_names(), ["GITLAB_TOKEN"]);
}
