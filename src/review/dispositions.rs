//! `dispositions.toml`: accepted findings (waivers) with a reason, an owner and an expiry date (DESIGN §8).
