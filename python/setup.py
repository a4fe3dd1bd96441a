"""pip install ./python (from the repository root): builds the extension with CMake, offline.

    /usr/bin/python3 -m venv --system-site-packages ~/poseidon-venv
    ~/poseidon-venv/bin/pip install ./python
    # or, for the system Python itself (Debian 12 marks it externally managed):
    /usr/bin/python3 -m pip install --break-system-packages ./python

There is deliberately no pyproject.toml: with one, pip would build in an isolated environment
and try to download setuptools; without one it uses the installed setuptools and wheel, so the
install works offline with Debian's packages (python3-setuptools, python3-wheel, pybind11-dev,
python3-dev, cmake, ninja). build_ext configures the repository into build-python/ (or
$POSEIDON_BUILD_DIR), builds only the extension's target and copies it into the package.

The extension keeps the checkout's absolute scenarios/ path as its built-in data folder (as the
CLI does): move or delete the checkout and the built-in models are no longer found (pass paths,
or data_dir= to poseidon.models, or reinstall).
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("POSEIDON_BUILD_DIR") or os.path.join(ROOT, "build-python")
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DPOSEIDON_WITH_PYTHON=ON", "-DPOSEIDON_WITH_CUDA=OFF",
                     "-DPOSEIDON_BUILD_TESTS=OFF", "-DPOSEIDON_BUILD_BENCH=OFF",
                     "-DPYTHON_EXECUTABLE=" + sys.executable]
        if shutil.which("ninja") and not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "poseidon_python",
                               "-j", jobs])
        built = glob.glob(os.path.join(build_dir, "python", "poseidon", "_ext*.so"))
        if not built:
            raise RuntimeError("the CMake build made no %s/python/poseidon/_ext*.so" % build_dir)
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    name="poseidon",
    version="0.1.0",
    description="Poseidon: simulate data-parallel deep-learning training (Python module)",
    packages=["poseidon", "poseidon.torch"],  # poseidon.torch needs torch only when imported
    ext_modules=[CMakeExtension("poseidon._ext")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=[],  # pandas for sweep() and the tables; Debian's python3-pandas
    zip_safe=False,
)
