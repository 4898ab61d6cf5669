// Package gpuclient runs CUDA client processes for the tests that need a
// real NVIDIA GPU (make gpu-check): a PyTorch script that allocates and
// computes on the card it sees, started with the environment and mounts a
// container would get from the device plugin or the DRA driver, either on
// the host (a mount's container path in a variable becomes its host path)
// or in a real container run by runc (StartIn).
package gpuclient
