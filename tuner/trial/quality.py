"""The quality probe: does a config still answer like the reference precision?

It runs on the trial's own server after the benchmark: a fixed prompt set (``quality.prompts`` first
turns of the bundled ShareGPT sample, drawn with ``quality.seed``), greedy, ``max_tokens`` new
tokens each. Where the engine scores given tokens (``quality_probe.logprobs`` in its spec), the
config also scores the *reference's* tokens (teacher forcing), so top-1 agreement and the KL
estimate compare both models on the same text rather than on texts that drifted apart after their
first differing token.

Roles, decided by the driver (``tuner.study.task``): the reference arm's answers become the study's
reference; a config with another precision is compared with them; one with the reference's
precision is not probed unless ``probe_reference`` asks (its numbers are then the noise floor). A
probe that cannot measure a metric says why under ``not_measured``, and the recorder counts that
as a violated bound: never a silent pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tuner.bench.completions import Reply, post_all
from tuner.bench.datasets import load_tokenizer, sample_prompts
from tuner.engines.spec import EngineSpec
from tuner.paths import SAMPLES_DIR
from tuner.space import QUALITY_METRICS, Quality, Space
from tuner.trial.lm_eval import drops

REFERENCE, CANDIDATE, SAME_PRECISION = "reference", "candidate", "same-precision"
PROMPT_FILE = SAMPLES_DIR / "sharegpt_small.json"
COMPLETIONS = "/v1/completions"  # the probe sends raw prompts: every engine serves this endpoint


@dataclass(frozen=True)
class ProbeTask:
    """What the driver decided for one trial: its role, and for a candidate the study's reference
    (``schema.QUALITY_REFERENCE``: its settings, answers and lm-eval scores)."""

    role: str
    reference: dict | None = None
    why: str = ""  # for a trial that is not probed


@dataclass
class Answer:
    """One prompt's greedy answer. ``ids``: the tokens are the engine's own ids (else the text
    re-tokenized); ``top``: per answer token, the top-k (id, logprob) the engine gave it when
    scoring its own answer (a reference's only)."""

    text: str
    tokens: list[int]
    ids: bool
    prompt_ids: list[int] | None = None
    top: list[list[list[float]]] | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


class ProbeError(Exception):
    """The probe could not get answers from the server; the message says which request and why."""


def probe(space: Space, spec: EngineSpec, model_name: str, base_url: str, task: ProbeTask,
          *, api_key: str | None = None) -> tuple[dict, list[dict]]:
    """The trial's quality record (``schema.QUALITY``) and the per-prompt answers (a file beside
    the trial log; the reference's become the study's reference)."""
    q = space.quality
    record: dict[str, Any] = {"role": task.role, "prompts": q.prompts, "max_tokens": q.max_tokens,
                              "concurrency": q.concurrency, "logprobs": spec.quality_probe.logprobs}
    if task.reference is not None:
        record["reference_trial"] = task.reference.get("trial")
    tokenizer = load_tokenizer(space.model.resolved_tokenizer())
    prompts = sample_prompts(PROMPT_FILE, tokenizer, q.prompts, seed=q.seed,
                             max_prompt_len=q.max_prompt_tokens)
    client = _Client(spec, model_name, base_url, q, api_key)
    try:
        answers = client.generate(prompts, tokenizer)
        if task.role == CANDIDATE and not task.reference:
            record["not_measured"] = {m: "no reference answers: the reference arm has not served "
                                         "(it runs first; a failed reference leaves none)"
                                      for m in QUALITY_METRICS}
            return record, [a.to_json() for a in answers]
        reference = ([Answer(**a) for a in task.reference["answers"]]
                     if task.role == CANDIDATE else answers)
        scores, why_unscored = None, _why_unscored(spec, reference)
        if why_unscored is None:
            scores = client.score(reference)
            if task.role != CANDIDATE:  # the reference keeps the top-k of its own answer tokens
                for answer, positions in zip(answers, scores):
                    answer.top = [_top_k(p, q.top_logprobs) for p in positions]
        metrics, not_measured = compare(reference, answers, scores, why_unscored, tokenizer)
    except ProbeError as exc:
        record["not_measured"] = {m: f"the probe failed: {exc}" for m in QUALITY_METRICS}
        return record, []
    record["metrics"] = metrics
    if not_measured:
        record["not_measured"] = not_measured
    return record, [a.to_json() for a in answers]


def _why_unscored(spec: EngineSpec, reference: list[Answer]) -> str | None:
    if not spec.quality_probe.logprobs:
        return (f"engine {spec.name} returns no logprobs "
                f"({spec.quality_probe.source or 'its spec says so'})")
    if not all(a.ids and a.prompt_ids is not None for a in reference):
        return "the reference answers carry no token ids to score (its engine returned none)"
    return None


class _Client:
    """The probe's requests: greedy answers, and logprobs of given tokens, over the benchmark's
    transport with the engine's own request rules (its omitted fields, the model name it wants)."""

    def __init__(self, spec: EngineSpec, model: str, base_url: str, q: Quality,
                 api_key: str | None) -> None:
        self.spec, self.model, self.base_url, self.q, self.api_key = spec, model, base_url, q, api_key

    def _post(self, payloads: list[dict]) -> list[dict]:
        for p in payloads:
            for name in self.spec.request.omit_fields:
                p.pop(name, None)
        replies = post_all(self.base_url, COMPLETIONS, payloads, concurrency=self.q.concurrency,
                           api_key=self.api_key, timeout_s=self.q.timeout_s)
        return [_choice(r, i) for i, r in enumerate(replies)]

    def generate(self, prompts: list[str], tokenizer: Any) -> list[Answer]:
        extra = {self.spec.quality_probe.token_ids_field: True} \
            if self.spec.quality_probe.token_ids_field else {}
        choices = self._post([{"model": self.model, "prompt": p, "max_tokens": self.q.max_tokens,
                               "temperature": 0.0, "stream": False, **extra} for p in prompts])
        answers = []
        for choice in choices:
            text = choice.get("text") or ""
            ids = choice.get("token_ids")
            tokens = ([int(t) for t in ids] if isinstance(ids, list)
                      else tokenizer.encode(text, add_special_tokens=False))
            prompt_ids = choice.get("prompt_token_ids")
            answers.append(Answer(text, tokens, isinstance(ids, list),
                                  [int(t) for t in prompt_ids] if isinstance(prompt_ids, list) else None))
        return answers

    def score(self, answers: list[Answer]) -> list[list[dict[int, float]]]:
        """Per answer token: {token id: logprob} the engine gives at that position, with the
        answer's prompt and earlier answer tokens as context."""
        field = self.spec.quality_probe.score_field
        choices = self._post([{"model": self.model, "prompt": a.prompt_ids + a.tokens,
                               "max_tokens": 1, "temperature": 0.0, "stream": False,
                               field: self.q.top_logprobs} for a in answers])
        out = []
        for i, (answer, choice) in enumerate(zip(answers, choices)):
            rows = choice.get(field)
            start = len(answer.prompt_ids)
            if not isinstance(rows, list) or len(rows) < start + len(answer.tokens):
                raise ProbeError(f"prompt {i}: the answer has no {field} for every token")
            out.append([_position(rows[start + j], i) for j in range(len(answer.tokens))])
        return out


def _choice(reply: Reply, index: int) -> dict:
    if reply.error:
        raise ProbeError(f"prompt {index}: {reply.error}")
    choices = reply.body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProbeError(f"prompt {index}: the answer has no choices")
    return choices[0]


def _position(row: Any, index: int) -> dict[int, float]:
    if not isinstance(row, dict) or not row:
        raise ProbeError(f"prompt {index}: a scored position has no logprobs")
    out = {}
    for token, entry in row.items():
        logprob = entry.get("logprob") if isinstance(entry, dict) else entry
        if not isinstance(logprob, (int, float)):
            raise ProbeError(f"prompt {index}: logprob {logprob!r} of token {token} is not a number")
        out[int(token)] = max(float(logprob), -1e9)
    return out


def _top_k(position: dict[int, float], k: int) -> list[list[float]]:
    ranked = sorted(position.items(), key=lambda kv: -kv[1])
    return [[token, logprob] for token, logprob in ranked[:k]]


def _ranks_first(position: dict[int, float], token: int) -> bool:
    """Whether ``token`` has the highest logprob at this position, ties included: greedy decoding
    may pick any of several tokens with equal logits (random-weight models have many)."""
    return token in position and position[token] >= max(position.values())


def compare(reference: list[Answer], answers: list[Answer],
            scores: list[list[dict[int, float]]] | None, why_unscored: str | None,
            tokenizer: Any) -> tuple[dict[str, float], dict[str, str]]:
    """Metrics of ``answers`` against ``reference`` (same prompts, same order), and why any could
    not be measured. Token metrics compare the engines' token ids where both sides have them, else
    both texts re-tokenized; ``scores`` are the config's logprobs on the reference's tokens."""
    if len(reference) != len(answers):
        raise ProbeError(f"the reference has {len(reference)} answers, this probe {len(answers)}")
    both_ids = all(a.ids for a in reference) and all(a.ids for a in answers)

    def tokens(a: Answer) -> list[int]:
        return a.tokens if both_ids else tokenizer.encode(a.text, add_special_tokens=False)

    positions = mismatched = exact = 0
    first: list[int] = []
    for ref, got in zip(reference, answers):
        r, g = tokens(ref), tokens(got)
        n = max(len(r), len(g))
        differ = [j for j in range(n) if j >= len(r) or j >= len(g) or r[j] != g[j]]
        positions += n
        mismatched += len(differ)
        exact += not differ
        first.append(differ[0] if differ else n)
    metrics: dict[str, float] = {"exact_match": exact / len(reference),
                                 "first_divergence": sum(first) / len(first)}
    not_measured: dict[str, str] = {}
    if positions:
        metrics["token_mismatch"] = mismatched / positions
    else:
        not_measured["token_mismatch"] = "neither side generated any token"
    if scores is None:
        for m, (_, needs_logprobs) in QUALITY_METRICS.items():
            if needs_logprobs:
                not_measured[m] = why_unscored or "not scored"
        return metrics, not_measured
    agree = total = 0
    kl = 0.0
    for ref, positions_scored in zip(reference, scores):
        for j, position in enumerate(positions_scored):
            total += 1
            agree += _ranks_first(position, ref.tokens[j])
            kl += _kl(ref.top[j] if ref.top else [], position)
    if total:
        metrics["top1_agreement"] = agree / total
        metrics["kl_divergence"] = kl / total
    else:
        not_measured.update({m: "the reference answers have no tokens to score"
                             for m in ("top1_agreement", "kl_divergence")})
    return metrics, not_measured


def _kl(reference_top: list[list[float]], position: dict[int, float]) -> float:
    """KL(reference || config) over the reference's top-k tokens, both renormalised to that set; a
    token missing from the config's answer gets the config's lowest listed logprob (it ranks below
    every listed one)."""
    if not reference_top:
        return 0.0
    floor = min(position.values())
    ref = [lp for _, lp in reference_top]
    got = [position.get(int(t), floor) for t, _ in reference_top]
    ref_norm, got_norm = _logsumexp(ref), _logsumexp(got)
    return max(0.0, sum(math.exp(r - ref_norm) * ((r - ref_norm) - (g - got_norm))
                        for r, g in zip(ref, got)))


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))



