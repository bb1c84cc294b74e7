//! Which cells a shard plays: the plan's playing instances (`play` and
//! `simulate` cells), split into N slices by a hash of each cell's id, so
//! a cell stays in its slice when other cells are added or removed (like
//! nextest's `--partition hash:K/N`).

use petgraph::graph::NodeIndex;

use crate::graph::Pipeline;
use crate::reuse::sha256_hex;

/// The most slices a plan may be cut into.
pub const MAX_SHARDS: u32 = 1000;

/// What `--shard` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardSpec {
    /// `prepare`: the paid steps that buy the job, run once before the
    /// shards.
    Prepare,
    /// `K/N`: the K-th of N slices of the cells.
    Slice(Shard),
}

/// The K-th of N slices (1-based, as CI matrices count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub k: u32,
    pub n: u32,
}

impl ShardSpec {
    /// Reads `prepare` or `K/N`.
    pub fn parse(text: &str) -> Result<ShardSpec, String> {
        let text = text.trim();
        if text == "prepare" {
            return Ok(ShardSpec::Prepare);
        }
        let usage = "write `--shard K/N` (the K-th of N slices, 1 ≤ K ≤ N, e.g. `2/3`) or `--shard prepare`";
        let Some((k, n)) = text.split_once('/') else {
            return Err(format!("`{text}` is not a shard: {usage}"));
        };
        let (Ok(k), Ok(n)) = (k.trim().parse::<u32>(), n.trim().parse::<u32>()) else {
            return Err(format!("`{text}` is not a shard: {usage}"));
        };
        if n == 0 || n > MAX_SHARDS {
            return Err(format!(
                "`{text}`: N must be between 1 and {MAX_SHARDS}; {usage}"
            ));
        }
        if k == 0 || k > n {
            return Err(format!("`{text}`: K must be between 1 and {n}; {usage}"));
        }
        Ok(ShardSpec::Slice(Shard { k, n }))
    }
}

impl Shard {
    /// Whether the cell `id` is in this slice.
    pub fn holds(self, id: &str) -> bool {
        slice_of(id, self.n) == self.k
    }

    /// `K-N`, the bundle's default directory name.
    pub fn dir_name(self) -> String {
        format!("{}-{}", self.k, self.n)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// The 1-based slice of `n` that the cell `id` falls in.
pub fn slice_of(id: &str, n: u32) -> u32 {
    let digest = sha256_hex(id.as_bytes());
    // The first 16 hex digits: 64 bits, evenly spread.
    let value = u64::from_str_radix(&digest[..16], 16).unwrap_or(0);
    u32::try_from(value % u64::from(n.max(1))).unwrap_or(0) + 1
}

/// The plan's cells: its playing instances, in the plan's order.
pub fn cells(pipeline: &Pipeline) -> Vec<NodeIndex> {
    pipeline
        .order
        .iter()
        .copied()
        .filter(|&n| pipeline.instance(n).kind.row().plays)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_read_from_k_slash_n_or_prepare_and_nonsense_is_explained() {
        assert_eq!(
            ShardSpec::parse("2/3"),
            Ok(ShardSpec::Slice(Shard { k: 2, n: 3 }))
        );
        assert_eq!(ShardSpec::parse("prepare"), Ok(ShardSpec::Prepare));
        for (bad, says) in [
            ("0/3", "K must be between 1 and 3"),
            ("4/3", "K must be between 1 and 3"),
            ("1/0", "N must be between 1 and 1000"),
            ("1/1001", "N must be between 1 and 1000"),
            ("two/3", "is not a shard"),
            ("3", "is not a shard"),
        ] {
            let error = ShardSpec::parse(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
            assert!(error.contains("--shard K/N"), "{bad}: {error}");
        }
    }

    #[test]
    fn every_cell_is_in_exactly_one_slice_and_stays_there_when_cells_are_added() {
        let ids: Vec<String> = (0..300).map(|i| format!("play[p{i},standard]")).collect();
        for n in [1, 2, 3, 7] {
            let mut counts = vec![0; n as usize];
            for id in &ids {
                let holders: Vec<u32> = (1..=n).filter(|&k| Shard { k, n }.holds(id)).collect();
                assert_eq!(holders.len(), 1, "{id} in {holders:?} of {n}");
                counts[(holders[0] - 1) as usize] += 1;
            }
            // Spread: no slice is empty or holds more than twice its share.
            let share = ids.len() / n as usize;
            assert!(
                counts.iter().all(|&c| c > 0 && c <= 2 * share),
                "{n} slices: {counts:?}"
            );
        }
        // A cell's slice depends on its id and N only.
        assert_eq!(slice_of("play[kid,jev]", 5), slice_of("play[kid,jev]", 5));
    }
}
