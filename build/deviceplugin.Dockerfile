# gpushare-device-plugin: linked against glibc, runs as root on
# distroless/base (glibc, no shell).
# - glibc: go-nvml calls NVML through cgo and dlopen()s libnvidia-ml.so.1,
#   which the NVIDIA container runtime mounts into the container (the
#   DaemonSet and this image ask for it with NVIDIA_VISIBLE_DEVICES and
#   NVIDIA_DRIVER_CAPABILITIES=compute,utility: compute also mounts
#   nvidia-cuda-mps-control for mps mode); the image itself holds no driver.
# - root: the plugin serves its socket in, and dials kubelet.sock from,
#   kubelet's device-plugins directory, which belongs to root and which no
#   one else may write; NVML opens /dev/nvidia*.
# Build from the repository root (make images does):
#   docker build -f build/deviceplugin.Dockerfile --build-arg VERSION=v1.2.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) -t gpushare-device-plugin:v1.2.0 .
# pkg/build/image holds the same recipe for the Go-native builder;
# TestDockerfilesAgree fails when the two differ.

# The builder and the runtime base are one Debian release (bookworm = 12):
# a binary linked against a newer glibc than the base's does not start.
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=gcr.io/distroless/base-debian12:latest

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/gpushare/gpushare/pkg/version.Version=${VERSION}" \
      -o /out/gpushare-device-plugin ./deviceplugin

FROM ${BASE_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpushare-device-plugin" \
      org.opencontainers.image.description="gpushare device plugin: advertises GPU memory to kubelet as aliyun.com/gpu-mem" \
      org.opencontainers.image.source="https://github.com/gpushare/gpushare" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV PATH=/usr/local/bin:/usr/bin:/bin
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
COPY --from=build /out/gpushare-device-plugin /usr/local/bin/gpushare-device-plugin
WORKDIR /
USER 0:0
ENTRYPOINT ["/usr/local/bin/gpushare-device-plugin"]
