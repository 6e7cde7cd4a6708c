//! What Kubernetes says of an attempt, in the executor port's words: a
//! pod's state as last seen, and how a finished Job ended.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use trainyard_jobs::executor::{EndReason, Ending};

use crate::shape::{FILES, MAIN};

/// How a container ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl From<&ContainerStateTerminated> for Term {
    fn from(t: &ContainerStateTerminated) -> Term {
        Term {
            exit_code: t.exit_code,
            signal: t.signal,
            reason: t.reason.clone(),
            message: t.message.clone(),
        }
    }
}

/// The pod of an attempt as last seen (kept after the pod is gone).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSeen {
    pub pod: String,
    pub node: Option<String>,
    pub phase: String,
    /// The main container started (runs or ran): it has a log.
    pub started: bool,
    /// How the main container ended.
    pub main_end: Option<Term>,
    /// An init container that failed.
    pub init_failed: Option<Term>,
    /// Why it was disrupted (`DisruptionTarget`): evicted, its node lost.
    pub disruption: Option<String>,
    /// The kubelet evicted it for what it wrote to its node's disk (past
    /// its `ephemeral-storage` limit or its workspace's size): its words.
    pub over_disk: Option<String>,
    /// Why it waits: kube-scheduler's message, or the container's
    /// (an image that cannot be pulled).
    pub waiting: Option<String>,
    /// It is being deleted, or is gone.
    pub going: bool,
    /// Its image could not be pulled (the kubelet's last word).
    pub pull_failed: Option<PullFailure>,
    /// Since when it has been seen failing to pull, by this server.
    pub pull_failing_since: Option<std::time::Instant>,
}

/// A container whose image could not be pulled.
#[derive(Debug, Clone, PartialEq)]
pub struct PullFailure {
    /// "ImagePullBackOff: Back-off pulling image … (image x, container main)".
    pub why: String,
    /// No retry can help (the name is not an image reference, or the
    /// node may never pull): it fails at once.
    pub permanent: bool,
}

/// What a kubelet says of a container whose image it cannot pull, and
/// whether retrying can help.
const PULL_FAILURES: &[(&str, bool)] = &[
    ("ErrImagePull", false),
    ("ImagePullBackOff", false),
    ("RegistryUnavailable", false),
    ("SignatureValidationFailed", false),
    ("InvalidImageName", true),
    ("ErrImageNeverPull", true),
];

impl PodSeen {
    /// Its main container will write no more.
    pub fn finished(&self) -> bool {
        self.going
            || self.main_end.is_some()
            || matches!(self.phase.as_str(), "Succeeded" | "Failed")
    }
}

pub fn seen(pod: &Pod) -> PodSeen {
    let status = pod.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let condition = |kind: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == kind && c.status == "True")
    };
    let main = status
        .and_then(|s| s.container_statuses.as_deref())
        .and_then(|all| all.iter().find(|c| c.name == MAIN));
    let main_state = main.and_then(|c| c.state.as_ref());
    let main_end = main_state
        .and_then(|s| s.terminated.as_ref())
        .map(Term::from);
    let init_failed = status
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
        .find(|t| t.exit_code != 0)
        .map(Term::from);
    let disruption = condition("DisruptionTarget").map(|c| {
        let mut why = c.reason.clone().unwrap_or_else(|| "disrupted".to_owned());
        if let Some(message) = c.message.as_deref().filter(|m| !m.is_empty()) {
            why = format!("{why}: {message}");
        }
        why
    });
    let unscheduled = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.message.clone().or(c.reason.clone()));
    // Its containers that wait, init containers first: the container, its
    // reason, and the kubelet's message.
    let waiting: Vec<(&ContainerStatus, &str, Option<&str>)> = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .chain(s.container_statuses.iter())
                .flatten()
        })
        .filter_map(|c| {
            let w = c.state.as_ref()?.waiting.as_ref()?;
            let message = w.message.as_deref().filter(|m| !m.is_empty());
            Some((c, w.reason.as_deref()?, message))
        })
        .collect();
    let said = |reason: &str, message: Option<&str>| match message {
        Some(m) => format!("{reason}: {m}"),
        None => reason.to_owned(),
    };
    let container_waiting = waiting
        .iter()
        // Being made is not waiting for anything.
        .find(|(_, reason, _)| *reason != "ContainerCreating" && *reason != "PodInitializing")
        .map(|(c, reason, message)| format!("{} (container {})", said(reason, *message), c.name));
    let pull_failed = waiting.iter().find_map(|(c, reason, message)| {
        let &(_, permanent) = PULL_FAILURES.iter().find(|(r, _)| r == reason)?;
        Some(PullFailure {
            why: format!(
                "{} (image {}, container {})",
                said(reason, *message),
                c.image,
                c.name
            ),
            permanent,
        })
    });
    // Evictions for node pressure carry DisruptionTarget; those for a
    // pod's own local storage say so in the pod's status only.
    let over_disk = status
        .filter(|s| s.reason.as_deref() == Some("Evicted"))
        .and_then(|s| s.message.as_deref())
        .filter(|m| !m.starts_with("The node was low on resource"))
        .filter(|m| m.contains("ephemeral") || m.contains("EmptyDir") || m.contains("storage"))
        .map(|m| m.trim().to_owned());
    PodSeen {
        pod: pod.metadata.name.clone().unwrap_or_default(),
        over_disk,
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_default(),
        started: main_state.is_some_and(|s| s.running.is_some() || s.terminated.is_some()),
        main_end,
        init_failed,
        disruption,
        waiting: unscheduled.or(container_waiting),
        going: pod.metadata.deletion_timestamp.is_some(),
        pull_failed,
        pull_failing_since: None,
    }
}

