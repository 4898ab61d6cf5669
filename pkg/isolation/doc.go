// Package isolation enforces each container's share of GPU memory with the
// vendor's mechanisms, chosen per card:
//
//   - driver: drivers R615 and newer limit device memory per cgroup. The
//     container runtime applies the limit through the NVIDIA container
//     toolkit's CDI hook apply-cuda-memory-limits, named in a CDI spec this
//     package writes.
//   - mps: one MPS control daemon per card limits each client by
//     CUDA_MPS_PINNED_DEVICE_MEM_LIMIT. MPS, the plugin's side, writes each
//     card's desired state on the host. MPSDaemons, in the plugin's process
//     or a container of its own, runs the daemons it asks for.
//   - none: advisory environment only.
//
// Detect reads what the node supports: driver version, cgroup v2, each
// card's MIG mode and MPS support. Choose turns the --isolation request into
// a mode per card, or an error naming what is missing. Enforcer builds each
// container's environment, mounts and CDI devices for its cards' modes.
package isolation
