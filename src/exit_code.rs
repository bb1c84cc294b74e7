//! The exit codes of `gameplan` (docs/running.md › Exit codes): the one
//! contract CI scripts act on, and [`Failure`], the one error a command
//! returns to say it did not succeed. A command never picks a number: it
//! names why it failed (`Failure::plan`, `Failure::auth`, …), and this file
//! alone says which code that is; `lib::run` prints the failure's message
//! and exits with its code.

/// Every step succeeded or was reused; every gate SEND-READY.
pub const SUCCESS: u8 = 0;
/// A step failed, a gate is FIX FIRST, or a finding matched `--fail-on`.
pub const FAILED: u8 = 1;
/// Incomplete: budget exceeded with partial results, or a gate INCOMPLETE.
pub const INCOMPLETE: u8 = 2;
/// A plan or environment error, found before anything was charged (also bad command-line usage).
pub const PLAN_ERROR: u8 = 3;
/// Authentication failed or a token scope is missing.
pub const AUTH: u8 = 4;
/// The model endpoint never answered.
pub const MODEL_UNREACHABLE: u8 = 5;
/// Canceled: declined at the price question, interrupted, or stopped.
pub const CANCELED: u8 = 10;

/// What a command ends with: `Ok` exits 0, a [`Failure`] its code.
pub type Done = Result<(), Failure>;

/// Why a command did not succeed: the exit code it ends with, and the text
/// printed to stderr on the way out (verbatim, newline included; empty when
/// the command already said why, in its report or its table).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// A step failed, a gate is FIX FIRST, a check row failed, a replay
    /// diverged (exit 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::with_code(FAILED, message)
    }

    /// Partial results: a budget or a model's answers ran out (exit 2).
    pub fn incomplete(message: impl Into<String>) -> Self {
        Self::with_code(INCOMPLETE, message)
    }

    /// A plan, usage or environment error, found before anything was
    /// charged (exit 3).
    pub fn plan(message: impl Into<String>) -> Self {
        Self::with_code(PLAN_ERROR, message)
    }

    /// Authentication failed or a token scope is missing (exit 4).
    pub fn auth(message: impl Into<String>) -> Self {
        Self::with_code(AUTH, message)
    }

    /// The model endpoint never answered (exit 5).
    pub fn unreachable(message: impl Into<String>) -> Self {
        Self::with_code(MODEL_UNREACHABLE, message)
    }

    /// Declined at the price question, interrupted, or stopped (exit 10).
    pub fn canceled(message: impl Into<String>) -> Self {
        Self::with_code(CANCELED, message)
    }

    /// A code decided elsewhere: a run's outcome (the engine's table, also
    /// written to summary.json), a hosted playtest's, a game's own crash.
    /// Its words were printed with the outcome, so `message` is usually empty.
    pub fn with_code(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// The same failure, with `more` said after its message.
    pub fn and_say(mut self, more: &str) -> Self {
        self.message.push_str(more);
        self
    }

    /// A command that ended `done` and then failed at `message` (a bundle
    /// or a prepared job not written after its run): the worse of the two,
    /// at least a failure, both said.
    pub fn after(done: Done, message: &str) -> Self {
        match done {
            Ok(()) => Failure::failed(message),
            Err(first) => first.and_say(message),
        }
    }

    /// The exit code this failure ends the process with (never 0).
    pub fn code(&self) -> u8 {
        // A failure that exits 0 would tell CI it passed.
        if self.code == SUCCESS {
            FAILED
        } else {
            self.code
        }
    }

    /// What is printed to stderr before exiting.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// A code decided elsewhere (a run's outcome, a launcher's) as a command's
/// end: 0 is done, any other code a [`Failure`] that has already said why.
pub fn outcome(code: u8) -> Done {
    if code == SUCCESS {
        Ok(())
    } else {
        Err(Failure::with_code(code, String::new()))
    }
}

/// The process exit code of a command's end: the one place a [`Done`]
/// becomes a number.
pub fn of(done: &Done) -> u8 {
    match done {
        Ok(()) => SUCCESS,
        Err(failure) => failure.code(),
    }
}

/// Ends a command: `say` its failure's message (stderr), and the code to
/// exit with. `lib::run` and the games started before the CLI both end here.
pub fn end(done: &Done, say: impl FnOnce(&str)) -> u8 {
    if let Err(failure) = done
        && !failure.message.is_empty()
    {
        say(&failure.message);
    }
    of(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_exits_with_its_code_of_the_contract() {
        assert_eq!(of(&Ok(())), 0);
        assert_eq!(of(&Err(Failure::failed(""))), 1);
        assert_eq!(of(&Err(Failure::incomplete(""))), 2);
        assert_eq!(of(&Err(Failure::plan(""))), 3);
        assert_eq!(of(&Err(Failure::auth(""))), 4);
        assert_eq!(of(&Err(Failure::unreachable(""))), 5);
        assert_eq!(of(&Err(Failure::canceled(""))), 10);
    }

    #[test]
    fn an_outcome_code_round_trips_and_a_failure_never_exits_zero() {
        for code in [0, 1, 2, 3, 4, 5, 10, 101] {
            assert_eq!(of(&outcome(code)), code);
        }
        assert_eq!(Failure::with_code(SUCCESS, "x").code(), FAILED);
    }

    #[test]
    fn a_failure_after_an_outcome_keeps_the_worse_code_and_both_words() {
        assert_eq!(Failure::after(Ok(()), "b"), Failure::failed("b"));
        let after = Failure::after(Err(Failure::canceled("a")), "b");
        assert_eq!((after.code(), after.message()), (CANCELED, "ab"));
    }
}
