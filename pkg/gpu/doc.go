// Package gpu describes the host's NVIDIA GPUs through a small interface of
// our own: each card's index, UUID, model and memory (MiB), its XID error
// events, what memory isolation needs (driver and CUDA versions, MIG mode,
// compute mode, MPS support; setting the compute mode), and a health policy
// that turns critical XIDs into unhealthy cards and brings them back when
// they recover. NVML (go-nvml) implements it on
// real hardware; Fake implements it from a --fake-gpus
// "2xTesla-T4:16GiB,1xA100-SXM4:80GiB" spec and a --fake-driver
// "615.00,mps" spec for demos and tests.
package gpu
