"""The host-side web tools' machinery (issue 25): search providers (`search.py`), the SSRF-safe
fetcher (`fetch.py`, `ssrf.py`), page and PDF extraction (`extract.py`) and their settings
(`settings.py`). The tools the model calls are registered by `zcbot_core.tools.web_tools`.
Everything here runs in the runner, never in a sandbox: the provider keys stay on the host."""
