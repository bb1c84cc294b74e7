//! Jobs through the client on the real cluster: one runs and its log holds
//! what it printed, an id is taken once, a pinned job runs on its node,
//! stop ends a job, an unknown id is not found, and a restarted head has
//! forgotten every job but takes the same id again.

use std::time::{Duration, Instant};

use gameplan::ray::{JobStatus, LogTail, RayError, SubmitRequest};

use super::{alone, assert_succeeded, fresh_id, runtime, shared, wait_ended, wait_for};

#[test]
fn a_job_runs_under_its_id_with_its_env_and_its_log_holds_what_it_printed() {
    let cluster = shared();
    runtime().block_on(async {
        let client = cluster.client();
        let version = client.version().await.expect("version");
        assert_eq!(version.ray_version, "2.60.0");

        let id = fresh_id("hello");
        let mut request = SubmitRequest::new(id.clone(), "echo \"hello, $GREETING\"");
        request
            .runtime_env
            .env_vars
            .insert("GREETING".into(), "playtester".into());
        request
            .metadata
            .insert("cell".into(), "play[kid,jev]".into());
        client.submit(&request).await.expect("submit");

        let job = wait_ended(&client, &id).await;
        assert_succeeded(&job);
        assert_eq!(job.submission_id.as_deref(), Some(id.as_str()));
        assert_eq!(job.driver_exit_code, Some(0));
        assert_eq!(
            job.metadata
                .as_ref()
                .and_then(|m| m.get("cell"))
                .map(String::as_str),
            Some("play[kid,jev]")
        );

        let log = client.logs(&id).await.expect("logs");
        assert!(log.contains("hello, playtester\n"), "log: {log:?}");
        let mut tail = LogTail::new(id.clone());
        let all = tail.next(&client).await.expect("tail");
        assert_eq!(all.text, log);
        assert_eq!(tail.next(&client).await.expect("tail").text, "");

        let listed = client.list().await.expect("list");
        assert!(
            listed
                .iter()
                .any(|j| j.submission_id.as_deref() == Some(id.as_str())),
            "{id} not in the list"
        );
        assert!(client.delete(&id).await.expect("delete"));
        let gone = client.status(&id).await.unwrap_err();
        assert!(matches!(gone, RayError::NotFound { .. }), "{gone:?}");
    });
}

#[test]
fn a_second_submit_of_an_id_is_already_exists_and_leaves_the_first_job_alone() {
    let cluster = shared();
    runtime().block_on(async {
        let client = cluster.client();
        let id = fresh_id("twice");
        client
            .submit(&SubmitRequest::new(id.clone(), "echo first"))
            .await
            .expect("first submit");
        let err = client
            .submit(&SubmitRequest::new(id.clone(), "echo second"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, RayError::AlreadyExists { id: taken, .. } if taken == id.as_str()),
            "{err:?}"
        );
        let job = wait_ended(&client, &id).await;
        assert_succeeded(&job);
        assert_eq!(job.entrypoint, "echo first");
        let log = client.logs(&id).await.expect("logs");
        assert!(
            log.contains("first\n") && !log.contains("second\n"),
            "{log:?}"
        );
    });
}

#[test]
fn a_job_pinned_to_node_b_runs_on_the_worker_and_one_pinned_to_node_a_on_the_head() {
    let cluster = shared();
    runtime().block_on(async {
        let client = cluster.client();
        let mut ids = Vec::new();
        for node in ["node_a", "node_b"] {
            let id = fresh_id(node);
            let mut request = SubmitRequest::new(id.clone(), "echo \"ran on $GAMEPLAN_RAY_NODE\"");
            request.entrypoint_resources.insert(node.into(), 1.0);
            client.submit(&request).await.expect("submit");
            ids.push((node, id));
        }
        for (node, id) in ids {
            let job = wait_ended(&client, &id).await;
            assert_succeeded(&job);
            // The job's own word: each node's processes carry its name.
            let log = client.logs(&id).await.expect("logs");
            assert!(log.contains(&format!("ran on {node}\n")), "{node}: {log:?}");
            // Ray's word: the node whose raylet ran the entrypoint.
            assert_eq!(
                job.driver_node_id.as_deref(),
                Some(cluster.node_offering(node).await.as_str()),
                "{node}"
            );
        }
    });
}

#[test]
fn stop_ends_a_running_job_as_stopped() {
    let cluster = shared();
    runtime().block_on(async {
        let client = cluster.client();
        let id = fresh_id("sleeper");
        client
            .submit(&SubmitRequest::new(
                id.clone(),
                "echo started; exec sleep 120",
            ))
            .await
            .expect("submit");
        wait_for(&client, &id, Duration::from_secs(60), "running", |job| {
            job.status == JobStatus::Running
        })
        .await;
        let asked = Instant::now();
        assert!(
            client.stop(&id).await.expect("stop"),
            "stop stopped nothing"
        );
        let job = wait_ended(&client, &id).await;
        assert_eq!(job.status, JobStatus::Stopped, "{:?}", job.message);
        assert!(
            asked.elapsed() < Duration::from_secs(30),
            "the stop took {:?}",
            asked.elapsed()
        );
        // A second stop is harmless: Ray answers `stopped: false` for an
        // ended job, though right after a stop under load it was seen
        // answering true; either way the job stays stopped.
        client.stop(&id).await.expect("second stop");
        let again = client.status(&id).await.expect("status");
        assert_eq!(again.status, JobStatus::Stopped);
    });
}

#[test]
fn an_unknown_id_is_not_found_for_every_call_about_a_job() {
    let cluster = shared();
    runtime().block_on(async {
        let client = cluster.client();
        let id = fresh_id("never-submitted");
        let errors = [
            client.status(&id).await.map(|_| ()).unwrap_err(),
            client.logs(&id).await.map(|_| ()).unwrap_err(),
            client.stop(&id).await.map(|_| ()).unwrap_err(),
            client.delete(&id).await.map(|_| ()).unwrap_err(),
        ];
        for err in errors {
            assert!(
                matches!(&err, RayError::NotFound { id: missing, .. } if missing == id.as_str()),
                "{err:?}"
            );
        }
    });
}

#[test]
fn a_restarted_head_has_forgotten_its_jobs_and_takes_the_same_id_again() {
    let mut cluster = alone();
    runtime().block_on(async {
        let client = cluster.client();
        let id = fresh_id("before-restart");
        let mut request = SubmitRequest::new(id.clone(), "echo \"attempt on $GAMEPLAN_RAY_NODE\"");
        request.entrypoint_resources.insert("node_a".into(), 1.0);
        client.submit(&request).await.expect("submit");
        assert_succeeded(&wait_ended(&client, &id).await);
        let before = client.version().await.expect("version").session_name;

        cluster.damaged = true;
        let dir = cluster.dir().to_owned();
        cluster.run(&["restart-head", &dir]);

        let after = client.version().await.expect("version").session_name;
        assert_ne!(before, after, "the head did not restart");
        let err = client.status(&id).await.unwrap_err();
        assert!(matches!(err, RayError::NotFound { .. }), "{err:?}");
        // What a resume does on that 404: the same id, submitted again.
        client.submit(&request).await.expect("resubmit");
        let job = wait_ended(&client, &id).await;
        assert_succeeded(&job);
        let log = client.logs(&id).await.expect("logs");
        assert!(log.contains("attempt on node_a\n"), "{log:?}");
    });
}
