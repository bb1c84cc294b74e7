//! Hosted playtests (docs/hosted.md): a team uploads its build, and a
//! `gameplan serve --executor local|ray` server plays the plan on its own
//! machines, asking the price first and settling once.
//!
//! - [`archive`]: the build as it travels (a gzipped tar named by its
//!   sha256), packed the same every time and checked before a quote.
//! - [`host`]: the server's side of the calls `serve` hands over (its
//!   `Hosting`): keeping a build, pricing a plan of it, admitting one,
//!   giving a playtest's files.
//! - [`worker`]: the server's player: it drives each admitted playtest
//!   through its phases with gameplan itself on the executor, ends each
//!   cell's run in the ledger, settles, and after a restart takes up what
//!   was admitted.
//!
//! The client, `gameplan hosted quote | run | status | cancel`, is the
//! command line's (`cli::hosted`).
//!
//! The money is the ledger's: an admission is a `register` of the quoted
//! cells (one charge under a journaled key), each cell's run moves as a
//! delivered run does, and the settlement is the ledger's `finish`, so
//! every refund rule is the one the rest of gameplan has: a cell the
//! ledger never saw play is refunded. What travels is
//! `crate::backend::hosted`'s.

pub mod archive;
pub mod host;
pub mod worker;
