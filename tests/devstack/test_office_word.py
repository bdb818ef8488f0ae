"""`zcbot up`'s line on PDF/preview availability (issue 24): LibreOffice found or how to enable it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from zcbot_devstack.preflight import office_word


def test_missing_libreoffice_says_how_to_enable_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no soffice on this PATH
    monkeypatch.delenv("ZCBOT_SOFFICE", raising=False)
    word = office_word()
    assert word.startswith("PDF and previews: NOT available")
    assert "apt-get install libreoffice-writer-nogui" in word and "fonts-noto-cjk" in word and "ZCBOT_SOFFICE" in word


def test_found_libreoffice_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "soffice"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("ZCBOT_SOFFICE", str(fake))
    assert office_word() == f"PDF and previews: available (LibreOffice: {fake})"
    assert os.access(fake, os.X_OK)