def add_lm_eval(record: dict, scores: dict, task: ProbeTask) -> None:
    """lm-eval's scores into the quality record; a candidate's with its drop per task against the
    reference's scores, or the reason there is none."""
    if task.role == CANDIDATE and "tasks" in scores:
        reference = (task.reference or {}).get("lm_eval") or {}
        if "tasks" in reference:
            scores = {**scores, "drop": drops(reference, scores)}
        else:
            scores = {**scores, "error": "no reference scores: "
                      + reference.get("error", "the reference arm has not served")}
    record["lm_eval"] = scores


def compare_late(record: dict, answers: list[dict], reference: dict, tokenizer: Any) -> dict:
    """A probe that ran before the study had its reference (trials in parallel), compared with it
    once it exists: tokens and lm-eval scores; the logprob metrics would need the reference's
    tokens scored on this trial's server, which is gone, so they stay not measured."""
    metrics, not_measured = compare(
        [Answer(**a) for a in reference["answers"]], [Answer(**a) for a in answers], None,
        "probed before the study had its reference (trials in parallel)", tokenizer)
    late = {**record, "role": CANDIDATE, "reference_trial": reference["trial"], "metrics": metrics,
            "not_measured": not_measured}
    scores, ref_scores = record.get("lm_eval"), reference.get("lm_eval") or {}
    if scores and "tasks" in scores and "tasks" in ref_scores:
        late["lm_eval"] = {**scores, "drop": drops(ref_scores, scores)}
    return late
