//! The plan side of `finish`, which settles the job exactly once (and runs even when a step it needs failed): it has no keys of its own.

keyless!(Finish, "Settles the job exactly once.", MOVES_MONEY, ALWAYS);
