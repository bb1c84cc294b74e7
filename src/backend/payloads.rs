//! Every payload of the API by name, for `gameplan schema api`: one schema
//! with each type under `$defs`, the ledger's calls and the hosted ones.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::api::{
    AggregateCompleteRequest, AggregatePublished, ApiError, CompleteRequest, Completed, Estimate,
    EstimateRequest, Finished, Heartbeat, HeartbeatRequest, JobView, RegisterRequest, Registered,
    RunView, TransitionRequest, Transitioned, Uploaded, Whoami,
};
use super::hosted::{AdmitRequest, BuildKept, FileBody, Playtest, Quote, QuoteRequest};

/// Every payload type by name, for `gameplan schema api`: one schema with
/// each type under `$defs`.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ApiPayloads {
    whoami: Whoami,
    estimate_request: EstimateRequest,
    estimate: Estimate,
    register_request: RegisterRequest,
    registered: Registered,
    transition_request: TransitionRequest,
    transitioned: Transitioned,
    heartbeat_request: HeartbeatRequest,
    heartbeat: Heartbeat,
    uploaded: Uploaded,
    complete_request: CompleteRequest,
    completed: Completed,
    aggregate_complete_request: AggregateCompleteRequest,
    aggregate_published: AggregatePublished,
    finished: Finished,
    job: JobView,
    run: RunView,
    error: ApiError,
    build_kept: BuildKept,
    hosted_quote_request: QuoteRequest,
    hosted_quote: Quote,
    hosted_admit_request: AdmitRequest,
    playtest: Playtest,
    playtest_file: FileBody,
}
