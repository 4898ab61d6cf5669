# gpushare-scheduler-extender: static (CGO_ENABLED=0), runs as nonroot
# (65532:65532) on distroless/static, which has no shell and no libc.
# Build from the repository root (make images does):
#   docker build -f build/extender.Dockerfile --build-arg VERSION=v1.2.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) -t gpushare-scheduler-extender:v1.2.0 .
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
      -o /out/gpushare-scheduler-extender ./extender

FROM ${BASE_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpushare-scheduler-extender" \
      org.opencontainers.image.description="gpushare kube-scheduler extender: places pods asking aliyun.com/gpu-mem on single GPU cards" \
      org.opencontainers.image.source="https://github.com/gpushare/gpushare" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV PATH=/usr/local/bin:/usr/bin:/bin
COPY --from=build /out/gpushare-scheduler-extender /usr/local/bin/gpushare-scheduler-extender
WORKDIR /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpushare-scheduler-extender"]
