//go:build race

package cluster

// raceEnabled: this binary was built with -race, so Build builds the node
// agent with -race too, from the packages the tests' own -race build has
// compiled already (it embeds k8s.io/kubernetes' kubelet packages: built
// without -race they would be compiled a second time).
const raceEnabled = true
