"""pyproject.toml against the CMake project it packages. CI has neither
scikit-build-core nor a CUDA torch, so `pip install .` itself runs on the GPU
machine (scripts/pip-check.sh); this is the part CI can hold: the version pip
reads is CMake's, the options and the target pip names exist, the package
folder holds the package, and the build needs nothing an offline machine lacks.

Usage (CTest): python3 check_pyproject.py <source dir> <CMake's PROJECT_VERSION>
"""

import re
import sys
import tomllib
from pathlib import Path

root, cmake_version = Path(sys.argv[1]), sys.argv[2]
config = tomllib.loads((root / "pyproject.toml").read_text())
skbuild = config["tool"]["scikit-build"]
errors = []

version = skbuild["metadata"]["version"]
found = re.search(version["regex"], (root / version["input"]).read_text())
if not found or found.group("value") != cmake_version:
    errors.append(f"version regex reads {found and found.group('value')!r}, CMake's version is {cmake_version!r}")

requires = config["build-system"]["requires"]
if [r for r in requires if not r.startswith("scikit-build-core")]:
    errors.append(f"build-system.requires {requires}: only scikit-build-core (no torch: see pyproject.toml)")

cmake_sources = (root / "CMakeLists.txt").read_text() + (root / "python" / "CMakeLists.txt").read_text()
for option in skbuild["cmake"]["define"]:
    if not re.search(rf"option\({option}\b", cmake_sources):
        errors.append(f"cmake.define {option}: no such option in CMakeLists.txt")
for target in skbuild["build"]["targets"]:
    if not re.search(rf"add_library\({target}\b", cmake_sources):
        errors.append(f"build.targets {target}: no such library")
for component in skbuild["install"]["components"]:
    if not re.search(rf"COMPONENT {component}\b", cmake_sources):
        errors.append(f"install.components {component}: nothing installs into it")
for package in skbuild["wheel"]["packages"]:
    if not (root / package / "__init__.py").is_file():
        errors.append(f"wheel.packages {package}: no __init__.py")

print("\n".join(errors) or f"pyproject.toml: version {cmake_version}, options, target, component and package match")
sys.exit(1 if errors else 0)
