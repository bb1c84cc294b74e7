//! Quotes that the ledger never stores: a quote id carries what it priced
//! (its price, its expiry, the priced cells' digest) and an
//! HMAC-SHA256 over those, the account and the game, keyed by the ledger's
//! own secret (the `meta` table's `quote_secret`, made when the file was).
//!
//! Why stateless: an estimate must leave the ledger byte-for-byte as it
//! was (a declined price, a short balance or a budget refusal happen after
//! it, and must change nothing), so it cannot insert a row. `register`
//! recomputes the MAC from the id's own fields, the caller's account and
//! the game, before it looks at anything else: an id that was altered,
//! made up, or given to another account, game or ledger does not verify
//! (422 `quote_invalid`, and nothing of the price is said), and only an id
//! that verifies is compared with the body's cells (409 `price_changed`,
//! with the price of these cells, for a genuine quote of other cells).

use sha2::{Digest, Sha256};

use super::sha256_hex;

/// What every quote id starts with; the version lets the format change.
/// (v1 carried a prefix of the cells digest and signed the whole digest, so
/// its MAC could be checked only against the body's cells: a made-up id
/// for other cells answered `price_changed` and the price. v1 ids are no
/// longer read; a quote lives 15 minutes.)
const PREFIX: &str = "quote-v2.";

/// The fields a quote id carries.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Claim {
    pub expires_at: i64,
    pub price_cents: i64,
    /// The sha256 (hex) of the cells, modules and run length it priced.
    pub cells_sha256: String,
    mac: String,
}

/// The id of a quote of `price_cents` for `cells_sha256` (hex) until
/// `expires_at`, to `account` for `game`.
pub(super) fn quote_id(
    secret: &[u8],
    account: &str,
    game: &str,
    cells_sha256: &str,
    price_cents: i64,
    expires_at: i64,
) -> String {
    let claim = Claim {
        expires_at,
        price_cents,
        cells_sha256: cells_sha256.to_owned(),
        mac: String::new(),
    };
    let mac = claim.mac_for(secret, account, game);
    format!("{PREFIX}{expires_at}.{price_cents}.{cells_sha256}.{mac}")
}

/// The fields of `id`, or `None` when it is not a quote id of this format.
pub(super) fn parse(id: &str) -> Option<Claim> {
    let mut parts = id.strip_prefix(PREFIX)?.split('.');
    let expires_at = parts.next()?.parse().ok()?;
    let price_cents = parts.next()?.parse().ok()?;
    let cells_sha256 = parts.next()?.to_owned();
    let mac = parts.next()?.to_owned();
    (parts.next().is_none() && mac.len() == 64 && cells_sha256.len() == 64).then_some(Claim {
        expires_at,
        price_cents,
        cells_sha256,
        mac,
    })
}

impl Claim {
    /// Whether the claim was priced for cells whose digest is `cells_sha256`.
    pub fn prices(&self, cells_sha256: &str) -> bool {
        self.cells_sha256 == cells_sha256
    }

    /// HMAC-SHA256 (RFC 2104) over the claim's fields for `account` and
    /// `game`, each length-prefixed so no two field lists give the same
    /// message: what this ledger (`secret`) signs a quote with.
    fn mac_for(&self, secret: &[u8], account: &str, game: &str) -> String {
        let mut message = Vec::new();
        for field in [
            account,
            game,
            &self.cells_sha256,
            &self.price_cents.to_string(),
            &self.expires_at.to_string(),
        ] {
            message.extend_from_slice(&(field.len() as u64).to_be_bytes());
            message.extend_from_slice(field.as_bytes());
        }
        hmac_sha256_hex(secret, &message)
    }

    /// Whether this ledger (`secret`) gave the claim to `account` for `game`,
    /// with its cells, price and expiry unaltered.
    pub fn verifies(&self, secret: &[u8], account: &str, game: &str) -> bool {
        let expected = self.mac_for(secret, account, game);
        // Compared without an early exit, so timing says nothing of the MAC.
        expected.len() == self.mac.len()
            && expected
                .bytes()
                .zip(self.mac.bytes())
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }
}

fn hmac_sha256_hex(key: &[u8], message: &[u8]) -> String {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    sha256_hex_of_digest(&outer)
}

fn sha256_hex_of_digest(digest: &[u8]) -> String {
    use std::fmt::Write as _;
    digest.iter().fold(String::with_capacity(64), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// A fresh secret for a new ledger file: 32 random bytes in hex.
pub(super) fn new_secret() -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(sha256_hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc_4231_test_case_2() {
        assert_eq!(
            hmac_sha256_hex(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn hmac_sha256_hashes_a_key_longer_than_a_block_rfc_4231_test_case_6() {
        assert_eq!(
            hmac_sha256_hex(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            ),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn an_id_verifies_only_unaltered_for_its_account_game_cells_and_secret() {
        let cells = sha256_hex(b"cells");
        let id = quote_id(b"secret", "demo", "maze", &cells, 150, 1_800_000_900);
        let claim = parse(&id).expect("parses");
        assert_eq!((claim.price_cents, claim.expires_at), (150, 1_800_000_900));
        assert!(claim.prices(&cells));
        assert!(claim.verifies(b"secret", "demo", "maze"));
        assert!(!claim.verifies(b"other", "demo", "maze"));
        assert!(!claim.verifies(b"secret", "studio", "maze"));
        assert!(!claim.verifies(b"secret", "demo", "lantern"));
        assert!(!claim.prices(&sha256_hex(b"other cells")));
        let cheaper = id.replace(".150.", ".1.");
        assert!(
            !parse(&cheaper)
                .expect("parses")
                .verifies(b"secret", "demo", "maze")
        );
        let other_cells = id.replace(&cells, &sha256_hex(b"other cells"));
        assert!(
            !parse(&other_cells)
                .expect("parses")
                .verifies(b"secret", "demo", "maze")
        );
        let later = id.replace("1800000900", "1900000900");
        assert!(
            !parse(&later)
                .expect("parses")
                .verifies(b"secret", "demo", "maze")
        );
        for garbage in [
            "quote-1",
            "",
            "quote-v1.",
            "quote-v1.1.2.3.4",
            &format!("{id}.x"),
        ] {
            assert_eq!(parse(garbage), None, "{garbage}");
        }
    }
}
