# The controller's image, run by deploy/deployment.yaml:
#
#   docker build -t predictive-autoscaler:0.1.0 .        (or: podman build / buildah bud, same arguments)
#
# Two stages from one base: the builder creates a virtual environment and installs the package into it
# from the lock, exactly as scripts/install.sh does (no dev extra); the final stage holds that venv and
# nothing else of the build: no compiler, no pip, no pip cache, no tests, benchmarks or docs.
# tests/test_image.py checks this file (hadolint, the lock, the USER against the Deployment, the build
# context) and runs the entrypoint the way the container does.

# The base, pinned to a Python patch release and a Debian release. Python 3.11 is the minor the lock
# (constraints.txt) is resolved with; bookworm is the Debian the lock's wheels are tested on. Pin the
# digest too when you build for production: it cannot be looked up where this file was written, so add
# it with `--build-arg PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:<digest>` (the digest from
# `docker buildx imagetools inspect python:3.11.13-slim-bookworm`) or write it in here.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
# Only what the package needs to build: its metadata, its readme (pyproject's `readme`), the lock and
# the two packages (.dockerignore keeps everything else out of the build context).
COPY pyproject.toml README.md constraints.txt ./
COPY autoscaler/ autoscaler/
COPY models/ models/
# The lock through PIP_CONSTRAINT, as scripts/install.sh does, so that the package's isolated build gets
# the locked setuptools too. Every dependency has a binary wheel for CPython 3.11 on linux (x86_64 and
# aarch64), so nothing is compiled. pip and setuptools are removed from the venv afterwards (nothing
# imports them at run time), and so are the third-party packages' own test suites (~130 MB, never imported).
RUN python -m venv /opt/venv \
    && PIP_CONSTRAINT=/src/constraints.txt /opt/venv/bin/python -m pip install --no-cache-dir --disable-pip-version-check . \
    && /opt/venv/bin/python -m pip uninstall --yes --disable-pip-version-check pip setuptools \
    && find /opt/venv/lib/python3.11/site-packages -depth -type d -name tests -exec rm -rf {} +

FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="predictive-autoscaler" \
      org.opencontainers.image.description="Kubernetes controller that pre-scales GPU inference ahead of forecast demand under a cost ceiling" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
# The venv alone: same path as in the builder (its scripts' #! lines and its python symlink point into
# /opt/venv and /usr/local/bin/python3.11, which this same base provides). Owned by root, read-only to
# the controller's user.
COPY --from=builder /opt/venv /opt/venv
# The root file system is read-only in the cluster (readOnlyRootFilesystem), with an emptyDir at /tmp:
# whatever writes, writes under /tmp. HOME for a uid without a passwd entry; MPLCONFIGDIR for
# matplotlib's font cache (prophet imports matplotlib); cmdstan's (Prophet's) files go to tempfile's
# default, /tmp. No bytecode is written at run time: pip compiled it at install time.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so Kubernetes can verify runAsNonRoot; the same uid/gid as the Deployment's securityContext.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/opt/venv/bin/predictive-autoscaler"]
CMD ["--help"]
