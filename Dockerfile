# The Transformer service: one image for the HTTP API (the default) and the queue workers. It holds the serving
# set of packages only; training needs the `train` extra (pip install 'transformer-service[train]').
#
#   CPU:   docker build -t transformer-service:cpu .
#   CUDA:  docker build -t transformer-service:cuda --build-arg TORCH_INDEX_URL=https://pypi.org/simple .
#          (PyPI's Linux torch is the CUDA build; https://download.pytorch.org/whl/cuXYZ picks a CUDA version)
#   Behind a proxy or a private index: --build-arg PIP_INDEX_URL=https://INDEX/simple (and TORCH_INDEX_URL), and
#          a CA bundle for it with --secret id=pip-ca,src=/path/to/ca.pem (kept out of every layer).
#
# No `# syntax=` line: the frontend built into Docker 20.10 and newer reads this file, where a `syntax=` line would
# make BuildKit fetch a frontend image from Docker Hub first.
#
#   docker run -p 8000:8000 -v models:/models transformer-service:cpu           # the API, embedded queue
#   docker run -e REDIS_URL=redis://HOST:6379/0 -v models:/models IMAGE worker   # a worker
#   docker run --rm -it -v models:/models IMAGE transformer import marian ...    # any other command
#
# Configuration comes from the environment only (TRANSFORMER_*, REDIS_URL); models live in the /models volume.

# The base image names its Debian release (bookworm, Debian 12) so that the runtime's tcmalloc below, whose
# package is pinned as hadolint's DL3008 asks, keeps its name and version: Debian 13 renames it
# (libtcmalloc-minimal4t64), and the plain `3.11-slim` tag moves between releases.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- builder: a virtual environment holding torch and the project -------------------------------------
FROM ${PYTHON_IMAGE} AS builder

# Where torch comes from: PyTorch's CPU wheels by default, a CUDA build with another index. Where the rest comes
# from: PyPI, unless PIP_INDEX_URL names another index.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_INDEX_URL=https://pypi.org/simple

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src

# The README's install command, `pip install torch==2.13.0 && pip install -e ".[train]"` without the train extra,
# in two layers so that a change of the code does not fetch torch again; tests/docker/test_dockerfile.py checks
# that the two agree.
# torch comes from TORCH_INDEX_URL; the project is installed, not linked (-e), since /src is not kept.
# pip's cache lives in a BuildKit cache mount: it speeds up rebuilds and never enters a layer. The optional
# pip-ca secret is a CA bundle for a proxy or index (PIP_CERT), mounted for the install only.
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && pip install --index-url "${TORCH_INDEX_URL}" torch==2.13.0

COPY pyproject.toml README.md ./
COPY model ./model
COPY training ./training
COPY service ./service
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && pip install --index-url "${PIP_INDEX_URL}" .

# -- runtime: the virtual environment, a non-root user, the entry point ---------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="transformer-service" \
      org.opencontainers.image.description="Transformer translation and summarization: HTTP API and queue workers" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TRANSFORMER_HOST=0.0.0.0 \
    TRANSFORMER_PORT=8000 \
    TRANSFORMER_MODELS_DIR=/models

# tcmalloc for the decoding processes: TRANSFORMER_ALLOCATOR=auto (service/allocator.py) preloads it where the
# machine has it, and on the CPU it served 1.13-1.39x glibc's malloc's sentences/s (README, "Serving"). Pinned to
# the base image's Debian release: another PYTHON_IMAGE needs this line changed to its release's package (Debian
# 13: libtcmalloc-minimal4t64 and its version), or removed, which leaves glibc's malloc.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libtcmalloc-minimal4=2.10-1 \
    && rm -rf /var/lib/apt/lists/*

# The service's user, uid/gid 10001 (numeric below, so that a host or orchestrator can tell it is not root).
# /models belongs to it, so that a new named volume mounted there does too.
RUN groupadd --gid 10001 app \
    && useradd --create-home --no-log-init --uid 10001 --gid app app \
    && mkdir /models \
    && chown app:app /models

COPY --from=builder /opt/venv /opt/venv
COPY --chmod=0755 docker/entrypoint.sh docker/healthcheck.py /opt/transformer/

USER 10001:10001
WORKDIR /home/app
VOLUME ["/models"]
EXPOSE 8000

# api: GET /healthz answers 200; worker: its Redis answers PING (docker/healthcheck.py; no curl needed).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["python", "/opt/transformer/healthcheck.py"]

ENTRYPOINT ["/opt/transformer/entrypoint.sh"]
CMD ["api"]
