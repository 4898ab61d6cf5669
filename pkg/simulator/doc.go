// Package simulator replays a trace of pods on a cluster with each
// allocator policy, so that a user can tell which policy suits a cluster
// before deploying it. The gpushare-simulate program runs it (package cli),
// and it runs the extender's own code: allocator.Fit places
// a pod on a node's cards and the policy's NodeScore (NodeScoreHost where
// the policy weighs CPU and memory) rates the node, and the default policy
// learns the typical requests online with allocator.Workload, as the
// extender's cache does.
//
// # Methodology
//
// It follows the FGD study (Weng et al., "Beware of Fragmentation", USENIX
// ATC '23), so that figures are comparable with it:
//
//   - The pods are sorted by name and shuffled with the seed; then clones
//     of pods drawn uniformly are appended until the pods' GPU demand first
//     passes 130% of the cluster's GPU capacity (Arrivals).
//   - They are submitted one by one. A node may take a pod if the pod's CPU
//     and memory requests fit its free allocatable ones (as kube-scheduler's
//     NodeResourcesFit would) and allocator.FitWith places the GPU memory on
//     cards the pod may use (allocator.Exclude: openb gpu_spec as exact
//     model names, a Kubernetes pod's gpushare.io/gpu-* annotations, no
//     cordoned card), as the extender's filter does. The node
//     with the highest score wins; ties are broken by a generator seeded
//     from the seed, so a run is reproducible. A pod that fits nowhere is
//     failed and skipped. Nothing departs.
//   - kube-scheduler's node sampling is replayed (percentageOfNodesToScore,
//     default DefaultPercentageOfNodesToScore, what we ship): a node must
//     first pass kube-scheduler's own filters (CPU, memory, total free GPU
//     memory; which cards a pod may use is the extender's business, so a
//     node of other models still counts), and above 100 nodes a scheduling cycle stops at
//     NodesToFind of those, walked from a start index that rotates as
//     kube-scheduler's does; the policy chooses among them only. A pod
//     whose cards fit on none of them takes another cycle at once, until
//     every node was examined (see replay.submit).
//   - Pods that ask no GPU memory are placed as the replayed topology
//     places them (CPUPodsPlace, the default; ForTopology): by
//     kube-scheduler's own scores (NodeResourcesFit, balanced allocation,
//     TaintToleration over the device plugin's gpushare.io/idle-gpus taint),
//     from the given configuration in the extender topology and from
//     kube-scheduler's defaults in the second-scheduler one, where the
//     cluster's own scheduler places them. No shipped configuration sends
//     them to the extender; an opt-in one that does is replayed with
//     --scheduler-config. CPUPodsSkip leaves them out.
//   - "Allocation at X%" is the mean allocated share of GPU capacity over
//     the pods submitted while the arrived GPU demand (failed pods
//     included) rounds to X% of capacity (Result.AllocAt).
//   - Fragmentation is FGD's measure for the trace's target workload: the
//     free GPU memory that a typical task could not use, in percent of
//     capacity, when arrival first reaches a mark.
//
// With openb traces a card is 1000 units: a sharing task asks gpu_milli
// units of one card and a task with num_gpu = k > 1 asks k whole cards.
// With Kubernetes YAML, units are the nodes' (GiB or MiB).
//
// # Policies
//
// random, spread, binpack, bestfit and fgd are the study's baselines (fgd
// built from the whole trace's task distribution, as the study does, and
// weighing CPU); fragaware, the default, is described in
// allocator.FragAware. On the default openb trace (seeds 42–51) it
// allocates 96.1% of GPU capacity at 100% arrival in either topology,
// against 95.23% for FGD in the study; docs/design/policies.md has the
// tables and their commands.
package simulator
