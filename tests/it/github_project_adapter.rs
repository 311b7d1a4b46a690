//! The GitHub Project adapter against the project model: the config section, what a
//! listing holds and skips, blockers, the points reserve, `tracker check`, and ids that
//! are not on the board. The contract suite (`contract_adapters::github_project`) and the
//! pipelines (`github_project_pipeline`, `pipeline_suite::github_project`) cover the rest.

use sortie::config::TrackerConfig;
use sortie::tracker::github_project::RESERVE;
use sortie::tracker::{Tracker, TrackerError};

use crate::contract_adapters::github_project::{adapter, config, fixture};
use crate::github_project_model::{LOGIN, OTHER_REPO, REPO, TOKEN};

use crate::common::{parse_tracker as parse, tracker_problems as problems};

#[test]
fn a_project_needs_its_owner_and_number_and_takes_githubs_defaults() {
    let cfg = parse("tracker: {kind: github_project, owner: acme, project: 7}\n").unwrap();
    assert_eq!(
        cfg.tracker,
        TrackerConfig::GithubProject {
            owner: "acme".into(),
            project: 7,
            status_field: "Status".into(),
            token_env: "GITHUB_TOKEN".into(),
            api_url: "https://api.github.com/graphql".into(),
            rest_url: "https://api.github.com".into(),
        }
    );
    assert_eq!(cfg.tracker.name(), "github_project:acme/7");
    // GitHub Enterprise Server: the REST API beside its GraphQL endpoint.
    let cfg = parse(
        "tracker: {kind: github_project, owner: acme, project: 7, api_url: \"https://ghe.acme.test/api/graphql\"}\n",
    )
    .unwrap();
    let TrackerConfig::GithubProject { rest_url, .. } = &cfg.tracker else {
        panic!()
    };
    assert_eq!(rest_url, "https://ghe.acme.test/api/v3");
}

#[test]
fn a_bad_owner_number_or_field_is_refused_at_its_line() {
    let found = problems(
        "tracker:\n  kind: github_project\n  owner: \"acme corp\"\n  project: 0\n  status_field: \" \"\n",
    );
    let fields: Vec<(usize, &str)> = found.iter().map(|(l, f, _)| (*l, f.as_str())).collect();
    assert_eq!(
        fields,
        [
            (3, "tracker.owner"),
            (4, "tracker.project"),
            (5, "tracker.status_field")
        ],
        "{found:#?}"
    );
    assert!(
        found[1].2.contains("the project's number as in its URL"),
        "{found:#?}"
    );
    assert!(found[2].2.contains("single-select"), "{found:#?}");
}

#[tokio::test]
async fn a_listing_holds_issues_of_every_repository_and_says_what_it_skipped() {
    let f = fixture().await;
    let m = &f.model;
    let a = m.add_issue("Export", "Ready for design");
    m.github.edit(a, |i| {
        i.labels = vec![" ui ".into(), "UI".into(), "api".into()]
    });
    let other = m.add_other_issue("Quota", "Ready for design");
    m.add_pull_request("A fix", "Ready for design");
    m.add_draft("An idea", "Ready for design");
    let archived = m.add_issue("Old", "Ready for design");
    m.archive(archived);
    m.add_issue_without_status("Unsorted");
    let closed = m.add_issue("Shipped", "Ready for design");
    m.github.edit(closed, |i| i.open = false);
    m.add_issue("Later", "On hold");

    let t = adapter(&config(&m.api_url()), TOKEN);
    let listing = t.list(&["ready for design".into()]).await.unwrap();
    let ids: Vec<&str> = listing.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [format!("{REPO}#{a}"), format!("{OTHER_REPO}#{other}")]
    );
    let export = &listing.tickets[0];
    assert_eq!(export.status, "ready for design", "the config's spelling");
    assert_eq!(export.labels, ["ui", "api"], "labels normalized");
    assert_eq!(
        export.url.as_deref(),
        Some(format!("https://github.com/{REPO}/issues/{a}").as_str())
    );
    assert!(!export.closed);
    assert_eq!(
        listing.warnings,
        ["GitHub Project acme/7: 1 pull request(s) and 1 draft item(s) in pipeline statuses are not tickets (only issues are)"]
    );
    assert_eq!(
        listing.other_statuses.get("on hold"),
        Some(&1),
        "{:?}",
        listing.other_statuses
    );
    assert_eq!(
        m.log(),
        ["SortieProjectItems"],
        "one query: the field rides on the page"
    );
}

#[tokio::test]
async fn a_long_board_is_read_page_by_page_and_every_card_is_listed() {
    let f = fixture().await;
    for i in 0..120 {
        f.model.add_issue(&format!("t{i}"), "Ready for design");
    }
    let t = adapter(&config(&f.model.api_url()), TOKEN);
    let listing = t.list(&["ready for design".into()]).await.unwrap();
    assert_eq!(listing.tickets.len(), 120);
    assert_eq!(
        f.model.log().len(),
        3,
        "50 cards a page: {:?}",
        f.model.log()
    );
}

#[tokio::test]
async fn blockers_are_the_issues_dependencies_with_their_column() {
    let f = fixture().await;
    let m = &f.model;
    let blocked = m.add_issue("Blocked", "Ready for design");
    let blocker = m.add_issue("Blocker", "Designing");
    m.github.block(blocked, blocker);
    let t = adapter(&config(&m.api_url()), TOKEN);
    t.list(&["ready for design".into(), "designing".into()])
        .await
        .unwrap();
    let found = t.blockers(&format!("{REPO}#{blocked}")).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, format!("{REPO}#{blocker}"));
    assert_eq!(found[0].status.as_deref(), Some("designing"));
    assert!(!found[0].closed);
}

