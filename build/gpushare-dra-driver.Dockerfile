# gpushare-dra-driver: linked against glibc, runs as root on distroless/base
# (glibc, no shell), like the device plugin, for the same reasons:
# - glibc: go-nvml calls NVML through cgo and dlopen()s libnvidia-ml.so.1,
#   which the NVIDIA container runtime mounts into the container (the
#   DaemonSet and this image ask for it with NVIDIA_VISIBLE_DEVICES and
#   NVIDIA_DRIVER_CAPABILITIES); the image itself holds no driver.
# - root: the driver serves its sockets in kubelet's plugin directories and
#   writes CDI specs, both root's; NVML opens /dev/nvidia*.
# The driver is its own Go module (dra/, Kubernetes v0.37 libraries) that
# builds against the repository's root module: the context is the whole
# repository and go build runs in dra/.
# Build from the repository root (make images does):
#   docker build -f build/gpushare-dra-driver.Dockerfile --build-arg VERSION=v1.2.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) -t gpushare-dra-driver:v1.2.0 .
# pkg/build/image holds the same recipe for the Go-native builder;
# TestDockerfilesAgree fails when the two differ.

# The builder and the runtime base are one Debian release (bookworm = 12):
# a binary linked against a newer glibc than the base's does not start.
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=gcr.io/distroless/base-debian12:latest

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY dra/go.mod dra/go.sum dra/
WORKDIR /src/dra
RUN go mod download
COPY . /src
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/gpushare/gpushare/pkg/version.Version=${VERSION}" \
      -o /out/gpushare-dra-driver ./cmd/gpushare-dra-driver

FROM ${BASE_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpushare-dra-driver" \
      org.opencontainers.image.description="gpushare DRA driver: publishes GPUs with consumable memory capacity and prepares the claims allocated on them" \
      org.opencontainers.image.source="https://github.com/gpushare/gpushare" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV PATH=/usr/local/bin:/usr/bin:/bin
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
COPY --from=build /out/gpushare-dra-driver /usr/local/bin/gpushare-dra-driver
WORKDIR /
USER 0:0
ENTRYPOINT ["/usr/local/bin/gpushare-dra-driver"]
