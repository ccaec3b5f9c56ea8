# trisk API and worker image. The corpus index is built at image build time from a bilara checkout mounted or
# copied to /data/bilara (the shared data is not part of the repository).
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
RUN apt-get update && apt-get install -y --no-install-recommends gcc libgomp1 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY service ./service
COPY workers ./workers
COPY models ./models
COPY openapi ./openapi
RUN pip install .
RUN useradd --create-home trisk && mkdir -p /app/var && chown trisk /app/var
USER trisk
ENV TRISK_INDEX_PATH=/app/var/index/pli-sutta.trisk \
    TRISK_MODELS_DIR=/app/models \
    TRISK_DB_PATH=/app/var/trisk.db \
    OMP_WAIT_POLICY=PASSIVE \
    TRISK_CORPUS_DIR=/data/bilara \
    REDIS_URL=redis://redis:6379/0
EXPOSE 8000
# API: the index must exist at TRISK_INDEX_PATH (build it once with `trisk build-index`, e.g. in an init container)
CMD ["trisk", "serve", "--host", "0.0.0.0", "--port", "8000"]
