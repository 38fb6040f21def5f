"""What the hardware and the engine did while a benchmark ran: GPU or CPU samples, engine metrics.

Throughput alone says which config won; telemetry says why one lost (KV cache full, preemptions,
requests queued, a GPU that sat idle or throttled) and what a token cost in energy. Sampling runs in
a background thread so the benchmark's own timing is untouched; a sampling error is recorded in the
result instead of failing the benchmark.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import threading
import time
from dataclasses import dataclass
from functools import cache
from types import TracebackType
from typing import Any

import httpx
import psutil

from tuner.engines.spec import available_engines, load_engine
from tuner.runtime.procgroup import group_members

_MIB = 1 << 20
_MAX_ERRORS = 5

@cache
def vocabulary() -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], dict[str, tuple[str, ...]],
                          dict[str, tuple[str, ...]]]:
    """Engine metrics under one vocabulary, from the engine specs (``metrics:``): the engines'
    series prefixes, and per engine-neutral name the series that report it (gauges, counters,
    histograms), in each spec's order of preference."""
    prefixes: list[str] = []
    tables: tuple[dict[str, list[str]], ...] = ({}, {}, {})
    for name in available_engines():
        metrics = load_engine(name).metrics
        if metrics is None:
            continue
        prefixes.append(metrics.prefix)
        for table, own in zip(tables, (metrics.gauges, metrics.counters, metrics.histograms)):
            for key, series in own.items():
                table.setdefault(key, []).extend(series)
    gauges, counters, histograms = ({k: tuple(v) for k, v in t.items()} for t in tables)
    return tuple(prefixes), gauges, counters, histograms


# ---- Prometheus text format --------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class MetricsParseError(ValueError):
    """A /metrics body that is not Prometheus text: the message names the line."""


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_prometheus(text: str, source: str = "metrics") -> list[Sample]:
    """Parse Prometheus text exposition format (0.0.4), the format every engine here serves."""
    samples = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise MetricsParseError(f"{source} line {lineno}: not a metric sample: {raw[:120]!r}")
        name, label_text, value_text = m.group(1), m.group(2), m.group(3)
        try:
            value = float(value_text)  # also "NaN", "+Inf", "-Inf"
        except ValueError:
            raise MetricsParseError(
                f"{source} line {lineno}: value {value_text!r} of {name} is not a number") from None
        samples.append(Sample(name, _parse_labels(label_text, source, lineno) if label_text else {},
                              value))
    return samples


def _parse_labels(text: str, source: str, lineno: int) -> dict[str, str]:
    body, labels, pos = text[1:-1], {}, 0
    while pos < len(body):
        m = _LABEL.match(body, pos)
        if not m:
            raise MetricsParseError(f"{source} line {lineno}: bad label set {text[:120]!r}")
        labels[m.group(1)] = re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return labels


def totals(samples: list[Sample]) -> dict[str, float]:
    """Each engine series summed over its labels (engines label by model, engine index, tp rank).

    Buckets, ``_created`` timestamps and the server's generic process/HTTP series are dropped.
    """
    out: dict[str, float] = {}
    for s in samples:
        if s.name.startswith(vocabulary()[0]) and not s.name.endswith(("_bucket", "_created")):
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def engine_view(before: dict[str, float], after: dict[str, float],
                gauges: dict[str, list[float]]) -> dict[str, Any]:
    """The engine's story of the run under engine-neutral names, with the source metric named."""
    view: dict[str, Any] = {}
    _, gauge_names, counter_names, histogram_names = vocabulary()
    for key, names in gauge_names.items():
        name = next((n for n in names if n in gauges or n in after), None)
        if name is None:
            continue
        seen = gauges.get(name) or [after[name]]
        view[key] = {"metric": name, **_stats(seen)}
    for key, names in counter_names.items():
        name = next((n for n in names if n in after), None)
        if name is not None:
            view[key] = {"metric": name, "delta": after[name] - before.get(name, 0.0)}
    for key, names in histogram_names.items():
        name = next((n for n in names if n + "_count" in after), None)
        if name is None:
            continue
        count = after[name + "_count"] - before.get(name + "_count", 0.0)
        total = after[name + "_sum"] - before.get(name + "_sum", 0.0)
        view[key] = {"metric": name, "count": count, "mean": total / count if count else None}
    return view


