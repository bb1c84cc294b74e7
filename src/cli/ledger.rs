//! `gameplan ledger show | topup | token`: inspect and administer a ledger
//! file (the embedded backend's `.gameplan/ledger.sqlite` by default).

use std::path::{Path, PathBuf};

use super::{Context, LedgerCommand, LedgerFile};
use crate::backend::api::ApiError;
use crate::backend::api::Token;
use crate::backend::ledger::{Ledger, NewLedger};
use crate::exit_code::{Done, Failure};
use crate::text::escape_controls as shown;

/// The ledger file a command means: `--db`, or the state directory's.
pub(super) fn ledger_path(file: &LedgerFile) -> Result<PathBuf, String> {
    if let Some(db) = &file.db {
        return Ok(db.clone());
    }
    let (_, state_dir) = super::plan_runs::dirs(file.state_dir.as_deref());
    crate::state_dir::prepare(&state_dir).map_err(|e| {
        format!(
            "cannot create the state directory {}: {e}; check its permissions or pass --db FILE",
            state_dir.display()
        )
    })?;
    Ok(crate::backend::local::ledger_path(&state_dir))
}

fn open(file: &LedgerFile) -> Result<Ledger, Failure> {
    let path = ledger_path(file).map_err(|message| Failure::plan(format!("error: {message}\n")))?;
    // A file made here is the embedded kind, demo account included (the
    // tests and the local backend's users name it with --db too); a file
    // `serve` makes starts empty, and `serve` refuses the demo token anyway.
    Ledger::open_with(&path, NewLedger::Demo).map_err(|e| refused(&e, &path))
}

/// A refusal; every one is bad input or an unusable file (exit 3).
/// Escaped: a refusal may quote what was typed (an account id holding an
/// ESC), and that must not reach the terminal raw.
fn refused(e: &ApiError, path: &Path) -> Failure {
    Failure::plan(format!(
        "error: {} (ledger {})\n",
        shown(&e.message),
        path.display()
    ))
}

pub fn run(cx: &Context, command: &LedgerCommand) -> Done {
    let file = match command {
        LedgerCommand::Show { file, .. }
        | LedgerCommand::Topup { file, .. }
        | LedgerCommand::Token { file, .. } => file,
    };
    let ledger = open(file)?;
    let path = ledger.path().to_owned();
    match command {
        LedgerCommand::Show { json, .. } => match ledger.show() {
            Ok(view) if *json => {
                cx.console
                    .json(&serde_json::to_value(&view).unwrap_or_default());
                Ok(())
            }
            Ok(view) => {
                cx.console.out(&crate::report::ledger::show(&view, &path));
                Ok(())
            }
            Err(e) => Err(refused(&e, &path)),
        },
        LedgerCommand::Topup { account, cents, .. } => match ledger.topup(account, *cents) {
            Ok(balance) => {
                cx.console.out(&format!(
                    "Added {} to {}: the balance is {}.\n",
                    crate::report::ledger::dollars(*cents),
                    shown(account),
                    crate::report::ledger::dollars(balance)
                ));
                Ok(())
            }
            Err(e) => Err(refused(&e, &path)),
        },
        LedgerCommand::Token {
            revoke: Some(token),
            ..
        } => {
            let token = if token == "-" {
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
                line.trim().to_owned()
            } else {
                token.clone()
            };
            match ledger.revoke_token(&Token(token)) {
                Ok(account) => {
                    cx.console.err(&format!(
                        "Revoked a token of {}: every call with it is refused (401) from now on.\n",
                        shown(&account)
                    ));
                    Ok(())
                }
                Err(e) => Err(refused(&e, &path)),
            }
        }
        LedgerCommand::Token {
            scopes, account, ..
        } => match ledger.create_token(account, scopes) {
            Ok(new) => {
                // The secret goes to stdout alone, so `TOKEN=$(gameplan ledger token ...)` works;
                // what it is for goes to stderr.
                cx.console.out(&format!("{}\n", new.token.0));
                cx.console.err(&format!(
                    "A token for {}{} with {}. It is shown once: only its sha256 is kept.\n",
                    shown(&new.account),
                    if new.created_account {
                        " (a new account, balance $0.00)"
                    } else {
                        ""
                    },
                    scopes.join(", ")
                ));
                Ok(())
            }
            Err(e) => Err(refused(&e, &path)),
        },
    }
}
