"""Classify why an engine did not come up (or died), from its log and the way it ended."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.engines.spec import EngineSpec, FailureSignature

# Failures of the machine or of the launch, not of the config: the trial is failed and retried
# instead of teaching the sampler (another process took the port; the container runtime refused).
NOT_THE_CONFIG = frozenset({"port-in-use", "container-error"})
# How much of the log's end to scan and to quote: root causes sit near the end of a traceback.
_TAIL_CHARS = 200_000


@dataclass(frozen=True)
class Failure:
    failure_class: str
    reason: str          # one line a user can act on
    evidence: str        # the log line that matched, or what the launcher saw
    generalises_on: tuple[str, ...] = ()


def _matching_line(text: str, pattern: str) -> str:
    idx = text.find(pattern)
    start = text.rfind("\n", 0, idx) + 1
    end = text.find("\n", idx)
    return text[start:end if end != -1 else len(text)].strip()[:500]


def match_signature(spec: EngineSpec, log_text: str) -> tuple[FailureSignature, str] | None:
    text = log_text[-_TAIL_CHARS:]
    for sig in spec.failures:
        for pattern in sig.patterns:
            if pattern in text:
                return sig, _matching_line(text, pattern)
    return None


def classify_exit(spec: EngineSpec, log_text: str, returncode: int | None) -> Failure:
    """Classify a server that exited (or was killed) before or while serving."""
    found = match_signature(spec, log_text)
    if found:
        sig, line = found
        return Failure(sig.failure_class, sig.reason or line, line, tuple(sig.generalises_on))
    return Failure("crashed", f"{spec.display_name} exited with code {returncode}",
                   _last_error_line(spec, log_text))


def startup_timeout(spec: EngineSpec, timeout_s: float, log_text: str) -> Failure:
    found = match_signature(spec, log_text)
    if found:  # hung after logging a known error: report the cause, not the symptom
        sig, line = found
        return Failure(sig.failure_class, sig.reason or line, line, tuple(sig.generalises_on))
    return Failure("startup-timeout",
                   f"{spec.display_name} was not ready after {timeout_s:.0f} s; killed",
                   _last_error_line(spec, log_text))


def _last_error_line(spec: EngineSpec, log_text: str) -> str:
    lines = [l.strip() for l in log_text[-_TAIL_CHARS:].splitlines() if l.strip()]
    for line in reversed(lines):
        if any(b in line for b in spec.benign):
            continue
        if "Error" in line or "error" in line or "Exception" in line:
            return line[:500]
    return lines[-1][:500] if lines else "(empty log)"
