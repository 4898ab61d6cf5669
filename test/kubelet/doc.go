// Package kubelet holds the tests that drive the gpushare device plugin
// with kubelet's own device manager (see devicehost): registration,
// allocation per container as kubelet admits pods, bursts of identical
// pods, multi-container pods, kubelet restarts and card health. The
// end-to-end tests through a real control plane are in e2e.
package kubelet