# ---- sampling ----------------------------------------------------------------------------------

def _stats(values: list[float]) -> dict[str, float | None]:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return {"min": None, "mean": None, "max": None}
    return {"min": min(finite), "mean": statistics.fmean(finite), "max": max(finite)}


class _Nvml:
    """The GPUs as NVML sees them; ``devices`` is empty when there is no driver or no GPU."""

    def __init__(self) -> None:
        self.devices: list[tuple[int, str, Any]] = []
        self.why_not: str | None = None
        try:
            import pynvml
            pynvml.nvmlInit()
        except Exception as exc:  # no library, no driver: a CPU machine
            self.why_not = f"NVML unavailable ({type(exc).__name__}: {exc})"
            return
        self.nvml = pynvml
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                self.devices.append((i, name.decode() if isinstance(name, bytes) else name, h))
        except pynvml.NVMLError as exc:  # e.g. a GPU fallen off the bus: sample none
            self.devices = []
            self.why_not = f"NVML could not list GPUs ({exc})"
        if not self.devices and self.why_not is None:
            self.why_not = "NVML found no GPU"

    def keep_engine_gpus(self, pids: set[int]) -> str:
        """Keep the GPUs the engine's processes run on, so idle GPUs don't dilute the figures.

        Keeps all when none matches: in some containers NVML reports host pids.
        """
        used = []
        for dev in self.devices:
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(dev[2])
            except self.nvml.NVMLError:
                return "all"
            if pids & {p.pid for p in procs}:
                used.append(dev)
        if not used:
            return "all"
        self.devices = used
        return "engine"

    def energy_mj(self, handle: Any) -> float | None:
        try:
            return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except self.nvml.NVMLError:  # pre-Volta GPUs have no counter
            return None

    def sample(self, handle: Any) -> dict[str, float]:
        n = self.nvml
        util = n.nvmlDeviceGetUtilizationRates(handle)
        return {
            "memory_used_mib": n.nvmlDeviceGetMemoryInfo(handle).used / _MIB,
            "utilization_pct": float(util.gpu),
            "memory_utilization_pct": float(util.memory),
            "power_w": n.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "sm_clock_mhz": float(n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM)),
            "temperature_c": float(n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU)),
        }

    def close(self) -> None:
        if hasattr(self, "nvml"):
            self.nvml.nvmlShutdown()


def gpu_memory_in_use() -> dict[str, float] | None:
    """MiB in use on each GPU this process may use (CUDA_VISIBLE_DEVICES narrows NVML's list when it
    names indices); None without NVML or a GPU."""
    nvml = _Nvml()
    try:
        if not nvml.devices:
            return None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        wanted = {v.strip() for v in visible.split(",")} if visible else None
        return {str(i): round(nvml.nvml.nvmlDeviceGetMemoryInfo(h).used / _MIB, 1)
                for i, _, h in nvml.devices if wanted is None or str(i) in wanted}
    finally:
        nvml.close()


def gpu_memory_released(before: dict[str, float] | None, timeout_s: float = 15.0,
                        slack_mib: float = 64.0) -> dict | None:
    """After a teardown: poll until every GPU is back within ``slack_mib`` of what it held before
    the launch, at most ``timeout_s`` (the driver frees an exited process's memory a moment after
    the exit). What is still held then is what a leaked process would hold."""
    if before is None:
        return None
    start = time.monotonic()
    while True:
        now = gpu_memory_in_use() or {}
        held = {i: round(now.get(i, 0.0) - before.get(i, 0.0), 1) for i in now}
        if all(v <= slack_mib for v in held.values()) or time.monotonic() - start >= timeout_s:
            return {"before_mib": before, "after_mib": now, "held_mib": held,
                    "released_after_s": round(time.monotonic() - start, 2)}
        time.sleep(0.5)


