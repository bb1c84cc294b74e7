//! The API's endpoints (docs/serve.md › The API) in one table: each call's
//! method, path, the scopes its token must hold and what its body is.
//!
//! The `http` backend builds its URLs from it, `gameplan serve` its routes
//! (one per row, each row's handler chosen by an exhaustive `match`), and
//! the ledger checks the scopes it lists, for the `local` backend and the
//! server alike. So a call cannot be served but not sent, or need one
//! scope over HTTP and another in-process; a test walks every endpoint
//! through the client to the server.
//!
//! Paths are axum's templates: `{game}` is one segment, `{*name}` the rest
//! of the path (an upload's name may hold `/`).

use super::api::UploadTarget;
use super::api::{JobRef, RunRef, SCOPE_MODEL, SCOPE_UPLOAD, SCOPE_WRITE};

/// The header a register's key travels in.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The header an upload's sha256 travels in.
pub const CONTENT_SHA256: &str = "x-content-sha256";

/// One call of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    Whoami,
    Estimate,
    Register,
    GetJob,
    Finish,
    AggregateComplete,
    UploadJobFile,
    GetRun,
    Transition,
    Heartbeat,
    Complete,
    UploadRunFile,
    UploadBuild,
    HostedQuote,
    HostedAdmit,
    HostedGet,
    HostedCancel,
    HostedFile,
}

/// An endpoint's HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
        }
    }
}

/// What an endpoint's request body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// None: nothing is read.
    Empty,
    /// One of the API's request types, as JSON.
    Json,
    /// A file's bytes, as they are (`application/octet-stream`), its sha256
    /// in [`CONTENT_SHA256`].
    File,
    /// A build archive's bytes (`application/gzip`), named by the sha256 in
    /// its path; bigger than a file may be.
    Archive,
}

/// Only a valid token.
const ANYONE: &[&str] = &[];
const WRITE: &[&str] = &[SCOPE_WRITE];
const REGISTER: &[&str] = &[SCOPE_WRITE, SCOPE_MODEL];
const UPLOAD: &[&str] = &[SCOPE_UPLOAD];

/// One row of the table.
struct Row {
    method: Method,
    path: &'static str,
    scopes: &'static [&'static str],
    body: Body,
}

const fn row(
    method: Method,
    path: &'static str,
    scopes: &'static [&'static str],
    body: Body,
) -> Row {
    Row {
        method,
        path,
        scopes,
        body,
    }
}

impl Endpoint {
    pub const ALL: [Endpoint; 18] = [
        Endpoint::Whoami,
        Endpoint::Estimate,
        Endpoint::Register,
        Endpoint::GetJob,
        Endpoint::Finish,
        Endpoint::AggregateComplete,
        Endpoint::UploadJobFile,
        Endpoint::GetRun,
        Endpoint::Transition,
        Endpoint::Heartbeat,
        Endpoint::Complete,
        Endpoint::UploadRunFile,
        Endpoint::UploadBuild,
        Endpoint::HostedQuote,
        Endpoint::HostedAdmit,
        Endpoint::HostedGet,
        Endpoint::HostedCancel,
        Endpoint::HostedFile,
    ];

    /// The table.
    #[rustfmt::skip]
    const fn row(self) -> Row {
        use Body::{Archive, Empty, File, Json};
        use Method::{Get, Post, Put};
        match self {
            Endpoint::Whoami =>            row(Get,  "/v1/whoami",                                         ANYONE,   Empty),
            Endpoint::Estimate =>          row(Post, "/v1/games/{game}/estimate",                          WRITE,    Json),
            Endpoint::Register =>          row(Post, "/v1/games/{game}/jobs",                              REGISTER, Json),
            Endpoint::GetJob =>            row(Get,  "/v1/games/{game}/jobs/{job}",                        WRITE,    Empty),
            Endpoint::Finish =>            row(Post, "/v1/games/{game}/jobs/{job}/finish",                 WRITE,    Empty),
            Endpoint::AggregateComplete => row(Post, "/v1/games/{game}/jobs/{job}/aggregate/complete",     UPLOAD,   Json),
            Endpoint::UploadJobFile =>     row(Put,  "/v1/games/{game}/jobs/{job}/files/{*name}",          UPLOAD,   File),
            Endpoint::GetRun =>            row(Get,  "/v1/games/{game}/jobs/{job}/runs/{run}",             WRITE,    Empty),
            Endpoint::Transition =>        row(Post, "/v1/games/{game}/jobs/{job}/runs/{run}/transition",  WRITE,    Json),
            Endpoint::Heartbeat =>         row(Post, "/v1/games/{game}/jobs/{job}/runs/{run}/heartbeat",   WRITE,    Json),
            Endpoint::Complete =>          row(Post, "/v1/games/{game}/jobs/{job}/runs/{run}/complete",    UPLOAD,   Json),
            Endpoint::UploadRunFile =>     row(Put,  "/v1/games/{game}/jobs/{job}/runs/{run}/files/{*name}", UPLOAD, File),
            Endpoint::UploadBuild =>       row(Put,  "/v1/games/{game}/builds/{sha256}",                   UPLOAD,   Archive),
            Endpoint::HostedQuote =>       row(Post, "/v1/games/{game}/hosted/quotes",                     WRITE,    Json),
            Endpoint::HostedAdmit =>       row(Post, "/v1/games/{game}/hosted",                            REGISTER, Json),
            Endpoint::HostedGet =>         row(Get,  "/v1/games/{game}/hosted/{playtest}",                 WRITE,    Empty),
            Endpoint::HostedCancel =>      row(Post, "/v1/games/{game}/hosted/{playtest}/cancel",          WRITE,    Empty),
            Endpoint::HostedFile =>        row(Get,  "/v1/games/{game}/hosted/{playtest}/files/{*name}",   WRITE,    Empty),
        }
    }

