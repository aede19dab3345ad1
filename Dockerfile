# convoy: a small image with a static convoy binary, helm, kustomize and git.
#   docker build -t convoy:dev .
# The versions of helm and kustomize follow scripts/testenv.versions.

FROM golang:1.26-bookworm AS tools
ARG HELM_VERSION=v4.3.1
ARG KUSTOMIZE_VERSION=v5.8.1
ENV CGO_ENABLED=0 GOBIN=/out
RUN go install -trimpath -ldflags "-s -w" helm.sh/helm/v4/cmd/helm@${HELM_VERSION} \
 && go install -trimpath -ldflags "-s -w" sigs.k8s.io/kustomize/kustomize/v5@${KUSTOMIZE_VERSION}

FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin convoy \
 && cp target/x86_64-unknown-linux-musl/release/convoy /convoy

FROM alpine:3.22
# git for Git sources (convoy drives the git program), CA certificates for HTTPS sources.
RUN apk add --no-cache git ca-certificates openssh-client \
 && adduser -D -u 65532 convoy
COPY --from=tools /out/helm /out/kustomize /usr/local/bin/
COPY --from=build /convoy /usr/local/bin/convoy
USER 65532
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/convoy"]
CMD ["daemon", "-v"]
