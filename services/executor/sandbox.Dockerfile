# The sandbox image for ZCBOT_SANDBOX=docker (ZCBOT_DOCKER_IMAGE, default zcbot-sandbox:latest).
# Build: docker build -f services/executor/sandbox.Dockerfile -t zcbot-sandbox:latest services/executor
# The tool runner is not baked in: the executor mounts its staged copy read-only at /opt/zcbot.
FROM python:3.11-slim
RUN pip install --no-cache-dir python-pptx python-docx \
 && groupadd -g 10001 sandbox && useradd -u 10001 -g 10001 -d /workspace -M -s /bin/bash sandbox \
 && mkdir -p /workspace /opt/zcbot && chown 10001:10001 /workspace
ENV HOME=/workspace LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1
WORKDIR /workspace
USER 10001:10001
CMD ["sleep", "infinity"]
