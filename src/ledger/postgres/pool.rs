//! A few database connections, each owned by its own thread, and requests sent to them
//! over a channel.
//!
//! The `postgres` client blocks on a private tokio runtime, which panics when it is
//! entered from inside another runtime, and the [`crate::ledger::Ledger`] trait is
//! synchronous and called from tokio tasks (current-thread and multi-thread alike). So no
//! caller ever touches a client: it sends a closure to the pool and blocks on the reply,
//! exactly as it would block on SQLite's file lock. The worker threads are plain std
//! threads with no runtime of their own around the client.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement};

use crate::ledger::LedgerError;

/// One connection with its prepared statements (a claim is several statements, and
/// preparing each again would double its round trips).
pub(super) struct Conn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
}

/// Statement parameters.
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

impl Conn {
    fn statement(&mut self, sql: &'static str) -> Result<Statement, LedgerError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).map_err(db_error)?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Every row of a query.
    pub(super) fn rows(
        &mut self,
        sql: &'static str,
        params: Params,
    ) -> Result<Vec<Row>, LedgerError> {
        let statement = self.statement(sql)?;
        self.client.query(&statement, params).map_err(db_error)
    }

    /// The row of a query returning at most one.
    pub(super) fn row(
        &mut self,
        sql: &'static str,
        params: Params,
    ) -> Result<Option<Row>, LedgerError> {
        let statement = self.statement(sql)?;
        self.client.query_opt(&statement, params).map_err(db_error)
    }

    /// Run a statement; the number of rows it changed.
    pub(super) fn exec(&mut self, sql: &'static str, params: Params) -> Result<u64, LedgerError> {
        let statement = self.statement(sql)?;
        self.client.execute(&statement, params).map_err(db_error)
    }

    /// Run SQL text without parameters (transaction control, migrations).
    pub(super) fn batch(&mut self, sql: &str) -> Result<(), LedgerError> {
        self.client.batch_execute(sql).map_err(db_error)
    }

    /// Run `body` in one transaction opened with `begin`; commit on success, roll back on
    /// error.
    pub(super) fn transaction<T>(
        &mut self,
        begin: &str,
        body: impl FnOnce(&mut Conn) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        self.batch(begin)?;
        match body(self) {
            Ok(value) => {
                self.batch("COMMIT")?;
                Ok(value)
            }
            Err(err) => {
                // A failed rollback means a dead connection, which the pool drops anyway.
                let _ = self.batch("ROLLBACK");
                Err(err)
            }
        }
    }
}

/// A request for a worker.
type Job = Box<dyn FnOnce(&mut Worker) + Send>;

/// How the pool's connections are opened.
struct Settings {
    config: postgres::Config,
    /// Where they connect to (no credentials), for messages.
    target: String,
    /// Session settings run once on each new connection.
    setup: Option<String>,
}

/// A connection's holder (a worker thread, or an idle one for inline callers): the
/// connection is opened on first use and after a failure.
struct Worker {
    settings: Arc<Settings>,
    conn: Option<Conn>,
}

impl Worker {
    fn new(settings: &Arc<Settings>) -> Worker {
        Worker {
            settings: Arc::clone(settings),
            conn: None,
        }
    }

    fn conn(&mut self) -> Result<&mut Conn, LedgerError> {
        if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.conn = None;
        }
        match &mut self.conn {
            Some(conn) => Ok(conn),
            slot @ None => {
                let settings = &self.settings;
                let mut client = settings.config.connect(NoTls).map_err(|err| {
                    LedgerError::Unavailable(format!(
                        "cannot connect to {}: {}",
                        settings.target,
                        with_cause(&err)
                    ))
                })?;
                if let Some(setup) = &settings.setup {
                    client.batch_execute(setup).map_err(db_error)?;
                }
                Ok(slot.insert(Conn {
                    client,
                    statements: HashMap::new(),
                }))
            }
        }
    }
}

/// The connection pool: `size` worker threads sharing one request queue, and connections
/// for callers outside any tokio runtime (CLI commands, benches), who run their call on
/// their own thread and skip the two thread hand-offs.
pub(super) struct Pool {
    jobs: Mutex<Sender<Job>>,
    settings: Arc<Settings>,
    idle: Mutex<Vec<Worker>>,
    size: usize,
}

