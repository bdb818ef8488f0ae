"""What `zcbot up` checks and says before it starts anything: every port it needs is free (else it
exits at once naming the port and the variable to change), which model profile is the default
and whether its API key is set (else the exact variable to export), and whether documents can be
turned into PDFs and previews here (LibreOffice found, else how to install it)."""

from __future__ import annotations

import os

from zcbot_core.platform.config import ConfigError, Settings
from zcbot_devstack.embedded import port_is_free
from zcbot_devstack.services import BY_NAME


class PortInUse(ConfigError):
    code = "port_in_use"


def check_ports(settings: Settings, names: list[str]) -> None:
    """Raise PortInUse naming every busy service port and its variable, one line each (nothing is
    started yet).

    The embedded NATS/PostgreSQL ports need no check: `choose_port` picks a free one itself."""
    host = settings.zcbot_http_host or "127.0.0.1"
    bind_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    busy = []
    seen: dict[int, str] = {}
    for name in names:
        spec = BY_NAME[name]
        port = spec.port(settings)
        if port in seen:
            busy.append(f"  {name} and {seen[port]} both use port {port}: set {spec.port_env} to another port")
            continue
        seen[port] = name
        if not port_is_free(port, bind_host):
            busy.append(f"  port {port} ({name}) is already in use by another program: set {spec.port_env}")
    if busy:
        raise PortInUse("\n".join(["ports in use: stop the other program, or choose other ports "
                                    "(`zcbot up --port N` uses N to N+4; each variable below overrides one)",
                                    *busy]))


def model_word(settings: Settings) -> str:
    """One line on the default model profile: its name and whether its key is set (what to export)."""
    from zcbot_core.llm.profiles import load_profiles

    name = settings.zcbot_default_model
    profile = load_profiles(settings).get(name)
    if profile is None:
        return f"default model profile '{name}' is not defined (ZCBOT_DEFAULT_MODEL); chats will fail"
    if not profile.api_key_env or profile.api_key_optional:
        return f"default model profile: {name} ({profile.model}; no API key needed)"
    if os.environ.get(profile.api_key_env):  # raw: the profile names the variable (see LLMProfile.api_key)
        return f"default model profile: {name} ({profile.model}; {profile.api_key_env} is set)"
    return (f"default model profile: {name} ({profile.model}); its API key is NOT set: "
            f"export {profile.api_key_env}=... before `zcbot up` (or set ZCBOT_DEFAULT_MODEL to another profile)")


OFFICE_INSTALL = ("sudo apt-get install libreoffice-writer-nogui libreoffice-impress-nogui poppler-utils "
                  "fonts-noto-cjk (macOS: brew install --cask libreoffice), or set ZCBOT_SOFFICE to soffice's path")


def office_word() -> str:
    """One line: PDF/preview of .docx/.pptx works here (LibreOffice found) or how to enable it."""
    from zcbot_core.rendering import find_soffice

    soffice = find_soffice()
    if soffice:
        return f"PDF and previews: available (LibreOffice: {soffice})"
    return ("PDF and previews: NOT available (LibreOffice `soffice` not found; .docx/.pptx are still made); "
            f"to enable: {OFFICE_INSTALL}")
