package trace

import (
	"strings"
	"testing"
)

// The trace readers take a file from the operator: they must answer any
// input with nodes or pods, or an error naming the file, never a panic,
// and what they accept must be usable (sizes not negative).

func FuzzReadOpenbNodes(f *testing.F) {
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,2,G2\nn2,64000,262144,0,\n")
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nn1,-1,1,99999999999999999999,G2\n")
	f.Add("sn,gpu\n\"n1,2\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		nodes, err := ReadOpenbNodes(strings.NewReader(s), "nodes.csv")
		if err != nil {
			if !strings.Contains(err.Error(), "nodes.csv") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, n := range nodes {
			if n.MilliCPU < 0 || n.MemoryMiB < 0 {
				t.Fatalf("node %q accepted with %d mCPU, %d MiB", n.Name, n.MilliCPU, n.MemoryMiB)
			}
			for _, c := range n.Cards {
				if c.Total <= 0 {
					t.Fatalf("node %q card %d accepted with %d units", n.Name, c.Index, c.Total)
				}
			}
		}
	})
}

func FuzzReadOpenbPods(f *testing.F) {
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\nshare,6000,12288,1,460,,LS\nwhole,12000,16384,1,1000,P100|T4,BE\nmulti,88000,327680,8,1000,,LS\ncpu,8000,30517,0,0,,BE\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1001\n")
	f.Add("name,num_gpu,gpu_milli\np,2,460\n")
	f.Add("name\n")
	f.Fuzz(func(t *testing.T, s string) {
		pods, err := ReadOpenbPods(strings.NewReader(s), "pods.csv")
		if err != nil {
			if !strings.Contains(err.Error(), "pods.csv") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, p := range pods {
			if p.MilliCPU < 0 || p.MemoryMiB < 0 {
				t.Fatalf("pod %q accepted with %d mCPU, %d MiB", p.Name, p.MilliCPU, p.MemoryMiB)
			}
		}
	})
}

func FuzzReadKubernetes(f *testing.F) {
	f.Add(`apiVersion: v1
kind: Node
metadata: {name: n1, annotations: {gpushare.io/inventory: '{"unit":"GiB","devices":[{"index":0,"uuid":"GPU-0","model":"T4","memory":16,"healthy":true}]}'}}
status: {allocatable: {cpu: "8", memory: 32Gi, aliyun.com/gpu-mem: "16"}}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec: {containers: [{name: c, resources: {limits: {aliyun.com/gpu-mem: "4"}}}]}
`)
	f.Add(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}]}`)
	f.Add("kind: Node\n---\n: : :\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		nodes, pods, err := ReadKubernetes(strings.NewReader(s), "cluster.yaml")
		if err != nil {
			if !strings.Contains(err.Error(), "cluster.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, n := range nodes {
			for _, c := range n.Cards {
				if c.Total < 0 {
					t.Fatalf("node %q card %d accepted with %d units", n.Name, c.Index, c.Total)
				}
			}
		}
		_ = pods
	})
}
