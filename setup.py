"""The extras: the lists in pyproject.toml (`[tool.zcbot.optional-dependencies]`), with the fake model
server added to `test` as a direct reference to libs/zcbot_fakellm, which must be absolute (a PEP 508
URL cannot name a folder relative to this project). Everything else is in pyproject.toml."""

import tomllib
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
extras = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["zcbot"]["optional-dependencies"]
extras["test"] = [*extras["test"], f"zcbot-fakellm @ {(HERE / 'libs' / 'zcbot_fakellm').as_uri()}"]

setup(extras_require=extras)
