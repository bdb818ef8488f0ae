"""Issue 36: office previews are converted in a sandbox. Before, LibreOffice ran as host uid 0 with
every capability and the host's /etc in its namespace: the same command converted /etc/shadow, so
any LibreOffice file-inclusion bug was a root read.

- The converter's sandbox, probed with the exact command prefix and privilege drop `convert` uses:
  an unprivileged uid, no capability (effective, permitted, bounding), no nested user namespace, no
  network, an /etc of fonts, the linker's cache, LibreOffice's registry and a passwd stub only (no
  shadow, no host secret), nothing of the storage.
- Through the real gateway: a document linking /etc/shadow and a host secret file (linked sections,
  with the document asking for its links to be updated, a linked image, an OLE-style link) previews
  as a PDF holding its own text and nothing of those files (pdftotext); every converter process seen
  while it ran (a watcher over the test's own descendants) had a non-zero uid and no capability.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import threading
import time
import zipfile
from pathlib import Path

import psutil
import pytest

from tests.helpers.stack import Stack
from zcbot_gateway import previews

needs_soffice = pytest.mark.skipif(previews.find_soffice() is None or shutil.which("pdftotext") is None,
                                   reason="LibreOffice (soffice) and pdftotext are needed")
SECRET = f"host-secret-{os.getpid()}-{time.time_ns()}"
PROBE = r"""
import os
print("uid", os.getuid(), os.geteuid())
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
print("caps", *(status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd")))
print("etc", ",".join(sorted(os.listdir("/etc"))))
for path in ("/etc/shadow", SECRET_PATH):
    try:
        print("read", path, open(path).read()[:20])
    except OSError as exc:
        print("noread", path, exc.errno)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("userns", "yes" if libc.unshare(0x10000000) == 0 else "no")  # CLONE_NEWUSER
print("net", ",".join(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])))
"""


def test_the_converter_runs_unprivileged_with_a_minimal_etc(os_tmp_dir: Path) -> None:
    secret = os_tmp_dir / "secret.txt"
    secret.write_text(SECRET)
    os_tmp_dir.chmod(0o711)  # the converter's uid passes through, as through /tmp to a real conversion
    conv = os_tmp_dir / "conv"
    conv.mkdir()
    uid = previews.converter_uid()
    work, etc = previews._prepare(conv, b"x", "document.odt", uid)
    out = subprocess.run([*previews.sandbox_prefix(work, etc), "/usr/bin/python3", "-c",
                          PROBE.replace("SECRET_PATH", repr(str(secret)))],
                         capture_output=True, text=True, timeout=60, preexec_fn=previews._as_user(uid))
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    uids = [int(x) for x in lines["uid"].split()]
    assert 0 not in uids and (os.geteuid() != 0 or uids == [previews.PREVIEW_UID] * 2), lines["uid"]
    assert lines["caps"].split() == ["0000000000000000"] * 3, lines["caps"]
    allowed = {*previews.ETC_KEEP, "passwd", "group"}
    assert set(lines["etc"].split(",")) <= allowed and "shadow" not in lines["etc"], lines["etc"]
    assert "read" not in lines and SECRET not in out.stdout, out.stdout
    assert lines["userns"] == "no" and lines["net"] == "lo", out.stdout


def _odt(body: str, settings_xml: str) -> bytes:
    ns = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
          'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
          'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
          'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0" '
          'xmlns:xlink="http://www.w3.org/1999/xlink" '
          'xmlns:config="urn:oasis:names:tc:opendocument:xmlns:config:1.0"')
    content = f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ns} office:version="1.2">' \
              f'<office:body><office:text>{body}</office:text></office:body></office:document-content>'
    settings = f'<?xml version="1.0" encoding="UTF-8"?><office:document-settings {ns} office:version="1.2">' \
               f'<office:settings>{settings_xml}</office:settings></office:document-settings>'
    manifest = ('<?xml version="1.0" encoding="UTF-8"?><manifest:manifest '
                'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.2">'
                '<manifest:file-entry manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.text"/>'
                '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
                '<manifest:file-entry manifest:full-path="settings.xml" manifest:media-type="text/xml"/>'
                '</manifest:manifest>')
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.text")
        z.writestr("content.xml", content, zipfile.ZIP_DEFLATED)
        z.writestr("settings.xml", settings, zipfile.ZIP_DEFLATED)
        z.writestr("META-INF/manifest.xml", manifest, zipfile.ZIP_DEFLATED)
    return out.getvalue()


def _linking(targets: list[str], marker: str) -> bytes:
    body = f"<text:p>{marker} before</text:p>"
    for i, target in enumerate(targets):
        body += (f'<text:section text:name="S{i}"><text:section-source xlink:href="{target}" xlink:type="simple" '
                 f'text:filter-name="Text"/></text:section>'
                 f'<text:p><draw:frame draw:name="F{i}" svg:width="2cm" svg:height="2cm"><draw:image '
                 f'xlink:href="{target}" xlink:type="simple" xlink:show="embed" xlink:actuate="onLoad"/>'
                 f'</draw:frame></text:p>'
                 f'<text:p><draw:frame draw:name="O{i}" svg:width="2cm" svg:height="2cm"><draw:object '
                 f'xlink:href="{target}" xlink:type="simple" xlink:show="embed" xlink:actuate="onLoad"/>'
                 f'</draw:frame></text:p>')
    body += f"<text:p>{marker} after</text:p>"
    update = ('<config:config-item-set config:name="ooo:configuration-settings">'
              '<config:config-item config:name="LinkUpdateMode" config:type="short">2</config:config-item>'
              '</config:config-item-set>')
    return _odt(body, update)


class _ConverterWatch:
    """Every converter process among this test's descendants while it runs: (pid, uids, CapEff)."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[tuple[int, ...], str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "_ConverterWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            try:
                children = me.children(recursive=True)
            except psutil.Error:
                children = []
            for proc in children:
                try:
                    if "soffice" not in " ".join(proc.cmdline()):
                        continue
                    status = Path(f"/proc/{proc.pid}/status").read_text()
                    cap = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff"))
                    self.seen[proc.pid] = (tuple(proc.uids()), cap)
                except (psutil.Error, OSError, StopIteration):
                    continue
            time.sleep(0.02)