    pub fn method(self) -> Method {
        self.row().method
    }

    /// Its path template.
    pub fn path(self) -> &'static str {
        self.row().path
    }

    /// The scopes a token must hold for it, in the order they are checked
    /// (the first one missing is the one a refusal names).
    pub fn scopes(self) -> &'static [&'static str] {
        self.row().scopes
    }

    pub fn body(self) -> Body {
        self.row().body
    }

    /// Whether it is one of the hosted playtests' calls, which only a
    /// `serve --executor` server answers.
    pub fn is_hosted(self) -> bool {
        matches!(
            self,
            Endpoint::UploadBuild
                | Endpoint::HostedQuote
                | Endpoint::HostedAdmit
                | Endpoint::HostedGet
                | Endpoint::HostedCancel
                | Endpoint::HostedFile
        )
    }

    /// The endpoint of an upload to `target`.
    pub fn upload(target: &UploadTarget) -> Endpoint {
        match target {
            UploadTarget::Run(_) => Endpoint::UploadRunFile,
            UploadTarget::Job(_) => Endpoint::UploadJobFile,
        }
    }

    /// The segments of its path, each `{id}` the next of `ids` (one segment
    /// whatever it holds) and a `{*rest}` the next split at its `/`s. An id
    /// too few leaves its place out: the server answers 404.
    pub fn segments<'a>(self, ids: &[&'a str]) -> Vec<&'a str> {
        let mut ids = ids.iter();
        let mut segments = Vec::new();
        for part in self.path().split('/').filter(|p| !p.is_empty()) {
            if part.starts_with("{*") {
                segments.extend(ids.next().into_iter().flat_map(|id| id.split('/')));
            } else if part.starts_with('{') {
                segments.extend(ids.next().copied());
            } else {
                segments.push(part);
            }
        }
        segments
    }

    /// The endpoint `method` and `path` (a request's, ids filled in) are a
    /// call of, if any.
    #[cfg(test)]
    pub(crate) fn of(method: &str, path: &str) -> Option<Endpoint> {
        let given: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        Endpoint::ALL.into_iter().find(|e| {
            let parts: Vec<&str> = e.path().split('/').filter(|p| !p.is_empty()).collect();
            let rest = parts.last().is_some_and(|p| p.starts_with("{*"));
            let fixed = parts.len() - usize::from(rest);
            let long_enough = if rest {
                given.len() > fixed
            } else {
                given.len() == fixed
            };
            e.method().as_str() == method
                && long_enough
                && parts[..fixed]
                    .iter()
                    .zip(&given)
                    .all(|(part, segment)| part.starts_with('{') || part == segment)
        })
    }
}

/// A job's ids in its paths: game, job.
pub fn job_ids(job: &JobRef) -> [&str; 2] {
    [&job.game, &job.job]
}

/// A run's ids in its paths: game, job, run.
pub fn run_ids(run: &RunRef) -> [&str; 3] {
    [&run.game, &run.job, &run.run]
}

/// The ids of an upload target's path, before the file's name.
pub fn target_ids(target: &UploadTarget) -> Vec<&str> {
    match target {
        UploadTarget::Run(run) => run_ids(run).to_vec(),
        UploadTarget::Job(job) => job_ids(job).to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_unique_under_v1_and_its_ids_fill_it() {
        let mut seen = std::collections::BTreeSet::new();
        for endpoint in Endpoint::ALL {
            let path = endpoint.path();
            assert!(path.starts_with("/v1/"), "{endpoint:?}: {path}");
            assert!(
                seen.insert((endpoint.method().as_str(), path)),
                "{endpoint:?} twice"
            );
            let ids = ["g", "j", "r", "a/b.png"];
            let filled = format!("/{}", endpoint.segments(&ids).join("/"));
            assert_eq!(
                Endpoint::of(endpoint.method().as_str(), &filled),
                Some(endpoint),
                "{filled}"
            );
            assert!(!filled.contains('{'), "an id too few: {filled}");
        }
        assert_eq!(
            Endpoint::UploadRunFile.segments(&["g", "j", "r", "screens/1.png"]),
            [
                "v1", "games", "g", "jobs", "j", "runs", "r", "files", "screens", "1.png"
            ]
        );
        assert_eq!(Endpoint::of("GET", "/v1/games/g/jobs/j/runs"), None);
        assert_eq!(Endpoint::of("DELETE", "/v1/whoami"), None);
    }

    #[test]
    fn only_a_put_carries_a_file_and_only_whoami_needs_no_scope() {
        for endpoint in Endpoint::ALL {
            assert_eq!(
                matches!(endpoint.body(), Body::File | Body::Archive),
                endpoint.method() == Method::Put,
                "{endpoint:?}"
            );
            assert_eq!(
                endpoint.scopes().is_empty(),
                endpoint == Endpoint::Whoami,
                "{endpoint:?}"
            );
        }
    }
}
