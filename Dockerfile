# syntax=docker/dockerfile:1
#
# zcbot: one image for every service; the command picks the service.
#
#   docker build -t zcbot:latest .
#   docker run --env-file .env zcbot:latest gateway      # or runner|executor|scheduler|channels
#   docker run --env-file .env zcbot:latest db upgrade   # migrations (one-shot)
#
# Layout: the project is installed in editable mode from /app. zcbot finds `config/` (model
# profiles) and `skills/` relative to its source tree (zcbot_core.platform.config.REPO_ROOT), so the image
# keeps the repository layout at /app instead of copying the packages into site-packages.
# Runs as uid/gid 10001, the uid the bwrap sandboxes and the sandbox image (deploy/sandbox) use,
# so every file in the shared user-root volume has one owner.
#
# The executor (bwrap backend) uses this image's own filesystem as the sandbox root, which is why
# the runtime stage carries a few everyday CLI tools for the agent's `shell` tool.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: a virtualenv with the dependencies and the project ------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv

WORKDIR /app

# Dependencies first, from pyproject.toml alone, so this layer is reused until they change.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

# The project itself (.dockerignore lets through only what the services need).
COPY . .
RUN pip install --no-deps -e . \
    && python -m compileall -q /app/libs /app/services \
    && zcbot --help > /dev/null

# ---- runtime ----------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="zcbot" \
      org.opencontainers.image.description="zcbot services: gateway, runner, executor, scheduler, channels"

# CLI tools the agent's shell tool expects inside a bwrap sandbox (which sees this filesystem), and
# tini: PID 1 of the executor container, reaping orphaned sandbox processes (deploy/k8s executor).
# LibreOffice (writer + impress, headless) and poppler-utils make PDFs and previews of the .docx /
# .pptx deliverables (rendering/pdf.py, the brief's page measurement, the deck checker's renders);
# fonts-noto-cjk gives those renders and matplotlib charts Chinese glyphs instead of boxes.
# btrfs-progs: the executor's kernel disk quota (a subvolume with a qgroup limit per user root,
# zcbot_core/quota/kernel.py; deploy/k8s/components/btrfs-quota).
# Versions follow the base image's Debian release; pin the base image by digest to freeze them.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        btrfs-progs file git jq less procps restic ripgrep tini unzip xz-utils zip \
        libreoffice-writer-nogui libreoffice-impress-nogui poppler-utils fontconfig fonts-noto-cjk \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 zcbot \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/zcbot --create-home \
        --shell /usr/sbin/nologin zcbot \
    && mkdir -p /data/users \
    && chown -R 10001:10001 /data

COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /app /app

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    ZCBOT_HOME=/data \
    ZCBOT_STORAGE_ROOT=/data/users \
    ZCBOT_HTTP_HOST=0.0.0.0

WORKDIR /app
USER 10001:10001

# gateway, runner, executor, scheduler, channels (each serves /healthz, /readyz, /metrics)
EXPOSE 8765 8766 8767 8768 8769

ENTRYPOINT ["zcbot"]
CMD ["gateway"]
