//! Presets for real agent CLIs: the argv each preset builds from the `agent:` options, and the
//! incremental parsers that turn the CLI's JSON event stream on stdout into an outcome and usage.
//!
//! Parsing is pure: `EventStream` is fed bytes as they arrive and asked for a verdict once the
//! process has ended; the runner in `process.rs` does the I/O.

mod acp;
mod claude;
mod codex;
mod lines;

use crate::block::{Category, NextAction};
use crate::config::{AgentConfig, AgentPreset};

use super::outcome::{AgentOutcome, Usage};
use super::progress::{AgentEvent, Progress, ProgressHandle};
use lines::{LineSplitter, Piece};

pub use acp::AcpOptions;

pub use lines::MAX_EVENT_LINE_BYTES;

/// Longest summary or detail taken from an event stream (16 KiB); longer text is cut, with a
/// note pointing at the run log, which keeps the whole stream.
pub const MAX_STREAM_TEXT_BYTES: usize = 16 * 1024;

/// The argv that runs `agent`, built without a shell and without the prompt (which goes on
/// stdin for every preset).
///
/// - `command`: `agent.command` as is.
/// - `claude-code`: `agent.command` (default `claude`), then `-p --output-format stream-json
///   --verbose`, `--model M`, `--permission-mode P`, `--max-turns N`, `--allowedTools a,b`,
///   then `extra_args`.
/// - `codex`: `agent.command` (default `codex`), then `exec --json`, `--model M`,
///   `--sandbox S`, then `extra_args`, then `-` (read the prompt from stdin).
/// - `acp`: `agent.command`, then `extra_args` (the model and the prompt go over the
///   protocol, and so does the session to resume).
pub fn preset_argv(agent: &AgentConfig) -> Vec<String> {
    resume_argv(agent, None)
}

/// Reason code of a resume whose session the CLI no longer has (the runner then starts
/// afresh, with a note in the log).
pub const SESSION_NOT_FOUND: &str = "agent.session_not_found";

/// The argv that resumes `session` (a Claude Code session id, a Codex thread id) when given,
/// else `preset_argv`: Claude Code gets `--resume <id>` before `extra_args`; Codex runs
/// `exec --json ... resume <id> -`. The `command` preset has no sessions and ignores it.
pub fn resume_argv(agent: &AgentConfig, session: Option<&str>) -> Vec<String> {
    let mut argv = agent.program_argv();
    match agent.preset {
        AgentPreset::Command => {}
        AgentPreset::Acp => argv.extend(agent.extra_args.iter().cloned()),
        AgentPreset::ClaudeCode => {
            argv.extend(["-p", "--output-format", "stream-json", "--verbose"].map(String::from));
            push_flag(&mut argv, "--model", agent.model.clone());
            push_flag(
                &mut argv,
                "--permission-mode",
                agent.permission_mode.clone(),
            );
            push_flag(
                &mut argv,
                "--max-turns",
                agent.max_turns.map(|n| n.to_string()),
            );
            let tools = (!agent.allowed_tools.is_empty()).then(|| agent.allowed_tools.join(","));
            push_flag(&mut argv, "--allowedTools", tools);
            push_flag(&mut argv, "--resume", session.map(str::to_string));
            argv.extend(agent.extra_args.iter().cloned());
        }
        AgentPreset::Codex => {
            argv.extend(["exec", "--json"].map(String::from));
            push_flag(&mut argv, "--model", agent.model.clone());
            push_flag(&mut argv, "--sandbox", agent.sandbox.clone());
            argv.extend(agent.extra_args.iter().cloned());
            if let Some(thread) = session {
                argv.extend(["resume".to_string(), thread.to_string()]);
            }
            argv.push("-".to_string());
        }
    }
    argv
}

fn push_flag(argv: &mut Vec<String>, name: &str, value: Option<String>) {
    if let Some(value) = value {
        argv.push(name.to_string());
        argv.push(value);
    }
}

/// Counts of what a stream held, for failure details.
#[derive(Debug, Default, Clone, Copy)]
struct LineCounts {
    /// JSON event lines understood.
    events: u64,
    /// Lines that were not JSON events (progress text, warnings, garbage).
    noise: u64,
    /// Lines over `MAX_EVENT_LINE_BYTES`, skipped unread.
    overlong: u64,
}

/// How one line of a stream was taken by a parser.
#[derive(Debug, PartialEq, Eq)]
enum Taken {
    /// A JSON event of this CLI (known or not).
    Event,
    /// Not an event: not JSON, or JSON of the wrong shape.
    Noise,
}

