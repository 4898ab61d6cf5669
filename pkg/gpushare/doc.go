// Package gpushare is the contract shared by the scheduler extender, the
// device plugin and the kubectl plugin: resource names, annotation keys, the
// node inventory and pod allocation formats, and the rule that turns a pod's
// containers into a GPU-memory demand.
//
// GPU memory is counted in whole units of the node's unit. The node's device
// plugin chooses it (GiB by default, MiB optionally) and states it in the
// node inventory. aliyun.com/gpu-mem capacity, pod requests and every number
// in the annotations are in that unit. A pod's request is read in the unit of
// the node it lands on, unconverted; Allocation.InUnit is the one conversion.
//
// docs/design/contract.md describes the resources, the annotations, the
// inventory and how a pod chooses its cards.
package gpushare