class TelemetrySampler:
    """Samples the GPUs, the engine's process group and its metrics around a benchmark.

    ``with TelemetrySampler(server.pgid, server.base_url + "/metrics") as t: run_benchmark(...)``,
    then ``t.result()``. Without a GPU the result says so and the CPU figures are what there is;
    they are sampled on GPU machines too, since a CPU-bound scheduler starves a fast GPU. Machine
    CPU% comes from ``cpu_times()`` deltas, not ``psutil.cpu_percent()``, whose shared state the
    benchmark client may use.
    """

    def __init__(self, engine_pgid: int, metrics_url: str | None, interval_s: float = 0.5,
                 metrics_interval_s: float = 1.0):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.pgid = engine_pgid
        self.metrics_url = metrics_url
        self.interval_s = interval_s
        self.metrics_interval_s = metrics_interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors: list[str] = []
        self._procs: dict[int, psutil.Process] = {}
        self._series: dict[str, list[float]] = {}
        self._gpu_series: dict[int, dict[str, list[float]]] = {}
        self._gauges: dict[str, list[float]] = {}
        self._before: dict[str, float] = {}
        self._after: dict[str, float] = {}
        self._energy_start: dict[int, float | None] = {}
        self._energy_end: dict[int, float | None] = {}
        self._samples = 0
        self._gpu_selection: str | None = None
        self._t0 = self._t1 = 0.0

    # context manager -------------------------------------------------------------------------
    def __enter__(self) -> "TelemetrySampler":
        self._nvml = _Nvml()
        self._client = httpx.Client(timeout=2.0)
        self._before = self._scrape() or {}
        self._engine_group()  # primes per-process CPU readings
        if self._nvml.devices:
            self._gpu_selection = self._nvml.keep_engine_gpus(set(self._procs))
        for index, _, h in self._nvml.devices:
            self._energy_start[index] = self._nvml.energy_mj(h)
        self._cpu_prev = psutil.cpu_times()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._t1 = time.monotonic()
        for index, _, h in self._nvml.devices:
            self._energy_end[index] = self._nvml.energy_mj(h)
        self._after = self._scrape() or {}
        self._client.close()
        self._nvml.close()

    # sampling --------------------------------------------------------------------------------
    def _loop(self) -> None:
        next_scrape = time.monotonic() + self.metrics_interval_s
        while not self._stop.wait(self.interval_s):
            self._guarded(self._sample_once)
            if self.metrics_url and time.monotonic() >= next_scrape:
                next_scrape += self.metrics_interval_s
                self._guarded(self._sample_gauges)

    def _guarded(self, fn) -> None:
        try:
            fn()
        except Exception as exc:  # telemetry must never break the measurement it observes
            if len(self._errors) < _MAX_ERRORS:
                self._errors.append(f"{fn.__name__}: {type(exc).__name__}: {exc}")

    def _add(self, series: dict[str, list[float]], values: dict[str, float]) -> None:
        for k, v in values.items():
            series.setdefault(k, []).append(v)

    def _sample_once(self) -> None:
        for index, _, h in self._nvml.devices:
            self._add(self._gpu_series.setdefault(index, {}), self._nvml.sample(h))
        cpu = psutil.cpu_times()
        busy = (sum(cpu) - cpu.idle - getattr(cpu, "iowait", 0.0)) - (
            sum(self._cpu_prev) - self._cpu_prev.idle - getattr(self._cpu_prev, "iowait", 0.0))
        elapsed = sum(cpu) - sum(self._cpu_prev)
        self._cpu_prev = cpu
        engine_cpu, rss, alive = self._engine_group()
        values = {"engine_rss_mib": rss / _MIB, "engine_processes": float(alive)}
        if engine_cpu is not None:
            values["engine_cpu_pct"] = engine_cpu
        if elapsed > 0:
            values["machine_cpu_pct"] = 100.0 * busy / elapsed
        self._add(self._series, values)
        self._samples += 1

    def _engine_group(self) -> tuple[float | None, int, int]:
        """CPU% (100 = one core) and RSS summed over the group; new members are primed first."""
        members = {p.pid: p for p in group_members(self.pgid)}
        cpu, rss, primed_all = 0.0, 0, True
        for pid, proc in members.items():
            try:
                known = self._procs.get(pid)
                if known is None:  # first sight: cpu_percent needs a previous reading
                    self._procs[pid] = known = proc
                    known.cpu_percent(None)
                    primed_all = False
                else:
                    cpu += known.cpu_percent(None)
                rss += known.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        for pid in set(self._procs) - set(members):
            del self._procs[pid]
        return (cpu if primed_all else None), rss, len(members)

    def _scrape(self) -> dict[str, float] | None:
        if not self.metrics_url:
            return None
        try:
            response = self._client.get(self.metrics_url)
            response.raise_for_status()
            return totals(parse_prometheus(response.text, self.metrics_url))
        except (httpx.HTTPError, MetricsParseError) as exc:
            if len(self._errors) < _MAX_ERRORS:
                self._errors.append(f"scrape {self.metrics_url}: {type(exc).__name__}: {exc}")
            return None

    def _sample_gauges(self) -> None:
        values = self._scrape()
        if values:
            wanted = {n for names in vocabulary()[1].values() for n in names}
            self._add(self._gauges, {k: v for k, v in values.items() if k in wanted})

    # result ----------------------------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        """JSON-serialisable summary: per-metric min/mean/max, energy, engine metrics and deltas."""
        gpus = []
        for index, name, _ in self._nvml.devices:
            start, end = self._energy_start.get(index), self._energy_end.get(index)
            series = self._gpu_series.get(index, {})
            gpus.append({"index": index, "name": name,
                         **{k: _stats(v) for k, v in series.items()},
                         "energy_j": (end - start) / 1000.0 if start is not None and end is not None
                         else None})
        energies = [g["energy_j"] for g in gpus]
        out: dict[str, Any] = {
            "gpu": bool(gpus),
            "duration_s": self._t1 - self._t0,
            "interval_s": self.interval_s,
            "samples": self._samples,
            "gpus": gpus,
            "gpu_selection": self._gpu_selection,
            "energy_j": sum(energies) if gpus and None not in energies else None,
            "cpu": {k: _stats(v) for k, v in self._series.items()},
        }
        if not gpus:
            out["note"] = f"no GPU: {self._nvml.why_not}; CPU figures recorded instead"
        if self.metrics_url:
            delta = {k: v - self._before[k] for k, v in self._after.items()
                     if k in self._before and v != self._before[k]}
            out["engine_metrics"] = {
                "url": self.metrics_url,
                "summary": engine_view(self._before, self._after, self._gauges),
                "before": self._before, "after": self._after, "delta": delta,
            }
        if self._errors:
            out["errors"] = self._errors
        return out


