//! Issue #33, a fresh reviewer: `review.different_model_from` is checked when the config
//! loads. The models of both stages (the `agent:` section, each role file's front matter,
//! each route's overrides) must be known and differ, or the config is refused at the
//! `different_model_from` field with its file and line.

use std::path::Path;

use sortie::config::{Config, ConfigError, Diagnostic};

/// A config directory: `pipeline.yaml` with `agent` and the qa stage's `review` and
/// `routes` written in, `roles/backend.md` and `roles/qa.md` with the given front matter.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn write(agent: &str, backend_front: &str, qa_front: &str, qa_extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "tracker: {{kind: local, path: board}}\n\
             agent:\n\
             {agent}\
             pipeline_stages:\n\
             \x20 - role: backend\n\
             \x20   claim_status: ready\n\
             \x20   success_status: code-review\n\
             \x20 - role: qa\n\
             \x20   claim_status: code-review\n\
             \x20   success_status: done\n\
             \x20   review:\n\
             \x20     fresh_session: true\n\
             \x20     different_model_from: backend\n\
             {qa_extra}"
        );
        std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
        std::fs::create_dir(dir.path().join("roles")).unwrap();
        for (role, front) in [("backend", backend_front), ("qa", qa_front)] {
            let text = if front.is_empty() {
                format!("You are {role}.\n")
            } else {
                format!("---\n{front}---\nYou are {role}.\n")
            };
            std::fs::write(dir.path().join("roles").join(format!("{role}.md")), text).unwrap();
        }
        Fixture { dir }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("pipeline.yaml")
    }

    fn load(&self) -> Result<Config, ConfigError> {
        Config::load(&self.path())
    }

    /// The one problem of a refused config.
    fn refused(&self) -> Diagnostic {
        match self.load() {
            Ok(_) => panic!("the config should be refused"),
            Err(err) => {
                let d = err.diagnostics();
                assert_eq!(d.len(), 1, "{err}");
                d[0].clone()
            }
        }
    }
}

/// `agent:` lines, indented under the key (the config above has `agent:` on line 2).
const CLAUDE: &str = "  preset: claude-code\n  model: sonnet\n";

/// The 1-based line of `different_model_from` in the config file.
fn review_line(file: &Path) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    1 + text
        .lines()
        .position(|l| l.contains("different_model_from"))
        .expect("the field is written")
}

fn assert_at_review_field(d: &Diagnostic, file: &Path, fragment: &str) {
    assert_eq!(d.file, file.display().to_string(), "{d}");
    assert_eq!(
        (d.line, d.field.as_str()),
        (
            review_line(file),
            "pipeline_stages[1].review.different_model_from"
        ),
        "{d}"
    );
    assert!(d.message.contains(fragment), "{d}\nexpected {fragment:?}");
}

#[test]
fn the_same_model_on_both_stages_is_refused_with_file_and_line() {
    // Both stages run `agent:`'s model: nothing makes the reviewer different.
    let f = Fixture::write(CLAUDE, "", "", "");
    let d = f.refused();
    assert_at_review_field(
        &d,
        &f.path(),
        "`qa` runs model `sonnet`, the same as `backend`",
    );
    // `pipeline validate` says the same, and exits 2.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "validate", "--config"])
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("pipeline.yaml:{}:", review_line(&f.path()))),
        "{stderr}"
    );
}

#[test]
fn a_different_model_in_the_role_file_is_accepted() {
    let f = Fixture::write(CLAUDE, "", "model: opus\n", "");
    let cfg = f.load().unwrap_or_else(|e| panic!("{e}"));
    let review = cfg.stages[1].review.as_ref().unwrap();
    assert!(review.fresh_session);
    assert_eq!(review.different_model_from.as_deref(), Some("backend"));
}

#[test]
fn a_route_that_brings_back_the_reviewed_model_is_refused() {
    let routes = "    routes:\n\
                  \x20     - name: cheap\n\
                  \x20       when: {labels: [small]}\n\
                  \x20       agent: {model: sonnet}\n";
    let f = Fixture::write(CLAUDE, "", "model: opus\n", routes);
    let d = f.refused();
    assert_at_review_field(
        &d,
        &f.path(),
        "`qa` route cheap runs model `sonnet`, the same as `backend`",
    );
    // The reviewed stage's role file counts too: backend on sonnet, qa on `agent:`'s opus.
    let f = Fixture::write(
        "  preset: claude-code\n  model: opus\n",
        "model: sonnet\n",
        "",
        "",
    );
    f.load()
        .unwrap_or_else(|e| panic!("different models load: {e}"));
}

