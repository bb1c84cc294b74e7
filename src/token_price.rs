//! What a model's tokens cost: a plan's `price = { input_per_mtok,
//! output_per_mtok }` and the list prices of a few well-known models.
//!
//! A leaf, so that the plan model can hold a price without importing the
//! model client (`llm`), which sits above it.

use serde::{Deserialize, Serialize};

/// USD per million tokens, in and out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

/// List prices of a few well-known models (USD per million tokens, as
/// their providers published them); a plan's `price` overrides these.
const BUILTIN_PRICES: [(&str, f64, f64); 8] = [
    ("gpt-4o-mini", 0.15, 0.60),
    ("gpt-4o", 2.50, 10.00),
    ("gpt-4.1-nano", 0.10, 0.40),
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1", 2.00, 8.00),
    ("o4-mini", 1.10, 4.40),
    ("claude-3-5-haiku-latest", 0.80, 4.00),
    ("claude-sonnet-4-0", 3.00, 15.00),
];

impl Price {
    /// The built-in price of `model`, matched exactly (a dated snapshot
    /// such as `gpt-4o-mini-2024-07-18` is priced as its family).
    pub fn builtin(model: &str) -> Option<Price> {
        BUILTIN_PRICES
            .iter()
            .filter(|(name, ..)| {
                model == *name
                    || model
                        .strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with("-20"))
            })
            .max_by_key(|(name, ..)| name.len())
            .map(|(_, input, output)| Price {
                input_per_mtok: *input,
                output_per_mtok: *output,
            })
    }

    /// The models [`Price::builtin`] knows, for messages.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN_PRICES.iter().map(|(name, ..)| *name).collect()
    }

    /// What `input` and `output` tokens cost, in USD.
    #[expect(
        clippy::cast_precision_loss,
        reason = "token counts are far below 2^52"
    )]
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_per_mtok + output as f64 * self.output_per_mtok) / 1_000_000.0
    }
}
