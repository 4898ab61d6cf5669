#!/bin/bash
# Runs TestRealGPU (test/kubelet/realgpu_test.go) and TestRealGPUPrepare
# (dra/pkg/prepare/realgpu_test.go) from the bundle that
# `make gpu-check-bundle` writes: the device plugin on this machine's
# NVIDIA card under kubelet's device manager, each isolation mode checked
# with CUDA processes (mps also in containers run by runc), and the DRA driver's claims in mps mode. For a GPU machine without Go; with Go, run
# `make gpu-check`. Needs root, the NVIDIA driver (nvidia-smi) and a python3
# with PyTorch built for CUDA. Usage: bash gpu-check.sh [go test flags].
set -u
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version,compute_mode --format=csv
mps=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control 2>/dev/null | head -1)
if ! ldconfig -p | grep -q 'libnvidia-ml.so.1 '; then
	export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
for f in kubelet.test dra-prepare.test gpushare-device-plugin; do
	if command -v xz >/dev/null; then
		xz -dc "$here/$f.xz" >"$bin/$f"
	else
		python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$here/$f.xz" >"$bin/$f"
	fi
	chmod +x "$bin/$f"
done
# TestRealGPU's containers: the machine's runc, else the bundle's (with its
# libseccomp).
if ! command -v runc >/dev/null && [ -x "$here/runc/runc" ]; then
	printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$here/runc" "$here/runc/runc" >"$bin/runc"
	chmod +x "$bin/runc"
	export GPUSHARE_REAL_GPU_RUNC="$bin/runc"
fi
export GPUSHARE_REAL_GPU=1 GPUSHARE_REAL_GPU_MPS_CONTROL="${mps:-nvidia-cuda-mps-control}" GPUSHARE_REAL_GPU_PLUGIN="$bin/gpushare-device-plugin"
rc=0
"$bin/kubelet.test" -test.run '^TestRealGPU$' -test.v -test.timeout 8m "$@" || rc=1
"$bin/dra-prepare.test" -test.run '^TestRealGPUPrepare$' -test.v -test.timeout 4m "$@" || rc=1
exit $rc
