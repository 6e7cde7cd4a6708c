//! The kubelet's pod-resources API (v1), which the node agent reads to know
//! which pod holds which GPU: on Kubernetes the device plugin, not
//! Trainyard, picks the devices of a pod that asks for `nvidia.com/gpu`.
//!
//! The kubelet serves it on a unix socket on every node
//! (`/var/lib/kubelet/pod-resources/kubelet.sock`), as gRPC. One call is
//! used, `List`; its messages are written out here with the field numbers
//! of the kubelet's `api.proto` (k8s.io/kubelet/pkg/apis/podresources/v1),
//! the fields not read left out (protobuf skips them).
//!
//! Device IDs are what the device plugin calls its devices. NVIDIA's names
//! a GPU by its UUID (`deviceIDStrategy: uuid`, the default) or by its
//! index (`index`); with time-slicing each GPU is several devices named
//! `<id>::<n>`. MIG devices and DRA claims are not mapped to GPUs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint, Uri};

/// The resource NVIDIA's device plugin hands out, unless renamed (the
/// server's `kube_gpu_resource`).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The largest answer read (a node of 110 pods answers in a few KB).
const MAX_ANSWER_BYTES: usize = 16 << 20;
/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, PartialEq, prost::Message)]
struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PodResources {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    namespace: String,
    #[prost(message, repeated, tag = "3")]
    containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ContainerResources {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, repeated, tag = "2")]
    devices: Vec<ContainerDevices>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ContainerDevices {
    #[prost(string, tag = "1")]
    resource_name: String,
    #[prost(string, repeated, tag = "2")]
    device_ids: Vec<String>,
}

/// A pod's GPUs, by the device plugin's device IDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDevices {
    pub namespace: String,
    pub pod: String,
    /// Every container's `nvidia.com/gpu` device IDs, each once.
    pub device_ids: Vec<String>,
}

/// A client of one node's kubelet pod-resources socket.
#[derive(Debug, Clone)]
pub struct PodResourcesClient {
    socket: PathBuf,
    channel: Channel,
    /// The extended resource that names GPUs.
    resource: String,
}

impl PodResourcesClient {
    /// Connects lazily: a socket not there yet (the kubelet restarting) is
    /// an error of the call, not of this. `resource` is the extended
    /// resource whose devices are GPUs ([`GPU_RESOURCE`] unless renamed).
    pub fn new(socket: &Path, resource: &str) -> PodResourcesClient {
        let path = socket.to_owned();
        // The URI is not used to connect (the connector dials the socket);
        // it names the :authority, as kubelet clients do.
        let channel = Endpoint::from_static("http://localhost")
            .timeout(CALL_TIMEOUT)
            .connect_timeout(CALL_TIMEOUT)
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(&path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }));
        PodResourcesClient {
            socket: socket.to_owned(),
            channel,
            resource: resource.to_owned(),
        }
    }

    /// Every pod of the node with GPUs, by the kubelet's `List`.
    pub async fn gpu_pods(&self) -> Result<Vec<PodDevices>, String> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(MAX_ANSWER_BYTES);
        let call = async {
            grpc.ready().await.map_err(|e| causes(&e))?;
            grpc.unary(
                tonic::Request::new(ListPodResourcesRequest {}),
                PathAndQuery::from_static("/v1.PodResourcesLister/List"),
                tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default(),
            )
            .await
            .map_err(|status| match std::error::Error::source(&status) {
                Some(cause) => format!("{}: {}", status.message(), causes(cause)),
                None => status.message().to_owned(),
            })
        };
        let answer = tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| format!("{}: no answer in {CALL_TIMEOUT:?}", self.socket.display()))?
            .map_err(|e| format!("{}: {e}", self.socket.display()))?;
        Ok(gpu_pods(answer.into_inner(), &self.resource))
    }
}

/// An error with its causes ("transport error" alone does not say that
/// the socket is missing or refused).
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn gpu_pods(answer: ListPodResourcesResponse, resource: &str) -> Vec<PodDevices> {
    answer
        .pod_resources
        .into_iter()
        .filter_map(|p| {
            let mut device_ids: Vec<String> = Vec::new();
            for d in p.containers.iter().flat_map(|c| &c.devices) {
                if d.resource_name != resource {
                    continue;
                }
                for id in &d.device_ids {
                    if !device_ids.contains(id) {
                        device_ids.push(id.clone());
                    }
                }
            }
            (!device_ids.is_empty()).then_some(PodDevices {
                namespace: p.namespace,
                pod: p.name,
                device_ids,
            })
        })
        .collect()
}