#[test]
fn a_model_in_the_command_argv_counts() {
    let agent = "  preset: claude-code\n  command: [claude, --model, haiku]\n";
    let f = Fixture::write(agent, "", "", "");
    assert_at_review_field(&f.refused(), &f.path(), "runs model `haiku`");
    let f = Fixture::write(agent, "", "model: opus\n", "");
    f.load().unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn an_unknown_model_is_refused() {
    // Claude Code's own default model is whatever the CLI picks: sortie cannot compare it.
    let f = Fixture::write("  preset: claude-code\n", "", "model: opus\n", "");
    assert_at_review_field(
        &f.refused(),
        &f.path(),
        "cannot tell which model `backend` uses: set agent.model",
    );
    // A plain command: sortie does not know what it runs.
    let f = Fixture::write("  command: [my-agent, --model, x]\n", "", "", "");
    assert_at_review_field(&f.refused(), &f.path(), "cannot tell which model `qa` uses");
}

#[test]
fn different_model_from_must_name_another_stage() {
    let f = Fixture::write(CLAUDE, "", "model: opus\n", "");
    let text = std::fs::read_to_string(f.path()).unwrap();
    std::fs::write(
        f.path(),
        text.replace(
            "different_model_from: backend",
            "different_model_from: nosuch",
        ),
    )
    .unwrap();
    assert_at_review_field(
        &f.refused(),
        &f.path(),
        "no stage has role `nosuch`; expected one of: backend",
    );
    std::fs::write(
        f.path(),
        text.replace("different_model_from: backend", "different_model_from: qa"),
    )
    .unwrap();
    assert_at_review_field(&f.refused(), &f.path(), "this stage's own role");
}

/// The run side, with the fake `claude` on a local board: qa has `fresh_session: true`,
/// backend does not. Attempt 1 of each is cut after the stream named its session; attempt
/// 2 of backend resumes it, attempt 2 of qa starts fresh, and each success block records
/// the model that ran it.
#[test]
fn a_fresh_session_stage_never_resumes_and_its_block_records_the_model() {
    use crate::common::{repo, Sandbox};
    let fake = repo().join("tests/fixtures/agents/fake-claude");
    let config = format!(
        "tracker: {{kind: local, path: board}}\n\
         state_root: state\n\
         roles_dir: roles\n\
         agent:\n\
         \x20 preset: claude-code\n\
         \x20 command: [\"{fake}\"]\n\
         \x20 model: sonnet\n\
         retry: {{max_attempts: 2, backoff_base_seconds: 1, backoff_max_seconds: 1}}\n\
         pipeline_stages:\n\
         \x20 - {{role: backend, claim_status: ready, success_status: done, failure_status: blocked}}\n\
         \x20 - role: qa\n\
         \x20   claim_status: code-review\n\
         \x20   success_status: done\n\
         \x20   failure_status: blocked\n\
         \x20   entry: true\n\
         \x20   review: {{fresh_session: true, different_model_from: backend}}\n",
        fake = fake.display()
    );
    let sb = Sandbox::with_config(&config);
    let roles = sb.path().join("roles");
    std::fs::create_dir(&roles).unwrap();
    // Each role's fake writes its argv and prompt to its own files; the scenario is the
    // role file's, rewritten between ticks (each tick reads the role files again).
    let write_roles = |scenario: &str| {
        for (role, model) in [("backend", None), ("qa", Some("opus"))] {
            let dir = sb.path().display();
            let model = model.map_or_else(String::new, |m| format!("model: {m}\n"));
            let text = format!(
                "---\n{model}env: {{FAKE_SCENARIO: {scenario}, FAKE_ARGV_FILE: \"{dir}/{role}.argv\", \
                 FAKE_STDIN_FILE: \"{dir}/{role}.prompt\"}}\n---\n\
                 You are {role} on ticket {{{{ ticket.id }}}}: {{{{ ticket.title }}}}.\n"
            );
            std::fs::write(roles.join(format!("{role}.md")), text).unwrap();
        }
    };
    write_roles("cut");
    let built = sb.add("build it", "ready", &[]);
    let reviewed = sb.add("review it", "code-review", &[]);
    let argv = |role: &str| -> Vec<String> {
        std::fs::read_to_string(sb.path().join(format!("{role}.argv")))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"].as_array().unwrap().len(), 2, "{report:#}");
    for role in ["backend", "qa"] {
        assert!(
            !argv(role).contains(&"--resume".to_string()),
            "{role}: {:?}",
            argv(role)
        );
    }
    let first_prompt = std::fs::read_to_string(sb.path().join("qa.prompt")).unwrap();

    write_roles("success");
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["attempt"], 2, "{report:#}");
    assert!(
        argv("backend").windows(2).any(|w| w[0] == "--resume"),
        "backend resumes its session: {:?}",
        argv("backend")
    );
    let qa = argv("qa");
    assert!(
        !qa.contains(&"--resume".to_string()),
        "qa starts fresh: {qa:?}"
    );
    assert!(qa.windows(2).any(|w| w == ["--model", "opus"]), "{qa:?}");
    // The fresh prompt is the template on the ticket, as the first one was: nothing of
    // the cut run's stream is in it.
    let prompt = std::fs::read_to_string(sb.path().join("qa.prompt")).unwrap();
    assert_eq!(prompt, first_prompt);

    let model_of = |id: &str| {
        sb.blocks(id).into_iter().find_map(|b| match b {
            sortie::block::OutcomeBlock::Success(s) => s.evidence.and_then(|e| e.model),
            _ => None,
        })
    };
    assert_eq!(sb.ticket(&built).status, "done");
    assert_eq!(sb.ticket(&reviewed).status, "done");
    assert_eq!(model_of(&built).as_deref(), Some("sonnet"));
    assert_eq!(model_of(&reviewed).as_deref(), Some("opus"));
}