/// A parser for one CLI's events.
#[derive(Debug)]
enum Parser {
    Claude(claude::ClaudeStream),
    Codex(codex::CodexStream),
    Acp(Box<acp::AcpSession>),
}

/// How a run's stream is judged, beyond the preset, and where its progress goes.
#[derive(Debug, Clone, Default)]
pub struct StreamOptions {
    /// Accept a Claude Code success whose tool calls were denied (`allow_permission_denials`).
    pub allow_permission_denials: bool,
    /// Usage the resumed session had already reported, subtracted from what Codex reports
    /// (its usage after `exec resume` is the whole thread's).
    pub usage_baseline: Option<Usage>,
    /// Where the run's last event, turns and usage so far are published as the stream is
    /// read (the daemon's live runs); `None` publishes nothing.
    pub progress: Option<ProgressHandle>,
    /// What the `acp` preset's client needs (policy, model, session to load, workspace,
    /// result file, prompt); unused by the other presets.
    pub acp: AcpOptions,
    /// The run's spending limits, handed the usage as it grows (`budgets:`); `None`
    /// watches nothing.
    pub budget: Option<crate::budget::BudgetWatch>,
}

/// Reads an agent's stdout as its preset's event stream, one line at a time, in bounded memory.
#[derive(Debug)]
pub struct EventStream {
    lines: LineSplitter,
    parser: Parser,
    counts: LineCounts,
    /// Where progress goes, and the count of events last published there.
    progress: Option<(ProgressHandle, u64)>,
    /// The run's limits, checked after every chunk read.
    budget: Option<crate::budget::BudgetWatch>,
}

impl EventStream {
    /// A reader for `preset`'s stream; `None` for `command`, whose stdout is free text.
    pub fn new(preset: AgentPreset) -> Option<Self> {
        Self::with_options(preset, &StreamOptions::default())
    }

    /// A reader for `preset`'s stream, judged with `options`.
    pub fn with_options(preset: AgentPreset, options: &StreamOptions) -> Option<Self> {
        let parser = match preset {
            AgentPreset::Command => return None,
            AgentPreset::ClaudeCode => {
                let mut p = claude::ClaudeStream::default();
                p.allow_permission_denials = options.allow_permission_denials;
                Parser::Claude(p)
            }
            AgentPreset::Codex => {
                let mut p = codex::CodexStream::default();
                p.baseline = options.usage_baseline;
                Parser::Codex(p)
            }
            AgentPreset::Acp => Parser::Acp(Box::new(acp::AcpSession::new(options.acp.clone()))),
        };
        Some(EventStream {
            lines: LineSplitter::new(MAX_EVENT_LINE_BYTES),
            parser,
            counts: LineCounts::default(),
            progress: options.progress.clone().map(|p| (p, 0)),
            budget: options.budget.clone(),
        })
    }

    /// Parse a stream held whole in memory (recorded streams, tests).
    pub fn parse(preset: AgentPreset, text: &[u8]) -> Option<Self> {
        let mut stream = Self::new(preset)?;
        stream.feed(text);
        stream.end();
        Some(stream)
    }

    /// Feed the next chunk of stdout, as read.
    pub fn feed(&mut self, chunk: &[u8]) {
        let (parser, counts) = (&mut self.parser, &mut self.counts);
        self.lines
            .push(chunk, &mut |piece| take_piece(parser, counts, piece));
        self.publish();
        self.watch_budget();
    }

    /// Hand the usage so far to the run's budget watch, which stops the run at a limit.
    /// The final event's figures are checked too: a run whose last report is over a
    /// limit (usage reported all at once, at the end) is not handed on (issue #52).
    fn watch_budget(&self) {
        if let (Some(watch), Some(usage)) = (&self.budget, self.usage()) {
            watch.observe(&usage);
        }
    }

    /// stdout closed: parse a last line that had no newline.
    pub fn end(&mut self) {
        let (parser, counts) = (&mut self.parser, &mut self.counts);
        self.lines
            .finish(&mut |piece| take_piece(parser, counts, piece));
        self.publish();
        self.watch_budget();
    }

    /// Messages to write to the agent's stdin (the `acp` preset's requests and answers),
    /// one line each, without the newline; always empty for the other presets.
    pub fn take_outgoing(&mut self) -> Vec<String> {
        match &mut self.parser {
            Parser::Acp(p) => p.take_outgoing(),
            _ => Vec::new(),
        }
    }

