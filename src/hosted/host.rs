//! The server's side of the hosted calls (`server::Hosting`): keeping a
//! build, pricing a plan of it, admitting it, and giving out a playtest's
//! files.
//!
//! A build is stored once by content (`<builds>/<sha256>.tar.gz`, unpacked
//! beside it) and is an account's to quote once that account uploaded it
//! (the ledger's `builds` table), so knowing a sha256 reads nothing of
//! another account's. A quote loads the plan from the unpacked build as a
//! run would, with the variables given, and prices the cells it would
//! play: the same cells, in the same order, that the admission registers
//! and the worker plays.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;

use super::archive::{self, Limits};
use crate::backend::api::{ApiError, Cell, EstimateRequest, RegisterRequest, RunLength, Token};
use crate::backend::endpoint::Endpoint;
use crate::backend::hosted::{
    AdmitRequest, BuildKept, COMPUTE_MODULE, FileBody, Playtest, Quote, QuoteRequest, QuotedCell,
};
use crate::backend::ledger::Ledger;
use crate::backend::ledger::hosted::{Admission, admission_sha256};
use crate::plan::LoadedPlan;

/// The most of one playtest file `file` hands out.
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// What a quote lists as accepted with its price.
pub const STATEMENTS: [&str; 4] = [
    "refund: a cell whose game never started (it took no action) is refunded in full, its cell and its compute, at settlement",
    "refund: a cell not started when the playtest is canceled is refunded in full at settlement; a cell that played is charged",
    "the plan's own estimate, register, deliver and finish steps are not run: this quote is the whole charge, made once at admission",
    "the game runs on the server's executor from the uploaded build alone, with no network but the loopback it needs; a game that needs anything else fails there",
];

/// Where a server keeps builds and plays playtests.
pub struct Host {
    /// `<dir>/<sha256>.tar.gz` and `<dir>/<sha256>/`.
    pub builds: PathBuf,
    /// `<dir>/hosted-<n>/`: each playtest's workspace.
    pub work: PathBuf,
    pub limits: Limits,
    /// The environment plans are loaded with (the server's).
    pub env: BTreeMap<String, String>,
    /// Tells the worker to look now (an admission, a cancel).
    pub wake: Arc<tokio::sync::Notify>,
}

/// The cells a plan of a build plays, and at which run length.
pub struct Priced {
    pub cells: Vec<QuotedCell>,
    pub run_length: RunLength,
}

impl Host {
    /// The unpacked build `sha256`.
    pub fn build_dir(&self, sha256: &str) -> PathBuf {
        self.builds.join(sha256)
    }

    /// Playtest `id`'s workspace.
    pub fn workspace(&self, id: i64) -> PathBuf {
        self.work.join(crate::backend::hosted::playtest_id(id))
    }

    /// Loads `plan` of the unpacked build `build` with `vars` and says
    /// which cells it plays, or why it cannot be played hosted.
    pub fn cells_of(
        &self,
        game: &str,
        build: &str,
        plan: &str,
        vars: &BTreeMap<String, String>,
    ) -> Result<Priced, ApiError> {
        let root = self.build_dir(build);
        let loaded = load(&root, plan, vars, &self.env)?;
        let plays = loaded.plan.game.as_ref().map(|g| g.id.as_str());
        if plays != Some(game) {
            return Err(ApiError::new(
                422,
                "plan_invalid",
                format!(
                    "the plan `{plan}` plays {}, not game `{game}`; quote it under its own game",
                    plays.map_or_else(|| "no [game]".to_owned(), |g| format!("game `{g}`"))
                ),
            ));
        }
        let pipeline = crate::graph::expand_loaded(&loaded).map_err(|e| {
            ApiError::new(
                422,
                "plan_invalid",
                format!("the plan `{plan}` cannot be expanded: {e}"),
            )
        })?;
        // The pipeline's, not only the plan's own steps: a plan without
        // `steps` gets the default paid pipeline.
        let paying: Vec<String> = pipeline
            .steps
            .iter()
            .filter(|s| s.kind.moves_money())
            .map(|s| format!("`{}` ({:?})", s.id, s.kind))
            .collect();
        if !paying.is_empty() {
            return Err(ApiError::new(
                422,
                "plan_invalid",
                format!(
                    "the plan `{plan}` has money steps ({}): a hosted playtest is paid by its quote alone, \
                     and these would charge again; play hosted a plan without estimate, register, deliver and finish \
                     (a plan with its own `steps`; docs/hosted.md). Nothing was charged",
                    paying.join(", ")
                ),
            ));
        }
        let kinds = crate::steps::Kinds::for_run(crate::steps::RunSettings {
            concurrency: 1,
            redactor: loaded.redactor.clone(),
        });
        let state = root.join(".gameplan");
        let cells: Vec<QuotedCell> = crate::engine::preview::cells_ahead(
            &loaded, &pipeline, &state, true, &self.env, &kinds,
        )
        .into_iter()
        .map(|c| QuotedCell {
            id: c.id,
            persona: c.persona,
            controller: c.controller,
        })
        .collect();
        if cells.is_empty() {
            return Err(ApiError::new(
                422,
                "plan_invalid",
                format!("the plan `{plan}` plays no cell: there is nothing to host"),
            ));
        }
        let run_length = crate::steps::estimate::run_length(
            &loaded.plan,
            cells.iter().map(|c| c.persona.as_str()),
        );
        Ok(Priced { cells, run_length })
    }