/// The GPUs (by UUID) that device IDs name, given the node's GPUs as
/// index → UUID: a UUID as it is, an index as its GPU's UUID, a
/// time-sliced replica (`<id>::<n>`) as its GPU. IDs that name none of
/// the node's GPUs (MIG devices, other plugins) are left out.
pub fn gpu_uuids(device_ids: &[String], gpus: &BTreeMap<u32, String>) -> Vec<String> {
    let mut uuids: Vec<String> = Vec::new();
    for id in device_ids {
        let id = id.split_once("::").map_or(id.as_str(), |(gpu, _)| gpu);
        let uuid = if gpus.values().any(|u| u == id) {
            Some(id.to_owned())
        } else {
            id.parse::<u32>().ok().and_then(|i| gpus.get(&i).cloned())
        };
        if let Some(uuid) = uuid
            && !uuids.contains(&uuid)
        {
            uuids.push(uuid);
        }
    }
    uuids
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    fn devices(resource: &str, ids: &[&str]) -> ContainerDevices {
        ContainerDevices {
            resource_name: resource.to_owned(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn an_answer_decodes_into_the_pods_that_hold_gpus() {
        let answer = ListPodResourcesResponse {
            pod_resources: vec![
                PodResources {
                    name: "job-7-0-abcde".to_owned(),
                    namespace: "trainyard-jobs".to_owned(),
                    containers: vec![
                        ContainerResources {
                            name: "main".to_owned(),
                            devices: vec![
                                devices(GPU_RESOURCE, &["GPU-b", "GPU-a"]),
                                devices("example.com/nic", &["nic-0"]),
                            ],
                        },
                        ContainerResources {
                            name: "sidecar".to_owned(),
                            devices: vec![devices(GPU_RESOURCE, &["GPU-a"])],
                        },
                    ],
                },
                PodResources {
                    name: "coredns".to_owned(),
                    namespace: "kube-system".to_owned(),
                    containers: vec![ContainerResources {
                        name: "coredns".to_owned(),
                        devices: Vec::new(),
                    }],
                },
            ],
        };
        // Through the wire, as the kubelet sends it.
        let bytes = answer.encode_to_vec();
        let decoded = ListPodResourcesResponse::decode(bytes.as_slice()).unwrap();
        assert_eq!(
            gpu_pods(decoded.clone(), GPU_RESOURCE),
            vec![PodDevices {
                namespace: "trainyard-jobs".to_owned(),
                pod: "job-7-0-abcde".to_owned(),
                device_ids: vec!["GPU-b".to_owned(), "GPU-a".to_owned()],
            }]
        );
        // A cluster whose GPUs go by another resource name.
        assert_eq!(
            gpu_pods(decoded, "example.com/nic"),
            vec![PodDevices {
                namespace: "trainyard-jobs".to_owned(),
                pod: "job-7-0-abcde".to_owned(),
                device_ids: vec!["nic-0".to_owned()],
            }]
        );
    }

    #[test]
    fn fields_the_client_does_not_read_are_skipped() {
        // ContainerResources with cpu_ids (3, packed int64) and a
        // ContainerMemory (4), as a node with the CPU and memory managers
        // sends them.
        let mut container = ContainerResources {
            name: "main".to_owned(),
            devices: vec![devices(GPU_RESOURCE, &["GPU-a"])],
        }
        .encode_to_vec();
        container.extend([3 << 3 | 2, 2, 4, 5]); // cpu_ids: [4, 5]
        container.extend([4 << 3 | 2, 2, 2 << 3, 1]); // memory: [{size: 1}]
        let decoded = ContainerResources::decode(container.as_slice()).unwrap();
        assert_eq!(decoded.devices[0].device_ids, ["GPU-a"]);
    }

    #[test]
    fn device_ids_map_to_the_nodes_gpus() {
        let gpus: BTreeMap<u32, String> = [(0, "GPU-a"), (1, "GPU-b"), (2, "GPU-c")]
            .into_iter()
            .map(|(i, u)| (i, u.to_owned()))
            .collect();
        let ids = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // By UUID, by index, time-sliced replicas of one GPU as that GPU,
        // and what names no GPU of the node left out.
        assert_eq!(
            gpu_uuids(&ids(&["GPU-c", "GPU-a"]), &gpus),
            ["GPU-c", "GPU-a"]
        );
        assert_eq!(gpu_uuids(&ids(&["1", "2"]), &gpus), ["GPU-b", "GPU-c"]);
        assert_eq!(
            gpu_uuids(&ids(&["GPU-b::0", "GPU-b::3", "0::1"]), &gpus),
            ["GPU-b", "GPU-a"]
        );
        assert!(gpu_uuids(&ids(&["MIG-1234", "7", "GPU-z"]), &gpus).is_empty());
    }

    #[tokio::test]
    async fn a_missing_socket_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("kubelet.sock");
        let e = PodResourcesClient::new(&socket, GPU_RESOURCE)
            .gpu_pods()
            .await
            .unwrap_err();
        assert!(e.contains("kubelet.sock"), "{e}");
        // The cause, not just "transport error".
        assert!(e.contains("No such file or directory"), "{e}");
    }
}
