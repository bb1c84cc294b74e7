//! The price list: what a played cell costs by run length, the add-ons, and
//! what each run length allows. The aggregate is free. One table, here.

use crate::backend::api::{ApiError, EstimateRequest, PriceLine, RunLength};

/// Prices in cents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriceList {
    /// Per played cell: short, standard, long.
    pub cell_cents: [(RunLength, i64); 3],
    /// Per cell, per add-on module.
    pub modules: [(&'static str, i64); 2],
    /// The aggregate, once per job.
    pub aggregate_cents: i64,
    /// Actions a cell may take per run length before a heartbeat asks it to stop.
    pub max_actions: [(RunLength, i64); 3],
}

/// The demo's prices.
///
/// | unit | cents |
/// |---|---|
/// | cell, short run | 25 |
/// | cell, standard run | 50 |
/// | cell, long run | 100 |
/// | `video` add-on, per cell | 15 |
/// | `hosted_compute` (a hosted playtest's server), per cell | 20 |
/// | aggregate | 0 |
pub const DEMO_PRICES: PriceList = PriceList {
    cell_cents: [
        (RunLength::Short, 25),
        (RunLength::Standard, 50),
        (RunLength::Long, 100),
    ],
    modules: [("video", 15), (crate::backend::hosted::COMPUTE_MODULE, 20)],
    aggregate_cents: 0,
    max_actions: [
        (RunLength::Short, 100),
        (RunLength::Standard, 300),
        (RunLength::Long, 1000),
    ],
};

/// A priced request.
pub struct Priced {
    pub lines: Vec<PriceLine>,
    pub total_cents: i64,
    /// What one cell costs (its refund when it never plays).
    pub per_cell_cents: i64,
    pub max_actions: i64,
}

impl PriceList {
    fn cell(&self, length: RunLength) -> i64 {
        self.cell_cents
            .iter()
            .find(|(l, _)| *l == length)
            .map_or(0, |(_, c)| *c)
    }

    /// Prices `request`, or says which module is unknown.
    pub fn price(&self, request: &EstimateRequest) -> Result<Priced, ApiError> {
        if request.cells.is_empty() {
            return Err(ApiError::invalid_request(
                "no cells to price: send the cells that will actually run",
            ));
        }
        for cell in &request.cells {
            if cell.persona.is_empty() || cell.controller.is_empty() {
                return Err(ApiError::invalid_request(
                    "every cell needs a persona and a controller",
                ));
            }
        }
        let count = i64::try_from(request.cells.len()).unwrap_or(i64::MAX);
        let cell_cents = self.cell(request.run_length);
        let mut lines = vec![PriceLine {
            unit: format!("cell ({} run)", request.run_length.as_str()),
            count,
            unit_cents: cell_cents,
        }];
        let mut per_cell = cell_cents;
        let mut seen: Vec<&str> = Vec::new();
        for module in &request.modules {
            if seen.contains(&module.as_str()) {
                return Err(ApiError::invalid_request(format!(
                    "the module `{module}` is listed twice"
                )));
            }
            seen.push(module);
            let Some((name, cents)) = self.modules.iter().find(|(n, _)| n == module) else {
                let known: Vec<&str> = self.modules.iter().map(|(n, _)| *n).collect();
                return Err(ApiError::invalid_request(format!(
                    "unknown module `{module}`: the modules are {}",
                    known.join(", ")
                )));
            };
            lines.push(PriceLine {
                unit: (*name).to_owned(),
                count,
                unit_cents: *cents,
            });
            per_cell += cents;
        }
        lines.push(PriceLine {
            unit: "aggregate".to_owned(),
            count: 1,
            unit_cents: self.aggregate_cents,
        });
        let total = per_cell
            .checked_mul(count)
            .and_then(|t| t.checked_add(self.aggregate_cents))
            .ok_or_else(|| ApiError::invalid_request("too many cells to price"))?;
        let max_actions = self
            .max_actions
            .iter()
            .find(|(l, _)| *l == request.run_length)
            .map_or(0, |(_, n)| *n);
        Ok(Priced {
            lines,
            total_cents: total,
            per_cell_cents: per_cell,
            max_actions,
        })
    }
}