    /// The plan of a quote or admission, checked against the build's
    /// manifest, priced.
    fn priced(
        &self,
        ledger: &Ledger,
        token: &Token,
        endpoint: Endpoint,
        game: &str,
        request: &QuoteRequest,
    ) -> Result<Priced, ApiError> {
        let plans = ledger.build_plans(token, endpoint, game, &request.build)?;
        if !plans.contains(&request.plan) {
            return Err(ApiError::new(
                422,
                "plan_invalid",
                format!(
                    "the build `{}` holds no plan `{}`; its plans are {}",
                    request.build,
                    request.plan,
                    plans.join(", ")
                ),
            ));
        }
        self.cells_of(game, &request.build, &request.plan, &request.vars)
    }
}

fn estimate_request(priced: &Priced) -> EstimateRequest {
    EstimateRequest {
        cells: priced
            .cells
            .iter()
            .map(|c| Cell::new(&c.persona, &c.controller))
            .collect(),
        modules: vec![COMPUTE_MODULE.to_owned()],
        run_length: priced.run_length,
    }
}

/// Loads a plan of an unpacked build, as a run there will.
fn load(
    root: &Path,
    plan: &str,
    vars: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) -> Result<LoadedPlan, ApiError> {
    let options = crate::plan::LoadOptions {
        env: env.clone(),
        vars: vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        root: Some(root.to_path_buf()),
        defer_secrets: true,
        ..crate::plan::LoadOptions::default()
    };
    crate::plan::load(&root.join(plan), &options).map_err(|failure| {
        ApiError::new(
            422,
            "plan_invalid",
            format!(
                "the plan `{plan}` does not load; nothing was charged:\n{}",
                crate::report::diagnostics::render(&failure, false)
            ),
        )
    })
}

impl crate::server::Hosting for Host {
    fn max_archive_bytes(&self) -> usize {
        usize::try_from(self.limits.archive_bytes).unwrap_or(usize::MAX)
    }

    fn keep_build(
        &self,
        ledger: &Ledger,
        token: &Token,
        game: &str,
        sha256: &str,
        bytes: &[u8],
    ) -> Result<BuildKept, ApiError> {
        let actual = crate::backend::ledger::sha256_hex(bytes);
        if actual != sha256 {
            return Err(ApiError::new(
                422,
                "sha256_mismatch",
                format!(
                    "the body's sha256 is {actual}, not the {sha256} of its path; nothing was stored (upload it again)"
                ),
            ));
        }
        let checked = archive::check(bytes, self.limits).map_err(|refused| {
            ApiError::new(
                422,
                "build_refused",
                format!("the build was refused: {refused}; nothing was stored or charged"),
            )
        })?;
        if checked.manifest.game != game {
            return Err(ApiError::new(
                422,
                "build_refused",
                format!(
                    "the build is of game `{}`, uploaded under `{game}`; nothing was stored",
                    checked.manifest.game
                ),
            ));
        }
        // Asked again here, not only before the body was read: a token
        // revoked meanwhile stores nothing.
        ledger.authorize(token, Endpoint::UploadBuild)?;
        let stored = self.builds.join(format!("{sha256}.tar.gz"));
        let unavailable = |e: std::io::Error| {
            ApiError::unavailable(format!("the server could not store the build: {e}"))
        };
        if !stored.exists() {
            archive::write_durably(&stored, bytes).map_err(unavailable)?;
        }
        let dir = self.build_dir(sha256);
        if !dir.exists() {
            archive::unpack(bytes, &dir).map_err(unavailable)?;
        }
        ledger.keep_build(
            token,
            game,
            sha256,
            bytes.len() as u64,
            &BuildKept {
                sha256: sha256.to_owned(),
                files: checked.files,
                unpacked_bytes: checked.unpacked_bytes,
                plans: checked.manifest.plans,
                new: true,
            },
        )
    }

