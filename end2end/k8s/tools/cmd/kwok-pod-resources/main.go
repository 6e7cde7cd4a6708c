// Command kwok-pod-resources serves the kubelet's pod-resources API (v1) for
// one kwok node, as a real node's kubelet does at
// /var/lib/kubelet/pod-resources/kubelet.sock.
//
// kwok simulates kubelets but serves no pod-resources socket, so the node
// agent's reading of "which pod holds which GPU" could not be tested on the
// test cluster. The gRPC server here is the kubelet's own
// (k8s.io/kubernetes/pkg/kubelet/apis/podresources); what it is given is
// what the kubelet's pod manager and device manager would know:
//
//   - the pods bound to the node, from the real API server (an informer);
//   - which devices each container got: the node's GPUs (-gpus, the device
//     plugin's device IDs) handed out to containers that request
//     nvidia.com/gpu, in the order their pods arrive, from the LAST free
//     GPU down, so that the devices differ from Trainyard's own picks (it
//     fills from index 0) and a consumer that trusts its own picks is
//     caught. A pod keeps its devices until it ends or is deleted.
//
//	kwok-pod-resources -kubeconfig K -node N -socket S -gpus GPU-a,GPU-b,...
package main

import (
	"context"
	"flag"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
)

const gpuResource = "nvidia.com/gpu"

// node holds the node's pods (from the informer) and its device manager's
// allocations.
type node struct {
	lister cache.Indexer
	gpus   []string

	mu sync.Mutex
	// pod UID -> container name -> device IDs
	given map[string]map[string][]string
}

func (n *node) pods() []*v1.Pod {
	var pods []*v1.Pod
	for _, o := range n.lister.List() {
		pods = append(pods, o.(*v1.Pod))
	}
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return pods[i].Name < pods[j].Name
	})
	return pods
}

func ended(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
}

// GetActivePods: the pods that are not terminal.
func (n *node) GetActivePods() []*v1.Pod {
	var active []*v1.Pod
	for _, p := range n.pods() {
		if !ended(p) {
			active = append(active, p)
		}
	}
	return active
}

func (n *node) GetPods() []*v1.Pod { return n.pods() }

func (n *node) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, p := range n.pods() {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// UpdateAllocatedDevices frees the devices of pods that ended or are gone,
// then gives devices to the containers that asked and have none yet.
func (n *node) UpdateAllocatedDevices(klog.Logger) {
	n.mu.Lock()
	defer n.mu.Unlock()
	active := n.GetActivePods()
	live := map[string]bool{}
	for _, p := range active {
		live[string(p.UID)] = true
	}
	for uid := range n.given {
		if !live[uid] {
			delete(n.given, uid)
		}
	}
	used := map[string]bool{}
	for _, containers := range n.given {
		for _, ids := range containers {
			for _, id := range ids {
				used[id] = true
			}
		}
	}
	for _, p := range active {
		for _, c := range p.Spec.Containers {
			q, ok := c.Resources.Limits[gpuResource]
			if !ok || q.Value() <= 0 {
				continue
			}
			uid := string(p.UID)
			if _, done := n.given[uid][c.Name]; done {
				continue
			}
			var ids []string
			for i := len(n.gpus) - 1; i >= 0 && int64(len(ids)) < q.Value(); i-- {
				if !used[n.gpus[i]] {
					ids = append(ids, n.gpus[i])
				}
			}
			if int64(len(ids)) < q.Value() {
				continue // as a kubelet would not admit it
			}
			for _, id := range ids {
				used[id] = true
			}
			if n.given[uid] == nil {
				n.given[uid] = map[string][]string{}
			}
			n.given[uid][c.Name] = ids
		}
	}
}

func (n *node) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := n.given[podUID][containerName]
	if len(ids) == 0 {
		return nil
	}
	return []*podresourcesapi.ContainerDevices{{ResourceName: gpuResource, DeviceIds: append([]string(nil), ids...)}}
}

func (n *node) GetAllocatableDevices(klog.Logger) []*podresourcesapi.ContainerDevices {
	return []*podresourcesapi.ContainerDevices{{ResourceName: gpuResource, DeviceIds: append([]string(nil), n.gpus...)}}
}

// No CPU or memory manager policies on this node.
type none struct{}

func (none) GetCPUs(*v1.Pod, *v1.Container) []int64 { return nil }
func (none) GetPodCPUs(string) []int64               { return nil }
func (none) GetAllocatableCPUs() []int64             { return nil }
func (none) GetMemory(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.ContainerMemory {
	return nil
}
func (none) GetPodMemory(klog.Logger, string) []*podresourcesapi.ContainerMemory { return nil }
func (none) GetAllocatableMemory(klog.Logger) []*podresourcesapi.ContainerMemory  { return nil }
func (none) GetDynamicResources(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.DynamicResource {
	return nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the cluster's kubeconfig")
	nodeName := flag.String("node", "", "the kwok node")
	socket := flag.String("socket", "", "the unix socket to serve on")
	gpus := flag.String("gpus", "", "the node's GPUs' device IDs, comma-separated, in index order")
	flag.Parse()
	if *kubeconfig == "" || *nodeName == "" || *socket == "" || *gpus == "" {
		flag.Usage()
		os.Exit(2)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	client := kubernetes.NewForConfigOrDie(config)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", *nodeName).String()
		}))
	informer := factory.Core().V1().Pods().Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		klog.Fatal("the pod informer did not sync")
	}

	n := &node{lister: informer.GetIndexer(), gpus: strings.Split(*gpus, ","), given: map[string]map[string][]string{}}
	server := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(server, podresources.NewV1PodResourcesServer(ctx, podresources.PodResourcesProviders{
		Pods: n, Devices: n, Cpus: none{}, Memory: none{}, DynamicResources: none{},
	}))
	_ = os.Remove(*socket)
	listener, err := net.Listen("unix", *socket)
	if err != nil {
		klog.Fatalf("listen on %s: %v", *socket, err)
	}
	go func() {
		<-ctx.Done()
		server.Stop()
	}()
	klog.Infof("serving pod-resources for node %s on %s (%d GPUs)", *nodeName, *socket, len(n.gpus))
	if err := server.Serve(listener); err != nil && ctx.Err() == nil {
		klog.Fatalf("serve: %v", err)
	}
}
