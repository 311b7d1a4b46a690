//! Issue #18 on GitHub: `tracker.filter` labels are applied server-side, joined to the
//! status label in one `labels=` query, against the in-memory GitHub model.

use crate::github_model;

use std::time::Duration;

use github_model::{GithubModel, REPO, TOKEN};
use sortie::config::TicketFilter;
use sortie::tracker::github::{GithubOptions, GithubSettings, GithubTracker, LabelScheme};
use sortie::tracker::Tracker;

fn tracker(model: &GithubModel) -> GithubTracker {
    let settings = GithubSettings {
        repo: REPO.to_string(),
        api_url: model.api_url(),
        labels: LabelScheme {
            status_prefix: "status:".into(),
            priority_prefix: "priority:".into(),
        },
    };
    let options = GithubOptions {
        retry_backoff: Duration::ZERO,
        ..GithubOptions::default()
    };
    GithubTracker::new(settings, TOKEN.into(), options).unwrap()
}

#[tokio::test]
async fn filter_labels_join_the_status_label_in_one_labels_query() {
    let model = GithubModel::start().await;
    let opted = model.add_issue("opted in", &["status:ready", "Agent-OK"]);
    model.add_issue("not opted in", &["status:ready"]);
    let gh = tracker(&model);
    model.clear_log();
    let filter = TicketFilter {
        labels: vec!["agent-ok".into()],
        ..TicketFilter::default()
    };
    let listing = gh
        .list_filtered(&["ready".to_string()], &filter)
        .await
        .unwrap();
    let ids: Vec<&str> = listing.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [opted.to_string()]);
    assert_eq!(
        model.log(),
        ["GET /repos/acme/widgets/issues?labels=status%3Aready%2Cagent-ok&state=open&per_page=100 -> 200"]
    );
}
