package simulator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// gpuExtender is an extender entry for GPU pods, as the configurations of
// TestParseSchedulerConfig need one.
const gpuExtender = `
extenders:
- urlPrefix: http://x/gpushare-scheduler
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 5
  managedResources: [{name: aliyun.com/gpu-mem}]
`

func TestParseSchedulerConfig(t *testing.T) {
	least := ScoringStrategy{Type: LeastAllocated, Resources: []ResourceWeight{{"cpu", 1}, {"memory", 1}}}
	cpuMem := []string{"cpu", "memory"}
	tests := []struct {
		name, config string
		want         *Scheduler
		wantErr      string
	}{
		{
			name:   "kube-scheduler's defaults",
			config: "kind: KubeSchedulerConfiguration" + gpuExtender,
			want:   &Scheduler{FitWeight: 1, Fit: least, BalancedWeight: 1, BalancedResources: cpuMem, TaintWeight: 3, GPUPrioritizeWeight: 5},
		},
		{
			name: "a second entry prioritizes every pod; the percentage of the profile wins",
			config: `percentageOfNodesToScore: 30
profiles: [{percentageOfNodesToScore: 60}]
extenders:
- {filterVerb: filter, bindVerb: bind, managedResources: [{name: aliyun.com/gpu-mem}]}
- {prioritizeVerb: prioritize, weight: 7}
- {prioritizeVerb: prioritize, weight: 2, managedResources: [{name: example.com/fpga}]}
`,
			want: &Scheduler{PercentageOfNodesToScore: 60, FitWeight: 1, Fit: least, BalancedWeight: 1, BalancedResources: cpuMem, TaintWeight: 3,
				GPUPrioritizeWeight: 7, CPUPrioritizeWeight: 7},
		},
		{
			name: "MostAllocated with weights, BalancedAllocation disabled for scoring",
			config: `profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      disabled: [{name: NodeResourcesBalancedAllocation}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 3}, {name: memory}, {name: aliyun.com/gpu-mem, weight: 2}]
` + gpuExtender,
			want: &Scheduler{FitWeight: 1, TaintWeight: 3, Fit: ScoringStrategy{Type: MostAllocated, Resources: []ResourceWeight{{"cpu", 3}, {"memory", 1}, {"aliyun.com/gpu-mem", 2}}},
				BalancedResources: cpuMem, GPUPrioritizeWeight: 5},
		},
		{
			name: "the default-scheduler profile of two; score weights over MultiPoint's",
			config: `profiles:
- schedulerName: other
  plugins: {score: {disabled: [{name: "*"}]}}
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: NodeResourcesBalancedAllocation, weight: 4}]
    score:
      enabled: [{name: NodeResourcesFit, weight: 0}]
  pluginConfig:
  - name: NodeResourcesBalancedAllocation
    args: {resources: [{name: cpu}, {name: memory}, {name: aliyun.com/gpu-mem}]}
` + gpuExtender,
			want: &Scheduler{FitWeight: 1, Fit: least, BalancedWeight: 4, BalancedResources: []string{"cpu", "memory", "aliyun.com/gpu-mem"}, TaintWeight: 3, GPUPrioritizeWeight: 5},
		},
		{
			name: "every default plugin disabled, NodeResourcesFit enabled again",
			config: `profiles:
- plugins:
    multiPoint:
      disabled: [{name: "*"}]
      enabled: [{name: NodeResourcesFit, weight: 2}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: RequestedToCapacityRatio
        requestedToCapacityRatio: {shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]}
` + gpuExtender,
			want: &Scheduler{FitWeight: 2, BalancedResources: cpuMem, GPUPrioritizeWeight: 5,
				Fit: ScoringStrategy{Type: RequestedToCapacityRatio, Resources: least.Resources, Shape: []ShapePoint{{0, 0}, {100, 10}}}},
		},
		{
			name: "TaintToleration's score weight from plugins.score",
			config: `profiles:
- plugins:
    score:
      enabled: [{name: TaintToleration, weight: 1}]
` + gpuExtender,
			want: &Scheduler{FitWeight: 1, Fit: least, BalancedWeight: 1, BalancedResources: cpuMem, TaintWeight: 1, GPUPrioritizeWeight: 5},
		},
		{
			name:    "no extender filters GPU pods",
			config:  "extenders: [{prioritizeVerb: prioritize, weight: 1}]",
			wantErr: "0 extenders filter pods that ask aliyun.com/gpu-mem; a replay follows one, the gpushare extender's filter",
		},
		{
			name:    "an extender filters every pod",
			config:  "extenders: [{filterVerb: filter}]",
			wantErr: "extender 0 filters every pod: a replay follows the gpushare filter for pods that ask aliyun.com/gpu-mem only",
		},
		{
			name:    "RequestedToCapacityRatio without a shape",
			config:  "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: RequestedToCapacityRatio}}}]}]" + gpuExtender,
			wantErr: "NodeResourcesFit args: RequestedToCapacityRatio needs a shape",
		},
		{
			name:    "unknown strategy",
			config:  "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: Fancy}}}]}]" + gpuExtender,
			wantErr: `NodeResourcesFit args: scoring strategy "Fancy": want LeastAllocated, MostAllocated or RequestedToCapacityRatio`,
		},
		{
			name:    "no default profile",
			config:  "profiles: [{schedulerName: a}, {schedulerName: b}]" + gpuExtender,
			wantErr: "no profile has schedulerName default-scheduler",
		},
		{
			name:    "percentage out of range",
			config:  "percentageOfNodesToScore: 101" + gpuExtender,
			wantErr: "percentageOfNodesToScore 101: want 0 to 100",
		},
		{
			name:    "another kind",
			config:  "kind: Pod",
			wantErr: "kind is Pod; want KubeSchedulerConfiguration",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSchedulerConfig([]byte(tc.config))
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, gotErr); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestSchedulerScore checks the replay of kube-scheduler v1.34's
// NodeResourcesFit and NodeResourcesBalancedAllocation scores against
// values worked out by hand from their definitions: integer shares of 100,
// weighted means rounded down (RequestedToCapacityRatio: to the nearest),
// CPU and memory with kube-scheduler's defaults for containers that request
// none in NodeResourcesFit but not in BalancedAllocation, extended
// resources the pod does not ask left out.
func TestSchedulerScore(t *testing.T) {
	node := kubeUsage{allocCPU: 10000, allocMem: 20000, allocGPU: 8000, reqCPU: 3000, reqMem: 5000, nzCPU: 3000, nzMem: 5000, reqGPU: 2000}
	pod := podUsage{cpu: 3000, mem: 5000, nzCPU: 3000, nzMem: 5000}
	gpuPod := podUsage{cpu: 3000, mem: 5000, nzCPU: 3000, nzMem: 5000, gpu: 2000}
	cpuMem := []ResourceWeight{{"cpu", 1}, {"memory", 1}}
	withGPU := []ResourceWeight{{"cpu", 3}, {"memory", 1}, {"aliyun.com/gpu-mem", 4}}
	linear := []ShapePoint{{0, 0}, {100, 10}}
	tests := []struct {
		name  string
		s     Scheduler
		node  kubeUsage
		pod   podUsage
		want  int64
		fit   int64 // NodeResourcesFit's own score
		extra string
	}{
		{
			// CPU (10000−6000)·100/10000 = 40, memory 50: 45; shares
			// .6 and .5: std .05, 95.
			name: "LeastAllocated and BalancedAllocation", s: Scheduler{FitWeight: 1, Fit: ScoringStrategy{Type: LeastAllocated, Resources: cpuMem}, BalancedWeight: 1, BalancedResources: []string{"cpu", "memory"}},
			node: node, pod: pod, want: 45 + 95, fit: 45,
		},
		{
			// (60·3 + 50·1)/4 = 57.5, rounded down; the CPU-only pod's
			// gpu-mem is left out.
			name: "MostAllocated, weighted, gpu-mem left out for a CPU-only pod", s: Scheduler{FitWeight: 2, Fit: ScoringStrategy{Type: MostAllocated, Resources: withGPU}},
			node: node, pod: pod, want: 2 * 57, fit: 57,
		},
		{
			// gpu-mem 4000/8000 = 50: (180 + 50 + 200)/8 = 53.75.
			name: "MostAllocated with the gpu-mem of a GPU pod", s: Scheduler{FitWeight: 1, Fit: ScoringStrategy{Type: MostAllocated, Resources: withGPU}},
			node: node, pod: gpuPod, want: 53, fit: 53,
		},
		{
			name: "RequestedToCapacityRatio, linear: (60 + 50)/2", s: Scheduler{FitWeight: 1, Fit: ScoringStrategy{Type: RequestedToCapacityRatio, Resources: cpuMem, Shape: linear}},
			node: node, pod: pod, want: 55, fit: 55,
		},
		{
			// CPU 61% → 61, memory 50% → 50: 55.5 rounds to 56.
			name: "RequestedToCapacityRatio rounds to the nearest", s: Scheduler{FitWeight: 1, Fit: ScoringStrategy{Type: RequestedToCapacityRatio, Resources: cpuMem, Shape: linear}},
			node: node, pod: podUsage{cpu: 3100, mem: 5000, nzCPU: 3100, nzMem: 5000}, want: 56, fit: 56,
		},
		{
			// Memory at 0% scores 0 and neither it nor its weight counts:
			// CPU 30% alone.
			name: "RequestedToCapacityRatio leaves out resources scoring 0", s: Scheduler{FitWeight: 1, Fit: ScoringStrategy{Type: RequestedToCapacityRatio, Resources: cpuMem, Shape: linear}},
			node: kubeUsage{allocCPU: 10000, allocMem: 20000}, pod: podUsage{cpu: 3000, nzCPU: 3000}, want: 30, fit: 30,
		},
		{
			// Shape (0, 10), (50, 2), (100, 0): CPU 60% → 2·10 −
			// 2·10·10/50 = 16, memory 50% → 20: 18.
			name: "RequestedToCapacityRatio, broken line", s: Scheduler{FitWeight: 1, Fit: ScoringStrategy{Type: RequestedToCapacityRatio, Resources: cpuMem, Shape: []ShapePoint{{0, 10}, {50, 2}, {100, 0}}}},
			node: node, pod: pod, want: 18, fit: 18,
		},
		{
			// NodeResourcesFit counts the pod as 100 millicores and 200
			// MiB; BalancedAllocation as it asks: nothing, so it is
			// skipped.
			name: "a pod that requests nothing", s: Scheduler{FitWeight: 1, Fit: ScoringStrategy{Type: LeastAllocated, Resources: cpuMem}, BalancedWeight: 1, BalancedResources: []string{"cpu", "memory"}},
			node: kubeUsage{allocCPU: 1000, allocMem: 1000}, pod: podUsage{nzCPU: 100, nzMem: 200}, want: (90 + 80) / 2, fit: 85,
		},
		{
			name: "LeastAllocated over capacity scores 0", s: Scheduler{FitWeight: 1, Fit: ScoringStrategy{Type: LeastAllocated, Resources: cpuMem}},
			node: kubeUsage{allocCPU: 1000, allocMem: 1000, nzCPU: 900, nzMem: 500}, pod: podUsage{cpu: 200, mem: 100, nzCPU: 200, nzMem: 100}, want: 20, fit: 20,
		},
		{
			// Shares .6, .5, .5: mean .5333, std √((.0044+.0011·2)/3)
			// = .0471: 95.
			name: "BalancedAllocation over three resources", s: Scheduler{BalancedWeight: 3, BalancedResources: []string{"cpu", "memory", "aliyun.com/gpu-mem"}},
			node: node, pod: gpuPod, want: 3 * 95,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.score(&tc.node, &tc.pod); got != tc.want {
				t.Errorf("score %d, want %d", got, tc.want)
			}
			if tc.s.FitWeight > 0 {
				if got := tc.s.fitScore(&tc.node, &tc.pod); got != tc.fit {
					t.Errorf("NodeResourcesFit %d, want %d", got, tc.fit)
				}
			}
		})
	}
}

// TestBalancedScore holds NodeResourcesBalancedAllocation's two formulas
// to numbers worked by hand (balancedScore's doc comment): 1.34 scores the
// balance with the pod, 1.36 and later the gain, and the two rank these
// nodes in opposite order.
func TestBalancedScore(t *testing.T) {
	const gib = int64(1) << 30
	node := func(cpuMilli, mem int64) *kubeUsage {
		return &kubeUsage{allocCPU: 32000, allocMem: 128 * gib, reqCPU: cpuMilli, reqMem: mem}
	}
	pod := &podUsage{cpu: 4000, mem: 32 * gib}
	res := []string{resourceCPU, resourceMemory}
	for _, tc := range []struct {
		name string
		u    *kubeUsage
		p    *podUsage
		gain bool
		want int64
	}{
		{"balanced node, 1.34", node(8000, 32*gib), pod, false, 93},
		{"balanced node, gain", node(8000, 32*gib), pod, true, 71},
		{"CPU-heavy node, 1.34", node(16000, 0), pod, false, 81},
		{"CPU-heavy node, gain", node(16000, 0), pod, true, 78},
		{"a pod asking neither", node(16000, 0), &podUsage{gpu: 8}, true, 0},
		{"full node: shares capped at 1", node(32000, 128*gib), pod, true, 75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := balancedScore(res, tc.u, tc.p, tc.gain); got != tc.want {
				t.Errorf("balancedScore = %d, want %d", got, tc.want)
			}
		})
	}
	s := ShippedScheduler
	s.CPU = &DefaultKubeScheduler
	for _, tc := range []struct {
		minor int
		want  bool
	}{{34, false}, {35, false}, {36, true}, {37, true}} {
		got := s.ForKubernetes(tc.minor)
		if got.BalanceGain != tc.want || got.CPU.BalanceGain != tc.want {
			t.Errorf("ForKubernetes(%d): BalanceGain %v, its CPU scheduler's %v; want %v", tc.minor, got.BalanceGain, got.CPU.BalanceGain, tc.want)
		}
	}
	if ShippedScheduler.BalanceGain || DefaultKubeScheduler.BalanceGain {
		t.Error("ForKubernetes changed ShippedScheduler or DefaultKubeScheduler")
	}
}
