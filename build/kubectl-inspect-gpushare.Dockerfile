# kubectl-inspect-gpushare: static (CGO_ENABLED=0), runs as nonroot
# (65532:65532) on distroless/static, which has no shell and no libc.
# Build from the repository root (make images does):
#   docker build -f build/kubectl-inspect-gpushare.Dockerfile --build-arg VERSION=v1.2.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) -t kubectl-inspect-gpushare:v1.2.0 .
# kubectl runs plugins from PATH, so most users copy the binary out of the
# image; to run it in place, mount a kubeconfig at nonroot's home:
#   docker run --rm -v $HOME/.kube/config:/home/nonroot/.kube/config:ro kubectl-inspect-gpushare:v1.2.0
# pkg/build/image holds the same recipe for the Go-native builder;
# TestDockerfilesAgree fails when the two differ.

# The builder and the runtime base are one Debian release (bookworm = 12).
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/gpushare/gpushare/pkg/version.Version=${VERSION}" \
      -o /out/kubectl-inspect-gpushare ./kubectl-inspect-gpushare

FROM ${BASE_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="kubectl-inspect-gpushare" \
      org.opencontainers.image.description="kubectl inspect gpushare: the GPU memory allocated on every card of every GPU-sharing node" \
      org.opencontainers.image.source="https://github.com/gpushare/gpushare" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV PATH=/usr/local/bin:/usr/bin:/bin
COPY --from=build /out/kubectl-inspect-gpushare /usr/local/bin/kubectl-inspect-gpushare
WORKDIR /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kubectl-inspect-gpushare"]
