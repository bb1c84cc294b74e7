//! The seeded randomness of players and selectors: splitmix64.
//!
//! Owned here so that the same seed gives the same choices on every machine
//! and every gameplan version that keeps this file: traces must replay
//! byte for byte, which a crate's changing algorithm would break.

/// A splitmix64 generator (Steele, Lea, Flood 2014): tiny, fast, and good
/// enough to pick among a handful of actions.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator for one purpose (`salt`) of one cell (`seed`): the player
    /// and the selector of a cell draw from different streams, so asking
    /// one more question of the player does not change the selector's picks.
    pub fn new(seed: i64, salt: &str) -> Self {
        let mut state = u64::from_le_bytes(seed.to_le_bytes());
        for byte in salt.bytes() {
            state = (state ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng { state }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0), by Lemire's multiply-shift:
    /// no division, and the bias is negligible for the small `n` of a menu.
    pub fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let wide = u128::from(self.next_u64()) * u128::from(n);
        usize::try_from(wide >> 64).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_same_seed_gives_the_same_stream_and_salts_differ() {
        let a: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(7, "player");
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(7, "player");
                move |_| r.next_u64()
            })
            .collect();
        let c = Rng::new(7, "selector").next_u64();
        assert_eq!(a, b);
        assert_ne!(a[0], c);
        let mut r = Rng::new(1, "x");
        assert!((0..1000).all(|_| r.below(3) < 3));
        assert_eq!(r.below(0), 0);
    }
}