fn job_condition<'a>(
    job: &'a Job,
    kind: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
}

/// How a finished Job ended; None while it has not.
pub fn job_ending(job: &Job, pod: Option<&PodSeen>) -> Option<Ending> {
    if job_condition(job, "Complete").is_some() {
        return Some(Ending {
            exit_code: Some(0),
            ..Ending::of(EndReason::Exited)
        });
    }
    let failed = job_condition(job, "Failed")?;
    let reason = failed.reason.as_deref().unwrap_or_default();
    let message = failed.message.clone().unwrap_or_default();
    let main_end = pod.and_then(|p| p.main_end.as_ref());
    let with_exit = |mut e: Ending| {
        if let Some(t) = main_end {
            e.exit_code = Some(t.exit_code);
            e.signal = t.signal;
            e.out_of_memory = t.reason.as_deref() == Some("OOMKilled");
        }
        e
    };
    if let Some(why) = pod.and_then(|p| p.disruption.clone()) {
        let on = pod
            .and_then(|p| p.node.as_deref())
            .map(|n| format!("on node {n}, "))
            .unwrap_or_default();
        return Some(Ending {
            message: Some(format!("{on}{why}")),
            ..Ending::of(EndReason::Disrupted)
        });
    }
    if let Some(why) = pod.and_then(|p| p.over_disk.clone()) {
        return Some(with_exit(Ending {
            message: Some(format!(
                "the kubelet evicted its pod: {}",
                why.trim_end_matches('.')
            )),
            ..Ending::of(EndReason::DiskLimit)
        }));
    }
    if reason == "PodFailurePolicy" && message.contains("DisruptionTarget") {
        return Some(Ending {
            message: Some(message),
            ..Ending::of(EndReason::Disrupted)
        });
    }
    if reason == "DeadlineExceeded" {
        return Some(with_exit(Ending::of(EndReason::Timeout)));
    }
    if main_end.is_some() {
        return Some(with_exit(Ending::of(EndReason::Exited)));
    }
    if let Some(t) = pod.and_then(|p| p.init_failed.as_ref()) {
        let detail = t
            .message
            .as_deref()
            .or(t.reason.as_deref())
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        return Some(Ending {
            message: Some(format!(
                "fetching its files ({FILES} container) failed with exit code {}{detail}",
                t.exit_code
            )),
            ..Ending::of(EndReason::StartFailed)
        });
    }
    Some(Ending {
        message: Some(format!("Kubernetes failed its Job: {reason}: {message}")),
        ..Ending::of(EndReason::StartFailed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(kind: &str, reason: &str, message: &str) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "trainyard-1-0"},
            "status": {"conditions": [
                {"type": kind, "status": "True", "reason": reason, "message": message}
            ]}
        }))
        .unwrap()
    }

    fn pod(status: serde_json::Value) -> PodSeen {
        seen(
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "trainyard-1-0-abcde"},
                "spec": {"nodeName": "gpu-node-0003", "containers": []},
                "status": status,
            }))
            .unwrap(),
        )
    }

    fn terminated(code: i32, reason: &str) -> serde_json::Value {
        serde_json::json!({"phase": "Failed", "containerStatuses": [
            {"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": code, "reason": reason}}}
        ]})
    }

    #[test]
    fn a_running_job_has_no_ending_and_a_complete_one_exited_0() {
        let running: Job =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "j"}})).unwrap();
        assert_eq!(job_ending(&running, None), None);
        let done = job_ending(&job("Complete", "CompletionsReached", ""), None).unwrap();
        assert_eq!((done.reason, done.exit_code), (EndReason::Exited, Some(0)));
    }

    #[test]
    fn a_pod_evicted_for_its_disk_ends_over_its_limit_not_disrupted() {
        let failed = job("Failed", "BackoffLimitExceeded", "");
        let mut status = terminated(137, "Error");
        status["reason"] = "Evicted".into();
        status["message"] =
            "Pod ephemeral local storage usage exceeds the total limit of containers 10737418240. "
                .into();
        let seen = pod(status);
        let end = job_ending(&failed, Some(&seen)).unwrap();
        assert_eq!(end.reason, EndReason::DiskLimit);
        assert_eq!(
            end.message.as_deref(),
            Some(
                "the kubelet evicted its pod: Pod ephemeral local storage usage exceeds the total limit of containers 10737418240"
            )
        );
        assert_eq!(end.exit_code, Some(137));
        // An eviction for memory pressure on the node is another matter.
        let mut status = terminated(137, "Error");
        status["reason"] = "Evicted".into();
        status["message"] = "The node was low on resource: ephemeral-storage.".into();
        assert_eq!(pod(status).over_disk, None);
    }

    #[test]
    fn a_failed_pod_gives_its_exit_code_and_oom_in_words() {
        let failed = job(
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        );
        let end = job_ending(&failed, Some(&pod(terminated(3, "Error")))).unwrap();
        assert_eq!(
            (end.reason, end.exit_code, end.out_of_memory),
            (EndReason::Exited, Some(3), false)
        );
        let end = job_ending(&failed, Some(&pod(terminated(137, "OOMKilled")))).unwrap();
        assert_eq!((end.exit_code, end.out_of_memory), (Some(137), true));
    }

    #[test]
    fn a_deadline_is_a_timeout_and_a_disruption_is_no_fault_of_the_job() {
        let late = job_ending(
            &job(
                "Failed",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            ),
            None,
        )
        .unwrap();
        assert_eq!(late.reason, EndReason::Timeout);
        let evicted = pod(serde_json::json!({"phase": "Failed", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
             "message": "Taint manager: deleting due to NoExecute taint key broken"}
        ]}));
        assert!(evicted.finished());
        let end = job_ending(
            &job(
                "Failed",
                "PodFailurePolicy",
                "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0",
            ),
            Some(&evicted),
        )
        .unwrap();
        assert_eq!(end.reason, EndReason::Disrupted);
        assert_eq!(
            end.message.as_deref(),
            Some(
                "on node gpu-node-0003, DeletionByTaintManager: Taint manager: deleting due to NoExecute taint key broken"
            )
        );
        // Without the pod (gone before it was seen), the Job's word is enough.
        let end = job_ending(
            &job(
                "Failed",
                "PodFailurePolicy",
                "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0",
            ),
            None,
        )
        .unwrap();
        assert_eq!(end.reason, EndReason::Disrupted);
    }

    #[test]
    fn a_failed_init_container_is_a_start_that_failed_and_waiting_says_why() {
        let seen = pod(
            serde_json::json!({"phase": "Failed", "initContainerStatuses": [
                {"name": "files", "image": "t", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "401 Unauthorized"}}}
            ]}),
        );
        let end = job_ending(&job("Failed", "BackoffLimitExceeded", ""), Some(&seen)).unwrap();
        assert_eq!(end.reason, EndReason::StartFailed);
        assert_eq!(
            end.message.as_deref(),
            Some("fetching its files (files container) failed with exit code 1: 401 Unauthorized")
        );
        let pulling = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [
                {"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}}
            ]}),
        );
        assert_eq!(
            pulling.waiting.as_deref(),
            Some("ImagePullBackOff: Back-off pulling image \"x\" (container main)")
        );
        assert!(!pulling.started && !pulling.finished());
        assert_eq!(
            pulling.pull_failed,
            Some(PullFailure {
                why: "ImagePullBackOff: Back-off pulling image \"x\" (image x, container main)"
                    .to_owned(),
                permanent: false,
            })
        );
        let invalid = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [
                {"name": "main", "image": "Not An Image", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "InvalidImageName"}}}
            ]}),
        );
        assert!(invalid.pull_failed.is_some_and(|p| p.permanent));
        let creating = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [
                {"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "ContainerCreating"}}}
            ]}),
        );
        assert_eq!((creating.waiting, creating.pull_failed), (None, None));
    }
}
