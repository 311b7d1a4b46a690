//! A running agent's pipes: its output copied to the run log and kept as a tail, its stdout
//! fed to its preset's event stream, and, for an ACP agent, the client's messages written
//! back on its stdin.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::presets::EventStream;

/// Output kept in memory for the summary of an agent that wrote no result file.
pub(super) const TAIL_BYTES: usize = 4096;
/// Lines of that tail that make the summary.
const SUMMARY_LINES: usize = 20;

/// The client's side of an ACP conversation, for the stdout reader: where its messages go,
/// whom to tell that the conversation is over, and the signal to cancel the turn.
pub(super) struct Conversation {
    pub(super) to_agent: mpsc::UnboundedSender<String>,
    pub(super) over: Arc<Notify>,
    pub(super) cancel: CancellationToken,
    /// Cancelled once the handshake is over (the prompt is sent, or the conversation ended).
    pub(super) handshaken: CancellationToken,
}

impl Conversation {
    /// Send what `events` has to say, log its notes, and tell when it is over.
    fn flush(&self, events: &mut EventStream, log: &Mutex<std::fs::File>) {
        for line in events.take_outgoing() {
            let _ = self.to_agent.send(line);
        }
        let notes = events.take_log();
        if !notes.is_empty() {
            use std::io::Write;
            let mut file = log.lock().expect("log lock");
            for note in notes {
                let _ = writeln!(file, "[sortie] {note}");
            }
        }
        if !events.in_handshake() {
            self.handshaken.cancel();
        }
        if events.conversation_over() {
            self.over.notify_one();
        }
    }
}

/// Write each message sent on the returned channel to the agent's stdin as one line, and to
/// the log. A separate task, so that reading the agent never waits on writing to it.
pub(super) fn spawn_writer(
    mut stdin: ChildStdin,
    log: Arc<Mutex<std::fs::File>>,
    close: tokio_util::sync::CancellationToken,
) -> mpsc::UnboundedSender<String> {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        // `close` ends the conversation: stdin is dropped, and the agent reads end of file.
        loop {
            let mut line = tokio::select! {
                line = rx.recv() => match line {
                    Some(line) => line,
                    None => break,
                },
                _ = close.cancelled() => break,
            };
            {
                use std::io::Write;
                let mut file = log.lock().expect("log lock");
                let _ = writeln!(file, "[sortie -> agent] {line}");
            }
            line.push('\n');
            if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
    });
    tx
}

/// Copy `stream` to the log, keep its tail, and feed `events` (a CLI preset's stdout parser),
/// which the task hands back when the stream closes. With a `conversation` (ACP), what the
/// parser answers goes back to the agent, and a cancel asks the agent to end its turn.
pub(super) fn spawn_reader(
    mut stream: impl AsyncRead + Unpin + Send + 'static,
    log: Arc<Mutex<std::fs::File>>,
    last_output: Arc<Mutex<Instant>>,
    tail: Arc<Mutex<VecDeque<u8>>>,
    mut events: Option<EventStream>,
    conversation: Option<Conversation>,
) -> tokio::task::JoinHandle<Option<EventStream>> {
    // The run's span (`pipeline::run`): it gets the agent's session id as soon as the
    // stream reports it, so every later line of the run carries it.
    let span = tracing::Span::current();
    let mut session_known = false;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 8192];
        if let (Some(conversation), Some(events)) = (&conversation, &mut events) {
            conversation.flush(events, &log);
        }
        let never = CancellationToken::new();
        let cancel = conversation.as_ref().map_or(&never, |c| &c.cancel);
        let mut cancelled = false;
        loop {
            let read = tokio::select! {
                read = stream.read(&mut buf) => read,
                _ = cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    if let (Some(conversation), Some(events)) = (&conversation, &mut events) {
                        events.cancel_turn();
                        conversation.flush(events, &log);
                    }
                    continue;
                }
            };
            let n = match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            *last_output.lock().expect("last_output lock") = Instant::now();
            {
                use std::io::Write;
                let mut file = log.lock().expect("log lock");
                let _ = file.write_all(&buf[..n]);
            }
            {
                let mut tail = tail.lock().expect("tail lock");
                tail.extend(&buf[..n]);
                let excess = tail.len().saturating_sub(TAIL_BYTES);
                tail.drain(..excess);
            }
            if let Some(events) = &mut events {
                events.feed(&buf[..n]);
                if let Some(conversation) = &conversation {
                    conversation.flush(events, &log);
                }
                if !session_known {
                    if let Some(session) = events.session_id() {
                        session_known = true;
                        span.record("session_id", tracing::field::display(session));
                        tracing::info!(parent: &span, "agent session started");
                    }
                }
            }
        }
        if let Some(events) = &mut events {
            events.end();
        }
        events
    })
}

pub(super) fn summary_from_tail(tail: &VecDeque<u8>) -> String {
    let bytes: Vec<u8> = tail.iter().copied().collect();
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let start = lines.len().saturating_sub(SUMMARY_LINES);
    lines[start..].join("\n")
}