    /// Lines for the run log about what sortie answered (ACP permission requests).
    pub fn take_log(&mut self) -> Vec<String> {
        match &mut self.parser {
            Parser::Acp(p) => p.take_log(),
            _ => Vec::new(),
        }
    }

    /// Whether an ACP conversation is over (its prompt turn stopped, or it failed): the
    /// agent, which keeps running, is then stopped. Always false for the other presets,
    /// whose process ends by itself.
    pub fn conversation_over(&self) -> bool {
        match &self.parser {
            Parser::Acp(p) => p.finished(),
            _ => false,
        }
    }

    /// How an ACP agent's session began, once it did; `None` for the other presets (the
    /// runner knows theirs).
    pub fn session_start(&self) -> Option<crate::agent::SessionStart> {
        match &self.parser {
            Parser::Acp(p) => p.session_start(),
            _ => None,
        }
    }

    /// Whether an ACP agent's handshake is still going on (a request before the prompt is
    /// unanswered). Always false for the other presets.
    pub fn in_handshake(&self) -> bool {
        match &self.parser {
            Parser::Acp(p) => p.handshake_waiting().is_some(),
            _ => false,
        }
    }

    /// Ask an ACP agent to stop its turn (`session/cancel`); nothing for the other presets.
    pub fn cancel_turn(&mut self) {
        if let Parser::Acp(p) = &mut self.parser {
            p.cancel();
        }
    }

    /// A failure that decides the run whatever its result file says (an ACP stop reason
    /// such as `max_tokens`, a failed handshake); `None` for the other presets.
    pub fn decisive_outcome(&self) -> Option<AgentOutcome> {
        match &self.parser {
            Parser::Acp(p) => p.decisive(),
            _ => None,
        }
    }

    /// The failure of an ACP run stopped after `waited` (a stall or the run timeout) while
    /// the handshake was unanswered; `None` otherwise.
    pub fn handshake_failure(&self, waited: &str) -> Option<AgentOutcome> {
        match &self.parser {
            Parser::Acp(p) => p.handshake_failure(waited),
            _ => None,
        }
    }

    /// What the client did that a person should know (an ACP resume that fell back).
    pub fn notes(&self) -> Vec<String> {
        match &self.parser {
            Parser::Acp(p) => p.notes().to_vec(),
            _ => Vec::new(),
        }
    }

    /// Model turns so far, once the stream reported one.
    pub fn turns(&self) -> Option<u32> {
        match &self.parser {
            Parser::Claude(p) => p.turns(),
            Parser::Codex(p) => p.turns(),
            Parser::Acp(p) => p.turns(),
        }
    }

    /// The last event worth showing a person (kind, short text), once there was one.
    pub fn last_event(&self) -> Option<(&'static str, &str)> {
        match &self.parser {
            Parser::Claude(p) => p.last_event().1,
            Parser::Codex(p) => p.last_event().1,
            Parser::Acp(p) => p.last_event().1,
        }
    }

    /// Publish the progress, when something was read since the last time. Called once
    /// per chunk, not per line: a burst of events costs one update.
    fn publish(&mut self) {
        let seen = match &self.parser {
            Parser::Claude(p) => p.last_event().0,
            Parser::Codex(p) => p.last_event().0,
            Parser::Acp(p) => p.last_event().0,
        };
        let Some((handle, published)) = self.progress.as_ref() else {
            return;
        };
        if seen == *published {
            return;
        }
        let previous = handle.snapshot();
        let last_event = match self.last_event() {
            Some((kind, text)) => Some(AgentEvent {
                kind: kind.to_string(),
                text: text.to_string(),
                at: chrono::Utc::now(),
            }),
            None => previous.last_event,
        };
        handle.set(Progress {
            last_event,
            turns: self.turns(),
            usage: self.usage(),
            rate_limits: self.rate_limits(),
        });
        if let Some((_, published)) = self.progress.as_mut() {
            *published = seen;
        }
    }

    /// Tokens and cost reported so far (`None` when the stream reported none).
    pub fn usage(&self) -> Option<Usage> {
        match &self.parser {
            Parser::Claude(p) => p.usage(),
            Parser::Codex(p) => p.usage(),
            Parser::Acp(p) => p.usage(),
        }
    }

    /// The latest rate-limit report of each limit type (Claude Code's
    /// `rate_limit_event`); empty for the other presets, whose streams carry none.
    pub fn rate_limits(&self) -> Vec<crate::rate_limit::RateLimit> {
        match &self.parser {
            Parser::Claude(p) => p.rate_limits().to_vec(),
            Parser::Codex(_) | Parser::Acp(_) => Vec::new(),
        }
    }

