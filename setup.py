"""Builds torchtpu with setuptools: `pip install .` or `pip wheel .` (docs/install.md).

* the C runtime (runtime/) -> the static library libtorchtpu_rt.a, by setuptools'
  build_clib, with the Makefile's C11 flags;
* the C++ binding (torchtpu/csrc/) -> torchtpu._C, by torch.utils.cpp_extension against
  the torch in the build environment (pinned in pyproject.toml), linked with that library.

Metadata lives in pyproject.toml; the version is TORCHTPU_VERSION from
runtime/include/torchtpu/runtime.h, the string torchtpu.__version__ (_C.version())
returns. Setuptools builds under build/setuptools/, apart from the Makefile's
build/rt, build/bind and build/libtorchtpu_rt.a.
"""

import glob
import os
import re

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

VERSION_HEADER = "runtime/include/torchtpu/runtime.h"
# Include directories are absolute: the binding's compiler runs in ninja's build directory.
HERE = os.path.dirname(os.path.abspath(__file__))
RT_INCLUDE = os.path.join(HERE, "runtime", "include")


def _version() -> str:
    with open(VERSION_HEADER, encoding="utf-8") as f:
        m = re.search(r'^#define\s+TORCHTPU_VERSION\s+"([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError(f"TORCHTPU_VERSION not found in {VERSION_HEADER}")
    return m.group(1)


# Paths relative to this directory, as setuptools requires.
RT_SOURCES = sorted(glob.glob("runtime/src/*.c") + glob.glob("runtime/src/*/*.c"))
RT_HEADERS = sorted(glob.glob("runtime/include/torchtpu/*.h") + glob.glob("runtime/src/*.h")
                    + glob.glob("runtime/src/*/*.h"))
BIND_SOURCES = sorted(glob.glob("torchtpu/csrc/*.cpp"))
BIND_HEADERS = sorted(glob.glob("torchtpu/csrc/*.h"))

# As the Makefile's CFLAGS. They follow Python's own CFLAGS on the command line, so
# -O2 wins over its -O3 and -UNDEBUG keeps assert() as in `make` builds.
RT_CFLAGS = ["-std=c11", "-g", "-fPIC", "-Wall", "-Wextra", "-Werror", "-O2", "-UNDEBUG"]

runtime_lib = (
    "torchtpu_rt",
    {
        "sources": RT_SOURCES,
        "include_dirs": [RT_INCLUDE, os.path.join(HERE, "runtime", "src")],
        "macros": [("_POSIX_C_SOURCE", "200809L")],
        "cflags": RT_CFLAGS,
        "obj_deps": {"": RT_HEADERS},  # any header change recompiles every object
    },
)

binding = CppExtension(
    "torchtpu._C",
    BIND_SOURCES,
    include_dirs=[RT_INCLUDE],
    depends=BIND_HEADERS + glob.glob("runtime/include/torchtpu/*.h"),
    # build_ext links build_clib's libraries too, but after torch's: name the runtime
    # and what it needs first so the static archive resolves against the objects.
    libraries=["torchtpu_rt", "dl", "pthread", "m"],
    extra_compile_args={"cxx": ["-std=c++20", "-O2", "-Wall", "-Wno-unused-parameter"]},
)

setup(
    version=_version(),
    libraries=[runtime_lib],
    ext_modules=[binding],
    cmdclass={"build_ext": BuildExtension},
    options={"build": {"build_base": "build/setuptools"}},
)