impl Pool {
    /// Start `size` workers; connections are opened lazily, by the first requests, and
    /// each runs `setup` (session settings) once when opened.
    pub(super) fn start(
        config: postgres::Config,
        target: String,
        setup: Option<String>,
        size: usize,
    ) -> Pool {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let settings = Arc::new(Settings {
            config,
            target,
            setup,
        });
        for index in 0..size.max(1) {
            let queue = Arc::clone(&queue);
            let mut worker = Worker::new(&settings);
            // A worker that cannot be spawned only makes the pool smaller; with none at
            // all, every call reports the ledger unavailable instead of hanging.
            let _ = std::thread::Builder::new()
                .name(format!("sortie-pg-{index}"))
                .spawn(move || work(&queue, &mut worker));
        }
        Pool {
            jobs: Mutex::new(jobs),
            settings,
            idle: Mutex::new(Vec::new()),
            size: size.max(1),
        }
    }

    /// Where the pool connects to (no credentials), for messages.
    pub(super) fn target(&self) -> &str {
        &self.settings.target
    }

    /// Run `body` on a pooled connection and wait for its answer. A connection error
    /// drops the connection (the next call opens a fresh one) and is reported as
    /// [`LedgerError::Unavailable`]. When the failing connection was an old pooled one
    /// (the server restarted or dropped it while idle), `body` runs once more on a fresh
    /// connection: every ledger operation gives the same result when repeated with the same
    /// arguments (claims renew for the same claimer, puts answer `Exists`, updates and
    /// upserts write the same row), so a repeat after a lost answer is harmless.
    ///
    /// A caller outside any tokio runtime runs `body` on its own thread, on an idle
    /// connection of its own (at most `size` are kept idle); inside a runtime, where the
    /// `postgres` client would panic, a worker thread runs it.
    pub(super) fn call<T: Send + 'static>(
        &self,
        body: impl Fn(&mut Conn) -> Result<T, LedgerError> + Send + 'static,
    ) -> Result<T, LedgerError> {
        if tokio::runtime::Handle::try_current().is_err() {
            let idle = || self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let popped = idle().pop();
            let mut worker = popped.unwrap_or_else(|| Worker::new(&self.settings));
            let result = run(&mut worker, &body);
            let mut idle = idle();
            if idle.len() < self.size {
                idle.push(worker);
            }
            return result;
        }
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |worker: &mut Worker| {
            let _ = reply.send(run(worker, &body));
        });
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .send(job);
        let stopped =
            || LedgerError::Unavailable(format!("{}: ledger workers stopped", self.target()));
        sent.map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }
}

/// Run `body` on `worker`'s connection, once more on a fresh one if an old pooled
/// connection turned out dead (see [`Pool::call`]).
fn run<T>(
    worker: &mut Worker,
    body: &impl Fn(&mut Conn) -> Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    let reused = worker.conn.is_some();
    let mut result = worker.conn().and_then(body);
    if matches!(result, Err(LedgerError::Unavailable(_))) {
        worker.conn = None;
        if reused {
            result = worker.conn().and_then(body);
            if matches!(result, Err(LedgerError::Unavailable(_))) {
                worker.conn = None;
            }
        }
    }
    result
}

fn work(queue: &Mutex<Receiver<Job>>, worker: &mut Worker) {
    loop {
        let job = {
            let queue = queue
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            queue.recv()
        };
        match job {
            // A panicking job drops its reply sender: the caller gets `Unavailable`, and
            // this worker starts over with a fresh connection.
            Ok(job) => {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(worker))).is_err() {
                    worker.conn = None;
                }
            }
            Err(_) => return,
        }
    }
}

/// A `postgres` error as a ledger error: a lost or refused connection, or a server that
/// is shutting down or starting, is [`LedgerError::Unavailable`]; anything the server
/// answered otherwise is [`LedgerError::Database`].
pub(super) fn db_error(err: postgres::Error) -> LedgerError {
    let unavailable_state = err.code().is_some_and(|code| {
        let code = code.code();
        // Class 08: connection exception; 57P01-57P03: admin/crash shutdown, cannot
        // connect now; 53300: too many connections.
        code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
    });
    // `postgres::Error`'s own text for a server error is just "db error".
    let text = match err.as_db_error() {
        Some(db) => {
            let mut text = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            text
        }
        None => with_cause(&err),
    };
    if unavailable_state {
        LedgerError::Unavailable(text)
    } else if err.as_db_error().is_some() {
        LedgerError::Database(text.into())
    } else if text.starts_with("error deserializing") || text.starts_with("error serializing") {
        LedgerError::Corrupt(text)
    } else {
        // I/O, a closed connection, a timeout, an unexpected protocol message.
        LedgerError::Unavailable(text)
    }
}

/// An error's text followed by its cause's (`error connecting to server: Connection
/// refused (os error 111)`): `postgres::Error` keeps the useful part in its source.
fn with_cause(err: &postgres::Error) -> String {
    match std::error::Error::source(err) {
        Some(cause) => format!("{err}: {cause}"),
        None => err.to_string(),
    }
}