#[tokio::test]
async fn the_points_reserve_stops_sending_before_the_hour_is_spent() {
    let f = fixture().await;
    f.model.add_issue("t", "Ready for design");
    f.model.set_remaining(RESERVE + 1);
    let t = adapter(&config(&f.model.api_url()), TOKEN);
    t.list(&["ready for design".into()])
        .await
        .expect("one more query is fine");
    assert_eq!(t.rate_limit_remaining(), Some(RESERVE));
    let sent = f.model.log().len();
    match t.list(&["ready for design".into()]).await {
        Err(TrackerError::RateLimited {
            retry_after: Some(d),
        }) => {
            assert!(d.as_secs() > 3000, "until the hourly reset: {d:?}")
        }
        other => panic!("expected a wait for the reset, got {other:?}"),
    }
    assert_eq!(f.model.log().len(), sent, "nothing sent");
}

#[tokio::test]
async fn check_lists_the_options_and_names_a_missing_one() {
    let f = fixture().await;
    let t = adapter(&config(&f.model.api_url()), TOKEN);
    let report = t
        .check(&["ready for design".into(), "In review".into()], true)
        .await
        .unwrap();
    let lines: Vec<(&str, bool)> = report
        .checks
        .iter()
        .map(|c| (c.what.as_str(), c.ok))
        .collect();
    assert_eq!(
        lines,
        [
            ("token", true),
            ("project", true),
            ("status ready for design", true),
            ("status In review", false),
            ("rate limit", true)
        ]
    );
    assert_eq!(report.checks[0].detail, format!("authenticated as {LOGIN}"));
    assert!(
        report.checks[1]
            .detail
            .contains("Ready for design, Designing, On hold, Done"),
        "{}",
        report.checks[1].detail
    );
    assert!(
        report.checks[3]
            .detail
            .contains("sortie does not add options to a project"),
        "{}",
        report.checks[3].detail
    );
    assert_eq!(report.rate_limit_remaining, Some(f.model.remaining()));
}

#[tokio::test]
async fn an_issue_off_the_board_a_pull_request_and_a_malformed_id_are_not_found() {
    let f = fixture().await;
    let m = &f.model;
    let off = m.github.add_issue("elsewhere", &[]);
    let pull = m.add_pull_request("A fix", "Ready for design");
    let t = adapter(&config(&m.api_url()), TOKEN);
    for id in [
        format!("{REPO}#{off}"),
        format!("{REPO}#{pull}"),
        "12".to_string(),
        "acme/widgets#x".into(),
    ] {
        match t.get(&id).await {
            Err(TrackerError::NotFound(why)) => assert!(!why.is_empty()),
            other => panic!("{id}: expected NotFound, got {other:?}"),
        }
    }
    assert!(f.model.refused().is_empty());
}

#[test]
fn pull_requests_on_a_project_need_the_repository_they_open_on() {
    let git = "workspace:\n  git: {url: /srv/web.git}\npull_request: {after: architect}\n";
    let tracker = format!("tracker: {{kind: github_project, owner: acme, project: 7}}\n{git}");
    let found = problems(&tracker);
    assert_eq!(found.len(), 1, "{found:#?}");
    let (line, field, message) = &found[0];
    assert_eq!((*line, field.as_str()), (4, "pull_request"));
    assert!(
        message
            .starts_with("a GitHub Project spans repositories, and `workspace.git.url` is no GitHub repository on the project's host")
            && message.contains("`forge: {kind: github, repo: owner/name}`"),
        "{message}"
    );
    let with_forge = format!("{tracker}forge: {{kind: github, repo: acme/web}}\n");
    let cfg = parse(&with_forge).expect("the forge names the repository");
    assert_eq!(cfg.forge.unwrap().name(), "github:acme/web");
}

#[test]
fn pull_requests_on_a_project_open_on_the_github_repository_the_workspace_clones() {
    for url in [
        "https://github.com/acme/web.git",
        "git@github.com:acme/web.git",
    ] {
        let tracker = format!(
            "tracker: {{kind: github_project, owner: acme, project: 7, token_env: BOT_TOKEN}}\n\
             workspace:\n  git: {{url: \"{url}\"}}\npull_request: {{after: architect}}\n"
        );
        let cfg = parse(&tracker).expect("the forge is the cloned repository");
        let forge = cfg.forge.expect("a forge");
        assert_eq!(forge.name(), "github:acme/web", "{url}");
        assert_eq!(forge.secret_envs(), [&"BOT_TOKEN".to_string()]);
    }
    // GitHub Enterprise Server: the same host as the project's API.
    let tracker = "tracker: {kind: github_project, owner: acme, project: 7, api_url: \"https://ghe.acme.test/api/graphql\"}\n\
         workspace:\n  git: {url: \"https://ghe.acme.test/acme/web.git\"}\npull_request: {after: architect}\n";
    let TrackerConfig::Github { api_url, .. } = parse(tracker).unwrap().forge.unwrap() else {
        panic!()
    };
    assert_eq!(api_url, "https://ghe.acme.test/api/v3");
    // A repository on another host is not this GitHub's: said at load.
    let elsewhere = "tracker: {kind: github_project, owner: acme, project: 7}\n\
         workspace:\n  git: {url: \"https://gitlab.com/acme/web.git\"}\npull_request: {after: architect}\n";
    assert_eq!(problems(elsewhere)[0].1, "pull_request");
}