    /// Usage as the CLI reported it: for Codex after `exec resume`, the thread's cumulative
    /// usage (which `usage` reduces to this run's share); else the same as `usage`.
    pub fn reported_usage(&self) -> Option<Usage> {
        match &self.parser {
            Parser::Claude(p) => p.usage(),
            Parser::Codex(p) => p.reported_usage(),
            Parser::Acp(p) => p.usage(),
        }
    }

    /// The session the CLI reported (Claude Code's `session_id`, Codex's `thread_id`), to
    /// resume it on the next attempt.
    pub fn session_id(&self) -> Option<&str> {
        match &self.parser {
            Parser::Claude(p) => p.session_id(),
            Parser::Codex(p) => p.thread_id(),
            Parser::Acp(p) => p.session_id(),
        }
    }

    /// The outcome of a run whose process exited with `exit_code` after this stream.
    /// A final event decides whatever the exit status; without one the run is
    /// `agent.stream_incomplete`. `stderr_tail` goes into that failure's detail.
    pub fn outcome(&self, exit_code: Option<i32>, stderr_tail: &str) -> AgentOutcome {
        let ended = match &self.parser {
            Parser::Claude(p) => p.outcome(),
            Parser::Codex(p) => p.outcome(),
            Parser::Acp(_) => None,
        };
        if let Some(outcome) = ended {
            return outcome;
        }
        if let Parser::Codex(p) = &self.parser {
            if let Some(outcome) = p.outcome_from_stderr(stderr_tail) {
                return outcome;
            }
        }
        let LineCounts {
            events,
            noise,
            overlong,
        } = self.counts;
        let status = match exit_code {
            Some(code) => format!("exit status {code}"),
            None => "killed by a signal".to_string(),
        };
        if let Parser::Acp(p) = &self.parser {
            let counts = format!(
                "{events} messages, {noise} other lines, {overlong} lines over {} MiB skipped",
                MAX_EVENT_LINE_BYTES / (1024 * 1024)
            );
            return p.outcome(&status, stderr_tail, &counts);
        }
        let (cli, final_event, last_words) = match &self.parser {
            Parser::Claude(p) => (
                "Claude Code",
                "`result`",
                p.last_words().map(str::to_string),
            ),
            Parser::Codex(p) => ("Codex", "`turn.completed` or `turn.failed`", p.last_words()),
            Parser::Acp(_) => ("The ACP agent", "`session/prompt` answer", None),
        };
        let mut detail = format!(
            "{cli}'s event stream ended without a {final_event} event ({status}; \
             {events} events, {noise} other lines, {overlong} lines over {} MiB skipped)",
            MAX_EVENT_LINE_BYTES / (1024 * 1024)
        );
        for (label, text) in [
            ("last words", last_words.as_deref()),
            ("stderr", Some(stderr_tail)),
        ] {
            if let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) {
                detail.push_str(&format!("\n{label}:\n{text}"));
            }
        }
        AgentOutcome::failure(
            "agent.stream_incomplete",
            Category::Transient,
            NextAction::Retry,
            clip(&detail),
        )
    }
}

fn take_piece(parser: &mut Parser, counts: &mut LineCounts, piece: Piece<'_>) {
    let line = match piece {
        Piece::Overlong => {
            counts.overlong += 1;
            return;
        }
        Piece::Line(bytes) => bytes,
    };
    let Ok(line) = std::str::from_utf8(line) else {
        counts.noise += 1;
        return;
    };
    let line = line.trim();
    if line.is_empty() {
        return;
    }
    let taken = if line.starts_with('{') {
        match parser {
            Parser::Claude(p) => p.line(line),
            Parser::Codex(p) => p.line(line),
            Parser::Acp(p) => p.line(line),
        }
    } else {
        Taken::Noise
    };
    match taken {
        Taken::Event => counts.events += 1,
        Taken::Noise => counts.noise += 1,
    }
}

/// `text` cut to `MAX_STREAM_TEXT_BYTES` at a character boundary, with a note when cut.
fn clip(text: &str) -> String {
    if text.len() <= MAX_STREAM_TEXT_BYTES {
        return text.to_string();
    }
    let mut end = MAX_STREAM_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[... cut at {} KiB; the run log has the whole stream]",
        &text[..end],
        MAX_STREAM_TEXT_BYTES / 1024
    )
}

#[cfg(test)]
mod tests;
