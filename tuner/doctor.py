"""Preflight: what a study needs from this host, checked before any GPU time is spent.

Each check returns rows of (check, status, detail, fix). A ``fail`` means a study could not run (the
CLI exits non-zero and ``tune start`` stops before creating the study); a ``warn`` is something the
study may survive (no token for a model that may not be gated, a hub that does not answer from
here). Nothing here launches an engine or touches a GPU beyond NVML's inventory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from tuner import downloads, fingerprint
from tuner.bench.datasets import check_file
from tuner.engines.installed import folder_launch, read_record
from tuner.engines.model_config import read_model_config
from tuner.engines.spec import load_engine
from tuner.errors import InputError
from tuner.paths import data_dir, expand
from tuner.runtime import container
from tuner.runtime.launcher import check_command
from tuner.runtime.procgroup import free_port
from tuner.space import EngineChoice, Space
from tuner.space.model_paths import is_hub_id, model_paths

Status = Literal["ok", "warn", "fail"]
HUB = "https://huggingface.co"
_HUB_TIMEOUT_S = 3.0
_PROBE_TIMEOUT_S = 20.0
_FOLDER_TIMEOUT_S = 120.0   # importing vLLM or SGLang takes seconds to tens of seconds
_GIB = 1 << 30
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "fp8": 1}


@dataclass(frozen=True)
class Row:
    check: str
    status: Status
    detail: str
    fix: str = ""


def failed(rows: list[Row]) -> bool:
    return any(r.status == "fail" for r in rows)


def run_checks(space: Space | None, *, cheap_only: bool = False) -> list[Row]:
    """Every check for ``space`` (without one: the host's GPUs, container runtime and ports).
    ``cheap_only`` leaves out what needs the network (the hub)."""
    engines = dict(space.engines) if space is not None else {}
    probes = {name: _probe_engine(name, choice) for name, choice in engines.items()}
    needs_gpu = space is None or any(p.needs_gpu for p in probes.values())
    uses_containers = space is None or any(c.container is not None for c in engines.values())
    rows = gpu_rows(needs_gpu)
    if uses_containers:
        gpu_containers = space is None or any(
            c.container is not None and c.container.gpus is not None for c in engines.values())
        runtimes = {c.container.runtime for c in engines.values() if c.container} or {"docker"}
        for runtime in sorted(runtimes):
            rows += runtime_rows(runtime, gpu_containers)
    rows += [p.row for p in probes.values()]
    if space is not None:
        rows += model_rows(space, cheap_only=cheap_only)
        rows += dataset_rows(space)
        rows.append(disk_row(space))
    rows.append(port_row())
    return rows


# ---- GPUs ---------------------------------------------------------------------------------------

def gpu_rows(needed: bool) -> list[Row]:
    gpus = fingerprint.gpus()
    if not gpus:
        if not needed:
            return [Row("gpu", "ok", "no NVIDIA GPU; none of the space's engines is known to need one")]
        return [Row("gpu", "fail", "no NVIDIA GPU (NVML found no driver or no device)",
                    "install the NVIDIA driver (nvidia-smi must list the GPUs), or run a CPU space "
                    "such as cpu-smoke")]
    return [Row(f"gpu {g['index']}", "ok",
                f"{g['name']}, SM {g['compute_capability']}, {g['memory_mib'] / 1024:.0f} GiB, "
                f"driver {g['driver']}") for g in gpus]


# ---- container runtime --------------------------------------------------------------------------

def runtime_rows(runtime: str, gpus: bool) -> list[Row]:
    """The runtime's CLI, whether its daemon answers, and whether it has NVIDIA's runtime."""
    if shutil.which(runtime) is None:
        return [Row(runtime, "fail", f"{runtime} is not on PATH",
                    f"install {runtime}, or remove `container:` from the space's engines to run "
                    "them from host commands")]
    try:
        proc = subprocess.run([runtime, "info", "--format", "{{json .Runtimes}}"], check=False,
                              capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        proc = subprocess.CompletedProcess([], 1, "", f"no answer within {_PROBE_TIMEOUT_S:.0f} s")
    if proc.returncode != 0:
        error = (proc.stderr.strip().splitlines() or ["no error text"])[-1]
        return [Row(runtime, "ok", f"{runtime} CLI at {shutil.which(runtime)}"),
                Row(f"{runtime} daemon", "fail", f"does not answer: {error}",
                    "start it (`systemctl start docker`, or `dockerd &` where there is no systemd)")]
    rows = [Row(runtime, "ok", f"{runtime} CLI at {shutil.which(runtime)}; the daemon answers")]
    try:
        names = sorted(json.loads(proc.stdout or "{}"))
    except ValueError:
        names = []
    if "nvidia" in names:
        rows.append(Row("nvidia container runtime", "ok", f"runtimes: {', '.join(names)}"))
    else:
        rows.append(Row("nvidia container runtime", "fail" if gpus else "ok",
                        f"runtimes: {', '.join(names) or 'none listed'}; no nvidia",
                        "install the NVIDIA Container Toolkit, then `nvidia-ctk runtime configure "
                        "--runtime=docker` and restart the daemon" if gpus else ""))
    return rows


# ---- engines ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _EngineProbe:
    row: Row
    needs_gpu: bool


def _probe_engine(name: str, choice: EngineChoice) -> _EngineProbe:
    """Is the engine's image or command here, and which version? A host command needs a GPU when
    its interpreter holds a CUDA build of torch; one whose packages cannot be read (a wrapper
    script, another runtime) is not failed for it: the launch will tell."""
    spec = load_engine(name)
    if choice.install is not None:
        return _probe_folder(name, Path(expand(choice.install)))
    if choice.container is not None:
        c = choice.container
        try:
            image = container.inspect_image(c.runtime, c.image)
        except InputError as exc:
            return _EngineProbe(Row(f"engine {name}", "fail", f"image {c.image}", str(exc)),
                                c.gpus is not None)
        tag = c.image.rsplit(":", 1)[1] if ":" in c.image.rsplit("/", 1)[-1] else "untagged"
        return _EngineProbe(Row(f"engine {name}", "ok", f"image {image.describe()}, tag {tag}"),
                            c.gpus is not None)
    argv0 = expand((choice.command or spec.command)[0])
    try:
        check_command(argv0)
    except InputError as exc:
        return _EngineProbe(Row(f"engine {name}", "fail", f"command {argv0}", str(exc)), False)
    versions = _package_versions(argv0, [p for p in (spec.package, "torch") if p])
    where = shutil.which(argv0) or argv0
    torch = (versions or {}).get("torch")
    needs_gpu = torch is not None and not torch.endswith("+cpu")
    if versions is not None and spec.package and spec.package not in versions:
        return _EngineProbe(Row(f"engine {name}", "warn", f"{where}: its interpreter has no "
                                f"{spec.package} package (a wrapper or another runtime?)",
                                f"if it should run {spec.package}, install it there or set `command:` "
                                "to the binary in the engine's venv"), needs_gpu)
    version = (versions or {}).get(spec.package or "", "unknown")
    detail = f"{where}, {spec.package or name} {version}" + (f", torch {torch}" if torch else "")
    return _EngineProbe(Row(f"engine {name}", "ok", detail), needs_gpu)


_FOLDER_PROBE = """
import importlib, importlib.metadata as m, json, sys
out = {"version": None, "import_error": None, "torch": None, "gpus": 0}
try:
    out["version"] = m.version(sys.argv[1])
    importlib.import_module(sys.argv[1])
except Exception as e:  # the engine's own import error is the finding
    out["import_error"] = f"{type(e).__name__}: {e}"
try:
    import torch
    out["torch"] = torch.__version__
    out["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
except Exception as e:
    out["import_error"] = out["import_error"] or f"torch: {type(e).__name__}: {e}"
print(json.dumps(out))
"""


def _probe_folder(name: str, folder: Path) -> _EngineProbe:
    """An engine installed into a folder: its install record, its version as installed, that it
    imports under the interpreter it was installed for, and that this interpreter's torch sees a
    GPU, in the environment a launch from the folder gets (``folder_launch``: its PYTHONPATH,
    CUDA_HOME, ... and this process's CUDA_VISIBLE_DEVICES)."""
    check = f"engine {name}"
    try:
        rec = read_record(folder)
        env = {**os.environ, **folder_launch(load_engine(name), folder).env}
    except InputError as exc:
        return _EngineProbe(Row(check, "fail", f"folder {folder}", str(exc)), True)
    try:
        proc = subprocess.run([rec.python, "-c", _FOLDER_PROBE, rec.package], check=False, capture_output=True,
                              text=True, timeout=_FOLDER_TIMEOUT_S, stdin=subprocess.DEVNULL, env=env)
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return _EngineProbe(Row(check, "fail", f"{rec.python} could not be asked about {folder}: {exc}",
                                "the folder's interpreter (install record's python) must run here"), True)
    where = f"{folder} ({rec.package} {found['version'] or '?'}, python {rec.python})"
    if found["version"] != rec.version:
        return _EngineProbe(Row(check, "fail", f"{where}: the install record says {rec.version}",
                                "the folder was changed after the kit installed it: reinstall into an "
                                "empty folder"), True)
    if found["import_error"]:
        return _EngineProbe(Row(check, "fail", f"{where}: import fails: {found['import_error']}",
                                "a wheel the engine imports is missing from the kit: rebuild it, or "
                                "install the missing wheel into the folder"), True)
    if not found["gpus"]:
        return _EngineProbe(Row(check, "fail", f"{where}: torch {found['torch']} sees no GPU",
                                "check nvidia-smi and CUDA_VISIBLE_DEVICES; the engine runs under this "
                                "interpreter's torch"), True)
    return _EngineProbe(Row(check, "ok", f"{where}, torch {found['torch']}, {found['gpus']} GPU(s) visible"), True)


def _package_versions(argv0: str, packages: list[str]) -> dict[str, str] | None:
    """Versions of those ``packages`` installed for the command's own interpreter (a venv's console
    script names its python in the shebang); None when there is no interpreter to ask."""
    path = shutil.which(argv0) or argv0
    python = path if re.search(r"python[0-9.]*$", Path(path).name) else _shebang(path)
    if python is None:
        return None
    code = ("import importlib.metadata as m, json, sys\nout = {}\nfor p in sys.argv[1:]:\n"
            "    try: out[p] = m.version(p)\n    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    try:
        proc = subprocess.run([python, "-c", code, *packages], check=False, capture_output=True, text=True,
                              timeout=_PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        return json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def _shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            first = f.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    parts = first[2:].split() if first.startswith("#!") else []
    if parts and Path(parts[0]).name == "env" and len(parts) > 1:
        parts = [shutil.which(parts[1]) or parts[1]]
    return parts[0] if parts and "python" in Path(parts[0]).name else None


# ---- model --------------------------------------------------------------------------------------

_MODEL_FIX = {
    "missing": "build or copy the checkpoint there, or name a hub id (Org/Name) instead",
    "file": "point it at the checkpoint folder that holds config.json",
    "no-config": "point it at the checkpoint folder that holds config.json",
    "bad-config": "repair or re-download config.json (UTF-8 JSON, an object)",
}


def _model_check(key: str) -> str:
    return {"model.path": "model", "model.tokenizer": "tokenizer"}.get(
        key, "model " + key.rsplit(".", 1)[-1])


def model_rows(space: Space, *, cheap_only: bool = False) -> list[Row]:
    rows = []
    hub_ids = []
    for m in model_paths(space):
        check = _model_check(m.key)
        if m.problem:
            rows.append(Row(check, "fail", m.message, _MODEL_FIX[m.problem]))
        elif m.hub:
            hub_ids.append((check, m.path))
        else:
            kind = "tokenizer" if check == "tokenizer" else "checkpoint"
            rows.append(Row(check, "ok", f"local {kind} {m.path}"))
    if hub_ids:
        token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or ""
        rows.append(Row("hf token", "ok" if token else "warn",
                        "HF_TOKEN is set" if token else "HF_TOKEN is not set",
                        "" if token else "export HF_TOKEN=... (needed for gated models only)"))
        error: list[str] = []  # one unanswered hub is enough: no second timeout
        for check, model_id in hub_ids:
            rows.append(Row(check, "ok", f"hub id {model_id} (checked by the engine at launch)")
                        if cheap_only else _hub_row(check, model_id, token, error))
    return rows


def _hub_row(check: str, model_id: str, token: str, error: list[str]) -> Row:
    """The model on the hub: there, gated, refused. ``error`` carries an unreachable hub's error
    from one model to the next."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        if error:
            raise httpx.ConnectError(error[0])
        response = httpx.get(f"{HUB}/api/models/{model_id}", headers=headers,
                             timeout=_HUB_TIMEOUT_S)
    except httpx.HTTPError as exc:
        error[:] = [str(exc) or type(exc).__name__]
        return Row(check, "warn", f"hub id {model_id}; {HUB} is not reachable from here "
                   f"({error[0]})",
                   "the engine downloads the weights at launch: give this host access to the "
                   "hub, or download the checkpoint elsewhere and set model.path to its folder")
    if response.status_code == 404:
        return Row(check, "fail", f"{model_id} is not a model on the hub",
                   "check the id (Org/Name) in model.path")
    if response.status_code in (401, 403):
        return Row(check, "fail", f"{model_id}: the hub refused this token ({response.status_code})",
                   "use a token with access to the model (accept its license on the hub)")
    gated = response.status_code == 200 and response.json().get("gated")
    if gated and not token:
        return Row(check, "fail", f"{model_id} is gated and HF_TOKEN is not set",
                   "accept the model's license on the hub and export HF_TOKEN")
    return Row(check, "ok", f"hub id {model_id}" + (" (gated; token set)" if gated else ""))


# ---- datasets -----------------------------------------------------------------------------------

def dataset_rows(space: Space) -> list[Row]:
    """Each dataset file the search needs (missing: fail) and those only `tune evaluate` reads
    (missing: warn)."""
    rows, seen = [], set()
    groups = [(w, True) for w in space.all_workloads()] + \
        [(w, False) for w in space.evaluation_workloads]
    for workload, needed in groups:
        if not workload.dataset_path or workload.dataset_path in seen:
            continue
        seen.add(workload.dataset_path)
        path = Path(expand(workload.dataset_path))
        check = f"dataset {workload.name}"
        if path.is_file():
            try:
                held = check_file(workload.dataset, path)
            except InputError as exc:
                rows.append(Row(check, "fail" if needed else "warn", str(exc),
                                "fix that line of the file, or change dataset_path in the space"))
                continue
            size = f"{path.stat().st_size / (1 << 20):.1f} MiB"
            rows.append(Row(check, "ok", f"{path} ({size}{', ' + held if held else ''})"))
            continue
        known = downloads.known_for_path(path)
        fix = (("" if path.parent == data_dir() else f"TUNER_DATA={path.parent} ")
               + f"tune data {known.name}" if known
               else f"put the file at {path}, or change dataset_path in the space")
        rows.append(Row(check, "fail" if needed else "warn", f"{path} does not exist"
                        + ("" if needed else " (only tune evaluate reads it)"), fix))
    return rows


# ---- disk ---------------------------------------------------------------------------------------

def _size(n: float) -> str:
    return f"{n / _GIB:.1f} GiB" if n >= _GIB / 10 else f"{n / (1 << 20):.1f} MiB"


def weight_bytes(config: dict) -> int | None:
    """Parameters × bytes per parameter, from a decoder config.json; None when it lacks the sizes."""
    try:
        h, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
        heads = config["num_attention_heads"]
    except KeyError:
        return None
    head_dim = config.get("head_dim") or h // heads
    kv = config.get("num_key_value_heads", heads)
    inter = config.get("moe_intermediate_size") or config.get("intermediate_size", 4 * h)
    experts = config.get("num_experts") or config.get("num_local_experts") or 1
    attention = h * head_dim * (2 * heads + 2 * kv)
    mlp = 3 * h * inter * experts
    params = layers * (attention + mlp) + vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    quant = (config.get("quantization_config") or {}).get("quant_method")
    per = 0.5 if quant in ("awq", "gptq") else 1 if quant == "fp8" else _DTYPE_BYTES.get(
        str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), 2)
    return int(params * per)


def _hub_cache() -> Path:
    return Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get(
        "HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")


def disk_row(space: Space) -> Row:
    path = expand(space.model.path)
    try:
        estimate = weight_bytes(read_model_config(path))
    except InputError:  # an unreadable config.json: the model row already says so
        estimate = None
    if not is_hub_id(space.model.path):
        folder = Path(path)
        on_disk = sum(f.stat().st_size for f in folder.glob("*") if f.suffix in
                      (".safetensors", ".bin", ".pt")) if folder.is_dir() else 0
        note = f"{_size(on_disk)} of weights in the checkpoint folder"
        if on_disk == 0 and any("dummy" in a for c in space.engines.values() for a in c.fixed_args):
            note = "no weight files: the space loads dummy (random) weights"
        return Row("disk", "ok", note + (f" (estimate {_size(estimate)})" if estimate else ""))
    cache_dir = _hub_cache()
    probe = next((p for p in (cache_dir, *cache_dir.parents) if p.exists()), Path("/"))
    free = shutil.disk_usage(probe).free
    if estimate is None:
        return Row("disk", "warn", f"{_size(free)} free at {probe}; the size of "
                   f"{path} is unknown until its config.json is in the hub cache",
                   "make sure the disk holds the weights (a 14B model in BF16 is about 30 GiB)")
    if free < estimate * 1.1:
        return Row("disk", "fail", f"{_size(free)} free at {probe}, the weights of {path} "
                   f"need about {_size(estimate)}",
                   "free space there, or set HF_HOME to a larger disk")
    return Row("disk", "ok", f"{_size(free)} free at {probe}; the weights need about "
               f"{_size(estimate)}")


# ---- ports --------------------------------------------------------------------------------------

def port_row() -> Row:
    try:
        port = free_port()
    except OSError as exc:
        return Row("ports", "fail", f"cannot bind a port on 127.0.0.1: {exc}",
                   "trials serve on free loopback ports: allow binding 127.0.0.1")
    return Row("ports", "ok", f"free ports on 127.0.0.1 (e.g. {port}) for the trials' engines")