def derived(result: dict[str, Any], output_tokens: int) -> dict[str, float | None]:
    """Figures worth an objective or a column: energy per output token, peak memory, mean load.

    Peak GPU memory is the highest on any one GPU (the one that runs out first); power is summed
    over the GPUs; utilisation is their mean.
    """
    gpus = result.get("gpus") or []
    cpu = result.get("cpu") or {}
    energy = result.get("energy_j")

    def per_gpu(key: str, stat: str) -> list[float]:
        return [g[key][stat] for g in gpus if (g.get(key) or {}).get(stat) is not None]

    memory, util, power = per_gpu("memory_used_mib", "max"), per_gpu("utilization_pct", "mean"), \
        per_gpu("power_w", "mean")
    return {
        "joules_per_output_token": energy / output_tokens if energy is not None and output_tokens
        else None,
        "gpu_memory_peak_mib": max(memory) if memory else None,
        "gpu_utilization_mean_pct": statistics.fmean(util) if util else None,
        "gpu_power_mean_w": sum(power) if power else None,
        "engine_rss_peak_mib": (cpu.get("engine_rss_mib") or {}).get("max"),
        "engine_cpu_mean_pct": (cpu.get("engine_cpu_pct") or {}).get("mean"),
        "prefix_cache_hit_rate": prefix_cache_hit_rate(result),
    }


def prefix_cache_hit_rate(result: dict[str, Any]) -> float | None:
    """Share of prompt tokens the engine found in its prefix cache during the run (0-1): vLLM's
    ``prefix_cache_hits`` over ``prefix_cache_queries`` counters (tokens), else SGLang's
    ``cache_hit_rate`` gauge averaged over the run's samples; None where the engine reports neither
    or the run queried no cache."""
    summary = (result.get("engine_metrics") or {}).get("summary") or {}
    queries = (summary.get("prefix_cache_queries") or {}).get("delta")
    hits = (summary.get("prefix_cache_hits") or {}).get("delta")
    if queries and hits is not None:
        return hits / queries
    return (summary.get("prefix_cache_hit_rate") or {}).get("mean")
