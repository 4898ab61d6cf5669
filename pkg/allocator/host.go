package allocator

// Host is what a caller may know of a node besides its cards. It holds the
// node's free CPU and memory before the pod, and what the pod asks of them.
// It also holds the cluster's largest node, to put CPU and GPU on one scale.
// The extender's cache and the simulator both track all of it.
type Host struct {
	// FreeMilliCPU and FreeMemoryMiB are what the node has left before the
	// pod, in millicores and MiB.
	FreeMilliCPU, FreeMemoryMiB int64
	// PodMilliCPU and PodMemoryMiB are what the pod asks.
	PodMilliCPU, PodMemoryMiB int64
	// MaxMilliCPU and MaxUnits are the CPU and the GPU memory (in units) of
	// the cluster's largest node.
	MaxMilliCPU, MaxUnits int64
}

// HostScorer is a Policy whose node score also weighs CPU: BestFit, FGD
// and FragAware. FragAware weighs memory too. A caller with a Host calls
// NodeScoreHost instead of NodeScore. Without one, NodeScore is their
// GPU-only form.
type HostScorer interface {
	Policy
	// NodeScoreHost rates n once pl is placed and the pod's CPU taken from h.
	NodeScoreHost(n *Node, pl *Placement, h *Host) float64
}

// CPUScorer is a Policy that also rates nodes for a pod that asks no GPU
// memory: FragAware and FGD. It rates them by what the pod's CPU and memory
// do to the GPU memory others can use there. The extender scores such pods
// with it when kube-scheduler sends them. Only the opt-in
// config/kube-scheduler-config-score-cpu-pods.yaml does. The simulator
// replays it.
type CPUScorer interface {
	// NodeScoreCPU rates n for a pod that takes h's PodMilliCPU and
	// PodMemoryMiB and no GPU memory. Higher is better.
	NodeScoreCPU(n *Node, h *Host) float64
}
