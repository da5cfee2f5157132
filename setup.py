"""Build step of the wheel: copies the top-level ``configs/`` (recipes) and ``assets/`` (the demo backbone) into
``sapiens2_ft/_shipped/`` of the build, so an installed package finds them (``sapiens2_ft/resources.py``). The
source tree keeps them at the top level; an editable install reads them there. Everything else is in
``pyproject.toml``."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("configs", "assets")


class BuildWithShippedFiles(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # the package reads the checkout's folders directly
            return
        root = Path(__file__).resolve().parent
        target = Path(self.build_lib) / "sapiens2_ft" / "_shipped"
        shutil.rmtree(target, ignore_errors=True)
        for folder in SHIPPED:
            source = root / folder
            if not source.is_dir():
                raise SystemExit(f"setup.py: {source} is missing; the wheel ships it (sapiens2_ft/resources.py)")
            shutil.copytree(source, target / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithShippedFiles})
