# The C side (csrc/) is compiled by cffi at install time; everything else is in pyproject.toml.
# build_py also writes the commit of the tree being built into the package, so that an
# installed gpuwrite's results say which commit made them (gpuwrite/_commit.py).
import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _commit_module():
    # Loaded by path: importing the gpuwrite package would need its dependencies, which a
    # build environment does not have.
    spec = importlib.util.spec_from_file_location("_gpuwrite_commit", HERE / "gpuwrite" / "_commit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithCommit(build_py):
    def run(self):
        super().run()
        commit = _commit_module()
        sha = commit.checkout_commit(HERE)
        if sha and not self.dry_run:
            (Path(self.build_lib) / "gpuwrite" / commit.BUILD_FILE).write_text(sha + "\n")


setup(cffi_modules=["csrc/ffi_build.py:ffibuilder"], cmdclass={"build_py": BuildPyWithCommit})
