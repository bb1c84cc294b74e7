//! The plan side of `register`, which buys the job (idempotently): it has no keys of its own.

keyless!(Register, "Buys the job (idempotent).", MOVES_MONEY);
