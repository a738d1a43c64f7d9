# syntax=docker/dockerfile:1
# One Dockerfile, two images (no container engine runs in this repository's
# CI, so it is kept simple):
#   make docker-build            the messenger workload  (TARGET=./workload/cmd/tetra)
#   make docker-build-operator   the operator manager    (TARGET=.)
# Static (CGO_ENABLED=0: the SQLite driver is pure Go), non-root, read-only
# friendly: the workload writes only to its data directory, an emptyDir the
# operator mounts at /var/lib/tetra.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first, so source edits reuse the module cache layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGET=./workload/cmd/tetra
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/app ${TARGET}

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/app /app
# 65532 is distroless' "nonroot"; the operator's pod template runs as it.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/app"]
