// Package gpu describes the host's NVIDIA GPUs through a small interface of
// our own. It gives each card's index, UUID, model and memory in MiB, and
// its XID error events. It reads what memory isolation needs: driver and
// CUDA versions, MIG mode, compute mode and MPS support; it sets the compute
// mode. Its health policy turns critical XIDs into unhealthy cards and
// brings them back when they recover. NVML, over go-nvml, implements it on
// real hardware. Fake implements it for demos and tests, from a --fake-gpus
// spec such as "2xTesla-T4:16GiB,1xA100-SXM4:80GiB" and a --fake-driver
// spec such as "615.00,mps".
package gpu
