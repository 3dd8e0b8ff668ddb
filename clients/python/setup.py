"""Builds the package; the protocol code (sundial.protocol) is generated here, not kept.

Everything else is in pyproject.toml. build_py copies the package's own modules, then runs
flatc on protocol/sundial.fbs into the same build directory (generate_protocol.py), so the
wheel holds both. Needs flatc (Debian: flatbuffers-compiler) and the schema at
../../protocol/sundial.fbs (a checkout of the repository) or $SUNDIAL_SCHEMA.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate_protocol  # noqa: E402  (next to this file)


class BuildPyWithProtocol(build_py):
    def run(self):
        super().run()
        try:
            generate_protocol.generate(self.build_lib)
        except generate_protocol.GenerationError as e:
            sys.exit(f"sundial: cannot generate the protocol code: {e}")


setup(cmdclass={"build_py": BuildPyWithProtocol})