@needs_soffice
async def test_a_document_linking_host_secrets_previews_without_them(stack: Stack, os_tmp_dir: Path) -> None:
    secret_file = os_tmp_dir / "platform.key"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o644)  # readable by any host uid: only the sandbox's /etc and mounts keep it out
    os_tmp_dir.chmod(0o755)
    token = await stack.login("linker")
    marker = f"Visible{time.time_ns()}"  # new content: not in the preview cache yet
    document = _linking(["file:///etc/shadow", secret_file.as_uri(), "/etc/shadow"], marker)
    async with stack.client(token) as c:
        up = await c.post("/v1/files/upload", params={"path": "docs"}, files={"file": ("linked.odt", document)})
        assert up.status_code in (200, 201), up.text
        with _ConverterWatch() as watch:
            r = await c.get("/v1/files/preview", params={"path": "docs/linked.odt"}, timeout=120)
    assert r.status_code == 200 and r.content.startswith(b"%PDF-"), r.text[:300]
    text = subprocess.run(["pdftotext", "-", "-"], input=r.content, capture_output=True, timeout=30).stdout.decode()
    assert f"{marker} before" in text and f"{marker} after" in text, text
    assert SECRET not in text and "root:" not in text and "$6$" not in text and "$y$" not in text, text
    assert watch.seen, "no converter process was seen running"
    for pid, (uids, cap) in watch.seen.items():
        assert 0 not in uids, (pid, uids)
        assert int(cap, 16) == 0, (pid, cap)
