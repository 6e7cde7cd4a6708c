//! Objects as the watches keep them: all of them but their managed fields.
//!
//! The API server sends every object with `metadata.managedFields` (which
//! client set which field, a tree about as large as the object's spec).
//! Nothing here reads them, yet decoding them into JSON values was a
//! twentieth of the server's CPU while thousands of jobs started, and the
//! watches' stores held them for every pod and node of the cluster.
//! [`Lean`] decodes an object with k8s-openapi's own types, skipping them
//! unread.

use std::collections::BTreeMap;
use std::ops::Deref;

use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// An object of kind `K`, decoded without its managed fields.
#[derive(Clone, Debug)]
pub struct Lean<K>(pub K);

impl<K> Deref for Lean<K> {
    type Target = K;

    fn deref(&self) -> &K {
        &self.0
    }
}

/// The kinds that the watches keep: an object of metadata, spec and status.
pub trait Parts: Sized {
    type Spec: for<'de> Deserialize<'de>;
    type Status: for<'de> Deserialize<'de>;

    fn from_parts(
        metadata: ObjectMeta,
        spec: Option<Self::Spec>,
        status: Option<Self::Status>,
    ) -> Self;
}

macro_rules! parts {
    ($($kind:ty: $spec:ty, $status:ty;)*) => {$(
        impl Parts for $kind {
            type Spec = $spec;
            type Status = $status;

            fn from_parts(metadata: ObjectMeta, spec: Option<$spec>, status: Option<$status>) -> Self {
                Self { metadata, spec, status }
            }
        }
    )*};
}

parts! {
    Pod: PodSpec, PodStatus;
    Node: NodeSpec, NodeStatus;
    Job: JobSpec, JobStatus;
}

/// `ObjectMeta` less `managedFields`, which serde skips unread.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

#[derive(Deserialize)]
#[serde(bound = "S: Deserialize<'de>, T: Deserialize<'de>")]
struct Raw<S, T> {
    metadata: Option<Meta>,
    spec: Option<S>,
    status: Option<T>,
}

impl<'de, K: Parts> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Raw::<K::Spec, K::Status>::deserialize(deserializer)?;
        Ok(Lean(K::from_parts(
            raw.metadata.map(ObjectMeta::from).unwrap_or_default(),
            raw.spec,
            raw.status,
        )))
    }
}

impl<K: k8s_openapi::Resource> k8s_openapi::Resource for Lean<K> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K: k8s_openapi::Metadata<Ty = ObjectMeta>> k8s_openapi::Metadata for Lean<K> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        self.0.metadata()
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        self.0.metadata_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod as the API server sends it in a watch event (trimmed).
    const POD: &str = r#"{
      "apiVersion": "v1", "kind": "Pod",
      "metadata": {
        "name": "trainyard-7-1-abc-x2k9p", "namespace": "jobs", "uid": "0b6c",
        "resourceVersion": "4711", "generation": 1,
        "creationTimestamp": "2026-12-04T21:00:00Z",
        "deletionTimestamp": "2026-12-04T21:05:00Z", "deletionGracePeriodSeconds": 30,
        "labels": {"app.kubernetes.io/managed-by": "trainyard", "trainyard.dev/job": "7"},
        "annotations": {"trainyard.dev/run": "abc"},
        "finalizers": ["batch.kubernetes.io/job-tracking"],
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "trainyard-7-1-abc",
                             "uid": "9f1e", "controller": true, "blockOwnerDeletion": true}],
        "managedFields": [
          {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
           "time": "2026-12-04T21:00:00Z", "fieldsType": "FieldsV1",
           "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:trainyard.dev/job": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {".": {}}}}}},
          {"manager": "kwok", "operation": "Update", "apiVersion": "v1", "subresource": "status",
           "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}
        ]
      },
      "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "image": "trainer",
               "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "100m"}}}]},
      "status": {"phase": "Running", "containerStatuses": [{"name": "main", "ready": true,
                 "restartCount": 0, "image": "trainer", "imageID": "",
                 "state": {"running": {"startedAt": "2026-12-04T21:00:02Z"}}}]}
    }"#;

    #[test]
    fn an_object_is_read_whole_but_for_its_managed_fields() {
        let mut full: Pod = serde_json::from_str(POD).unwrap();
        assert_eq!(full.metadata.managed_fields.as_ref().map(Vec::len), Some(2));
        full.metadata.managed_fields = None;
        let lean: Lean<Pod> = serde_json::from_str(POD).unwrap();
        assert_eq!(lean.0, full);
        assert_eq!(lean.metadata.labels.as_ref().unwrap().len(), 2);
        assert_eq!(
            lean.metadata.owner_references.as_ref().unwrap()[0].uid,
            "9f1e"
        );
        assert!(lean.metadata.deletion_timestamp.is_some());
    }

    #[test]
    fn an_object_without_metadata_spec_or_status_is_read_as_empty() {
        let lean: Lean<Job> = serde_json::from_str(r#"{"kind": "Job"}"#).unwrap();
        assert_eq!(lean.0, Job::default());
        let error = serde_json::from_str::<Lean<Node>>(r#"{"spec": {"unschedulable": "yes"}}"#)
            .unwrap_err();
        assert!(error.to_string().contains("boolean"), "{error}");
    }
}
