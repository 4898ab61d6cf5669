// Package deviceplugin is the gpushare device plugin's face to kubelet: it
// serves aliyun.com/gpu-mem over kubelet's device plugin API, registers it,
// and builds and runs the plugin from its Config (docs/design/device-plugin.md).
package deviceplugin
