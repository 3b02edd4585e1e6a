# syntax=docker/dockerfile:1
# fightwatch container image: `fightwatch run` as a non-root user on a slim Python runtime.
# Build: docker build -t fightwatch:0.1.0 .   Without a Docker engine: `make image` (scripts/image.sh) builds it with
# buildah on base images made from Debian's packages, passed in as the build arguments below (docs/image.md).

ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm
# The official Rust image whose toolchain builds the native engine: at native/Cargo.toml's rust-version or later.
ARG RUST_IMAGE=rust:1.95.0-slim-bookworm

# --- rust: the Rust toolchain (rustup's, in /usr/local/cargo and /usr/local/rustup) for the build stage -------
FROM ${RUST_IMAGE} AS rust

# --- build: the project wheel plus the wheels of all its dependencies ----------------------------------------
FROM ${PYTHON_IMAGE} AS build
# mypyc compiles the per-event modules to C and cargo builds the native engine from the crates native/Cargo.lock
# pins, fetched from crates.io (setup.py): this stage needs a C compiler and Rust; the runtime does not. The official
# Python image has Python's headers and pip already; a base of Debian's python3 needs python3-dev here as well.
ARG BUILD_PACKAGES="gcc libc6-dev"
# hadolint ignore=DL3008,SC2086
RUN apt-get update \
    && apt-get install -y --no-install-recommends ${BUILD_PACKAGES} \
    && rm -rf /var/lib/apt/lists/*
COPY --from=rust /usr/local/cargo /usr/local/cargo
COPY --from=rust /usr/local/rustup /usr/local/rustup
# The native engine is required in the image: a crate that does not download (scripts/native.sh names it), or a
# native build that fails (setup.py), stops the build instead of leaving it out.
ENV CARGO_HOME=/usr/local/cargo \
    RUSTUP_HOME=/usr/local/rustup \
    PATH=/usr/local/cargo/bin:$PATH \
    FIGHTWATCH_REQUIRE_NATIVE=1
WORKDIR /src
COPY native/Cargo.toml native/Cargo.lock native/
COPY native/src/ native/src/
COPY scripts/native.sh scripts/
RUN scripts/native.sh
COPY pyproject.toml setup.py README.md ./
COPY watcher/ watcher/
COPY scripts/image-install.sh scripts/
# The virtual environment is made here, from the base the runtime shares, and copied whole: the runtime gets one
# layer with the environment and nothing else (no wheels, no pip).
RUN scripts/image-install.sh build /wheels \
    && scripts/image-install.sh install /wheels /opt/fightwatch

# --- runtime: no compilers, no pip, no wheels, no source tree ----------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="fightwatch" \
      org.opencontainers.image.description="Finds Kubernetes controllers fighting over objects, and hot reconcile loops" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/fightwatch/fightwatch"
COPY --from=build /opt/fightwatch /opt/fightwatch
# Optimised bytecode (-OO: no docstrings, no asserts; 2 MiB less resident), of the environment (image-install.sh) and,
# compiled here, of the standard library: with PYTHONDONTWRITEBYTECODE set nothing is compiled at run time, and a module
# without its .opt-2.pyc would be compiled from source at every start. (-x: test data a base image may hold is not
# valid Python.)
ENV PATH=/opt/fightwatch/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONOPTIMIZE=2 \
    PYTHONUNBUFFERED=1
RUN python -OO -m compileall -q -j0 -x '/(test|tests|idle_test)/' \
    "$(python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')"
# A numeric user, so Kubernetes can verify runAsNonRoot without looking the name up.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["fightwatch", "run"]
