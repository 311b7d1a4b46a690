//! Embedding sortie: build and tick a pipeline from Rust code, with a tracker the
//! program writes itself and a hook registered as a closure.
//!
//! `cargo run --example embed`

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;

use sortie::config::Config;
use sortie::hooks::HookRegistry;
use sortie::ledger::SqliteLedger;
use sortie::pipeline::{Pipeline, TickOptions};
use sortie::tracker::{Capabilities, Comment, Listing, Ticket, Tracker, TrackerError};

/// A tiny in-process board: the embedding program's own work queue.
#[derive(Default)]
struct Inbox {
    tickets: Mutex<BTreeMap<String, (Ticket, Vec<Comment>)>>,
}

impl Inbox {
    fn add(&self, id: &str, title: &str, status: &str) {
        let now = Utc::now();
        let ticket = Ticket {
            id: id.into(),
            title: title.into(),
            body: String::new(),
            status: status.into(),
            labels: Vec::new(),
            priority: None,
            created_at: now,
            updated_at: now,
            url: None,
            closed: false,
            assignees: Vec::new(),
            blocked_by: None,
        };
        self.tickets
            .lock()
            .unwrap()
            .insert(id.into(), (ticket, Vec::new()));
    }
}

#[async_trait]
impl Tracker for Inbox {
    fn name(&self) -> &str {
        "inbox"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_statuses: true,
            idempotency_header: false,
            blockers: false,
        }
    }
    async fn identity(&self) -> Result<String, TrackerError> {
        Ok("sortie".into())
    }
    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        let tickets = self.tickets.lock().unwrap();
        let tickets = tickets
            .values()
            .map(|(t, _)| t.clone())
            .filter(|t| statuses.contains(&t.status))
            .collect();
        Ok(Listing {
            tickets,
            ..Listing::default()
        })
    }
    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        let tickets = self.tickets.lock().unwrap();
        tickets
            .get(id)
            .map(|(t, _)| t.clone())
            .ok_or_else(|| TrackerError::NotFound(id.into()))
    }
    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let tickets = self.tickets.lock().unwrap();
        tickets
            .get(id)
            .map(|(_, c)| c.clone())
            .ok_or_else(|| TrackerError::NotFound(id.into()))
    }
    async fn post_comment(
        &self,
        id: &str,
        body: &str,
        _key: &str,
    ) -> Result<Comment, TrackerError> {
        let mut tickets = self.tickets.lock().unwrap();
        let (_, comments) = tickets
            .get_mut(id)
            .ok_or_else(|| TrackerError::NotFound(id.into()))?;
        let comment = Comment {
            id: comments.len().to_string(),
            author: "sortie".into(),
            created_at: Utc::now(),
            body: body.into(),
        };
        comments.push(comment.clone());
        Ok(comment)
    }
    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        let mut tickets = self.tickets.lock().unwrap();
        let (ticket, _) = tickets
            .get_mut(id)
            .ok_or_else(|| TrackerError::NotFound(id.into()))?;
        if ticket.status == to {
            return Ok(());
        }
        if ticket.status != from {
            return Err(TrackerError::Conflict {
                id: id.into(),
                expected: from.into(),
                current: ticket.status.clone(),
            });
        }
        ticket.status = to.into();
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let state = tempfile::tempdir()?;
    let roles = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("roles");
    // The same pipeline a YAML file would describe, built from a string here; a program
    // can equally generate it.
    let config = Config::parse_str(
        &format!(
            "tracker: {{kind: local, path: unused}}\nstate_root: {state}\nroles_dir: {roles}\n\
             agent: {{command: [sh, -c, 'echo reviewed $$SORTIE_TICKET_TITLE']}}\n\
             active_states: [inbox]\nhandoff_state: reviewed\nrole: agent\n",
            state = state.path().display(),
            roles = roles.display(),
        ),
        None,
    )?;
    let inbox = Arc::new(Inbox::default());
    inbox.add("a-1", "first request", "inbox");
    inbox.add("a-2", "second request", "inbox");

    let handed_off = Arc::new(Mutex::new(Vec::new()));
    let seen = handed_off.clone();
    let mut hooks = HookRegistry::from_config(&config);
    hooks.on("tracker_pipeline.handoff", move |event| {
        let field = |key: &str| event.payload[key].as_str().unwrap_or_default().to_string();
        seen.lock()
            .unwrap()
            .push(format!("{} -> {}", field("ticket_id"), field("to_status")));
    });

    let ledger = Arc::new(SqliteLedger::open(&config.ledger_path())?);
    let pipeline = Pipeline::builder(config, inbox.clone(), ledger)
        .hooks(hooks)
        .build()
        .await?;
    for _ in 0..2 {
        let report = pipeline.tick(TickOptions::default()).await?;
        print!("{}", report.to_text());
    }
    println!(
        "handoffs seen by the hook: {:?}",
        handed_off.lock().unwrap()
    );
    assert_eq!(inbox.get("a-1").await?.status, "reviewed");
    Ok(())
}
