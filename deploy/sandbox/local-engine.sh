#!/usr/bin/env bash
# A Docker engine and the sandbox image on a development or CI machine, so the Docker backend's
# tests (tests/executor/test_backends.py[docker]) run against a real engine, not only a stand-in.
#
#   deploy/sandbox/local-engine.sh        # idempotent; exits 0 with a note when it cannot
#
# 1. If no engine answers and `dockerd` is installed (Debian: apt-get install docker.io), start one
#    the way these machines allow: cgroup v1, no iptables, no bridge (sandboxes use
#    network_mode=none anyway), data under /tmp/zcbot-dockerd.
# 2. If zcbot-sandbox:latest is missing, build it from services/executor/sandbox.Dockerfile; when
#    no registry is reachable (python:3.11-slim cannot be pulled), import an equivalent image made
#    from this host's Debian python3.11, coreutils/bash and the project venv's pptx/docx/lxml/PIL.
set -uo pipefail
cd "$(dirname "$0")/../.."
IMAGE=${ZCBOT_DOCKER_IMAGE:-zcbot-sandbox:latest}
STATE=/tmp/zcbot-dockerd

if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null; then echo "local-engine: no dockerd installed; Docker tests will skip" >&2; exit 0; fi
  mkdir -p "$STATE"
  nohup dockerd --iptables=false --bridge=none --data-root "$STATE/data" --exec-root "$STATE/exec" \
    --pidfile "$STATE/dockerd.pid" >"$STATE/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  if ! docker info >/dev/null 2>&1; then echo "local-engine: dockerd did not start (see $STATE/dockerd.log)" >&2; exit 0; fi
fi
docker image inspect "$IMAGE" >/dev/null 2>&1 && exit 0
if timeout 600 docker build -q -f services/executor/sandbox.Dockerfile -t "$IMAGE" services/executor >/dev/null 2>&1; then exit 0; fi
echo "local-engine: building from the Dockerfile failed (no registry?); importing a host-derived image" >&2
command -v dpkg >/dev/null && [ -x /usr/bin/python3.11 ] || { echo "local-engine: needs Debian's python3.11" >&2; exit 0; }
R=$(mktemp -d /tmp/zcbot-rootfs.XXXXXX)
trap 'rm -rf "$R"' EXIT
mkdir -p "$R/usr/bin" "$R/usr/lib" "$R/usr/lib64" "$R/usr/sbin"
(cd "$R" && ln -s usr/bin bin && ln -s usr/lib lib && ln -s usr/lib64 lib64 && ln -s usr/sbin sbin)
usr() { case "$1" in /bin/*|/lib/*|/sbin/*|/lib64/*) echo "/usr$1";; *) echo "$1";; esac; }
copy() { for f in "$@"; do f=$(usr "$f"); [ -e "$f" ] || continue
  [ -d "$f" ] && continue; cp -an --parents "$f" "$R" 2>/dev/null; t=$(readlink -f "$f"); cp -an --parents "$t" "$R" 2>/dev/null; done; }
bins=$(dpkg -L coreutils bash dash grep sed findutils procps mawk 2>/dev/null | sort -u)
bins="$bins /usr/bin/fallocate"  # util-linux's, as in python:3.11-slim (the disk quota probes); not all of util-linux (su)
copy $bins /usr/bin/python3 /usr/bin/python3.11
cp -a --parents /usr/lib/python3.11 "$R"
[ -d /usr/lib/locale/C.utf8 ] && cp -a --parents /usr/lib/locale/C.utf8 "$R" 2>/dev/null  # LC_ALL=C.UTF-8 in the sandbox env
rm -rf "$R/usr/lib/python3.11/test" "$R/usr/lib/python3.11/site-packages" "$R/usr/lib/python3.11/dist-packages"
SP=$(ls -d .venv/lib/python3.11/site-packages 2>/dev/null)
mkdir -p "$R/usr/lib/python3/dist-packages"
for m in pptx docx lxml PIL pillow.libs xlsxwriter typing_extensions.py; do
  [ -n "$SP" ] && [ -e "$SP/$m" ] && cp -a "$SP/$m" "$R/usr/lib/python3/dist-packages/"; done
sos=$(find "$R/usr/lib/python3/dist-packages" "$R/usr/lib/python3.11/lib-dynload" -name '*.so*'; for b in $bins /usr/bin/python3.11; do [ -f "$b" ] && echo "$b"; done)
copy $(for f in $sos; do ldd "$f" 2>/dev/null; done | grep -o '/[^ ]*\.so[^ ]*' | sort -u) /lib64/ld-linux-x86-64.so.2
cd "$R" && mkdir -p etc tmp workspace opt/zcbot usr/local/bin proc sys dev
ln -sfn /usr/bin/python3.11 usr/local/bin/python3
[ -e usr/bin/mawk ] && ln -sfn mawk usr/bin/awk
printf 'root:x:0:0:root:/root:/bin/bash\nsandbox:x:10001:10001::/workspace:/bin/bash\n' >etc/passwd
printf 'root:x:0:\nsandbox:x:10001:\n' >etc/group
chown 10001:10001 workspace && chmod 1777 tmp && find . -type d -exec chmod a+rx {} +
tar -c . | docker import -c 'ENV HOME=/workspace LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1' -c 'WORKDIR /workspace' \
  -c 'USER 10001:10001' -c 'CMD ["sleep","infinity"]' - "$IMAGE" >/dev/null \
  && docker run --rm --network none "$IMAGE" python3 -c 'import pptx, docx' \
  || echo "local-engine: the imported image does not work; Docker tests will fail or skip" >&2
exit 0