    fn quote(
        &self,
        ledger: &Ledger,
        token: &Token,
        game: &str,
        request: &QuoteRequest,
    ) -> Result<Quote, ApiError> {
        let priced = self.priced(ledger, token, Endpoint::HostedQuote, game, request)?;
        let mut estimate = ledger.estimate(token, game, &estimate_request(&priced))?;
        let account = ledger.whoami(token)?.user;
        let mut breakdown = Vec::new();
        for line in std::mem::take(&mut estimate.breakdown) {
            if line.unit != COMPUTE_MODULE {
                breakdown.push(line);
                continue;
            }
            // The compute, per controller: what each way of playing costs.
            let mut per: BTreeMap<&str, i64> = BTreeMap::new();
            for cell in &priced.cells {
                *per.entry(cell.controller.as_str()).or_default() += 1;
            }
            for (controller, count) in per {
                breakdown.push(crate::backend::api::PriceLine {
                    unit: format!("hosted compute (controller {controller})"),
                    count,
                    unit_cents: line.unit_cents,
                });
            }
        }
        estimate.breakdown = breakdown;
        Ok(Quote {
            hosted_quote: 1,
            server: String::new(),
            game: game.to_owned(),
            build: request.build.clone(),
            plan: request.plan.clone(),
            vars: request.vars.clone(),
            account,
            cells: priced.cells,
            run_length: priced.run_length,
            modules: vec![COMPUTE_MODULE.to_owned()],
            estimate,
            statements: STATEMENTS.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    fn admit(
        &self,
        ledger: &Ledger,
        token: &Token,
        game: &str,
        key: &str,
        request: &AdmitRequest,
    ) -> Result<Playtest, ApiError> {
        let asked = QuoteRequest {
            build: request.build.clone(),
            plan: request.plan.clone(),
            vars: request.vars.clone(),
        };
        let priced = self.priced(ledger, token, Endpoint::HostedAdmit, game, &asked)?;
        let estimate = estimate_request(&priced);
        let register = RegisterRequest {
            quote_id: request.quote_id.clone(),
            confirm_price_cents: request.confirm_price_cents,
            cells: estimate.cells,
            modules: estimate.modules,
            run_length: estimate.run_length,
        };
        let playtest = ledger.admit(
            token,
            game,
            &Admission {
                key,
                body_sha256: &admission_sha256(request),
                build: &request.build,
                plan: &request.plan,
                vars: &request.vars,
                cells: &priced.cells,
                register: &register,
            },
        )?;
        // The kill -9 tests stop the server here: admitted and charged, the
        // answer never sent.
        crate::backend::crash_points::crash_point(
            "hosted_admit",
            crate::backend::crash_points::Boundary::RequestSent,
        );
        self.wake.notify_one();
        Ok(playtest)
    }

    fn file(
        &self,
        ledger: &Ledger,
        token: &Token,
        game: &str,
        id: &str,
        name: &str,
    ) -> Result<FileBody, ApiError> {
        let (n, files) = ledger.playtest_files(token, game, id)?;
        if !files.iter().any(|f| f == name) {
            return Err(ApiError::not_found(&format!(
                "file `{name}` of hosted playtest `{id}` (its files: {})",
                if files.is_empty() {
                    "none yet".to_owned()
                } else {
                    files.join(", ")
                }
            )));
        }
        file_body(
            &self.workspace(n).join("out").join(name),
            name,
            MAX_FILE_BYTES,
        )
    }

    fn wake(&self) {
        self.wake.notify_one();
    }
}

/// The file at `path`, named `name`, as a call hands it out; over `max`
/// bytes it is 413 rather than a body of that size.
fn file_body(path: &Path, name: &str, max: u64) -> Result<FileBody, ApiError> {
    let unavailable =
        |e: std::io::Error| ApiError::unavailable(format!("`{name}` cannot be read: {e}"));
    let size = std::fs::metadata(path).map_err(unavailable)?.len();
    if size > max {
        return Err(ApiError::new(
            413,
            "file_too_large",
            format!("`{name}` is {size} bytes, over the {max} handed out at once"),
        ));
    }
    let bytes = std::fs::read(path).map_err(unavailable)?;
    Ok(FileBody {
        name: name.to_owned(),
        size,
        sha256: crate::backend::ledger::sha256_hex(&bytes),
        body_base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_limit_is_413_naming_it_and_one_within_comes_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("report.html");
        std::fs::write(&path, "0123456789").expect("write");
        let whole = file_body(&path, "report.html", 10).expect("within");
        assert_eq!(
            (whole.size, whole.body_base64.as_str()),
            (10, "MDEyMzQ1Njc4OQ==")
        );
        let refused = file_body(&path, "report.html", 9).expect_err("over");
        assert_eq!(
            (refused.status, refused.code.as_str()),
            (413, "file_too_large")
        );
        assert!(
            refused
                .message
                .contains("`report.html` is 10 bytes, over the 9"),
            "{refused}"
        );
    }
}
