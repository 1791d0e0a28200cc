# syntax=docker/dockerfile:1
# The paradiag team server: gunicorn serving the dashboard with sign-in and private uploads.
# Build: docker build -t paradiag .   Run: docker compose up (compose.yaml), or
#   docker run -p 8050:8050 -v paradiag-data:/data -v ./users:/etc/paradiag/users:ro \
#              -e PARADIAG_USERS=/etc/paradiag/users paradiag
# Every setting is a PARADIAG_* variable (README, "Configuration"); docs/dashboard.md, "Hosted instance".

ARG PYTHON_VERSION=3.12

# Build stage: compilers and build tools stay here; only the finished virtual environment moves on.
FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/paradiag \
 && /opt/paradiag/bin/pip install "pip>=24" "setuptools>=77,<90" "wheel>=0.44"
WORKDIR /src
COPY . .
# A regular (not editable) install with the web extra (the dashboard and gunicorn: the core install is the CLI and
# the snapshot only): the app, its assets and the bundled sample jobs (package data) land in the venv, so the
# runtime stage needs no source tree.
RUN /opt/paradiag/bin/pip install ".[web]" \
 && /opt/paradiag/bin/python -c "import paradiag.app.config as c; assert any(c.SAMPLES_DIR.iterdir()), 'no sample jobs'"
# plotly.js's cartesian partial bundle from the npm registry, checked against its integrity, into the venv
# (app/plotly_bundle.py: the dashboard's first page draws sooner); without the registry the full one serves.
RUN /opt/paradiag/bin/python -m paradiag.app.plotly_bundle

# Runtime stage: slim base, no build tools, a non-root user that owns only the data volume.
FROM python:${PYTHON_VERSION}-slim
RUN groupadd --system --gid 10001 paradiag \
 && useradd --system --uid 10001 --gid paradiag --home-dir /data --shell /usr/sbin/nologin paradiag \
 && mkdir -p /data && chown paradiag:paradiag /data && chmod 0700 /data
COPY --from=build /opt/paradiag /opt/paradiag
ENV PATH=/opt/paradiag/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PORT=8050 \
    WEB_CONCURRENCY=4 \
    PARADIAG_CACHE_DIR=/data/cache \
    PARADIAG_UPLOAD_DIR=/data/uploads \
    PARADIAG_APP_CACHE_DIR=/data/app-cache \
    PARADIAG_MAX_UPLOAD_MB=4096 \
    PARADIAG_UPLOAD_MAX_UNPACKED_MB=8192 \
    PARADIAG_UPLOAD_MAX_RATIO=200 \
    PARADIAG_UPLOAD_PARSE_MEMORY_MB=4096 \
    PARADIAG_UPLOAD_PARSE_SECONDS=600 \
    PARADIAG_UPLOAD_PARSE_SLOTS=2 \
    PARADIAG_LOG_LEVEL=INFO
# Parquet caches, uploads, aggregates, the signing key and the sign-in state: everything the server writes.
VOLUME ["/data"]
USER paradiag
WORKDIR /data
EXPOSE 8050
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8050'), timeout=4)"
# gunicorn binds 0.0.0.0:$PORT and starts $WEB_CONCURRENCY workers (its own defaults read both); threads
# keep a worker answering while one of its requests computes; workers recycle now and then so no slow leak
# grows; no control socket (nothing may steer the server from inside the container); the access log (with each
# request's duration in ms) and the paradiag loggers go to stdout/stderr.
CMD ["gunicorn", "--worker-class", "gthread", "--threads", "4", "--timeout", "120", "--graceful-timeout", "30", \
     "--max-requests", "2000", "--max-requests-jitter", "200", "--worker-tmp-dir", "/dev/shm", "--no-control-socket", \
     "--access-logfile", "-", "--access-logformat", "%(h)s \"%(r)s\" %(s)s %(b)s %(M)sms", \
     "paradiag.app.wsgi:server"]
