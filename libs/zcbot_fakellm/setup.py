"""zcbot-fakellm installs one `.pth` line naming this folder, so `import zcbot_fakellm` always finds
the source here, edited in place like the editable `zcbot` install it is tested with.

zcbot's `test` extra installs this project (pip cannot make a dependency editable); building it
elsewhere than in place (from an sdist) would point the line at a temporary folder, so it is
installed only from this folder (the root setup.py gives pip its absolute path).
"""

from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithPth(build_py):
    def run(self) -> None:
        super().run()
        Path(self.build_lib).mkdir(parents=True, exist_ok=True)
        (Path(self.build_lib) / "zcbot_fakellm.pth").write_text(f"{HERE}\n")


class WithPth(Distribution):
    def has_pure_modules(self) -> bool:
        return True  # the .pth line is the one "module": without it build_py and install_lib are skipped


setup(distclass=WithPth, cmdclass={"build_py": BuildWithPth})
