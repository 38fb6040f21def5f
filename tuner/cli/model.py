"""`tune model tiny`: write a local Qwen3-architecture model (config and tokenizer, random weights
when asked) for real engine runs without downloads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from tuner.cli.common import App, console, fail

model_app = App(no_args_is_help=True, help="Generate local models for real engine runs.")


@model_app.command("tiny")
def model_tiny(
    path: Path = typer.Argument(..., help="Folder to create."),
    shape: str = typer.Option("tiny", help="tiny, or a published Qwen3 shape (config.json as on the hub, "
                              "vocabulary 151936): qwen3-0.6b, qwen3-8b, qwen3-14b, qwen3-32b, and the "
                              "-fp8 (block-scaled FP8) and -awq (AutoAWQ 4-bit) checkpoints of 8b, 14b, 32b."),
    weights: Optional[bool] = typer.Option(None, "--weights/--no-weights", help="Also save random weights "
                                           "(default: only for the tiny shape). vLLM and SGLang need none "
                                           "(--load-format dummy); transformers serve does."),
    device: str = typer.Option("cpu", help="Where to create the random weights (cuda with torch)."),
    fp8_variant: Optional[Path] = typer.Option(
        None, "--fp8-variant", help="Also write a torchao FP8 copy of the weights to this folder "
        "(needs torchao and an SM 8.9+ GPU; list it under model.variants as fp8)."),
) -> None:
    """Write a Qwen3-architecture config and a locally trained tokenizer (no downloads)."""
    from tuner import tiny_model
    from tuner.engines.model_config import published_shape, shape_names
    names = shape_names()
    if shape != "tiny" and shape not in names:
        fail(f"unknown shape {shape!r}; choose one of tiny, {', '.join(sorted(names))}")
    if weights is None:
        weights = shape == "tiny" or fp8_variant is not None
    if fp8_variant is not None and not weights:
        fail("--fp8-variant quantizes the random weights: leave out --no-weights")
    if fp8_variant is not None and (why := tiny_model.fp8_variant_missing()):
        fail(f"--fp8-variant: {why}")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        fail(f"--device {device!r} is not a device; use cpu, cuda or cuda:N (a GPU's index)")
    path = tiny_model.check_target(path)
    if fp8_variant is not None and (fp8_variant / "config.json").exists():
        fail(f"{fp8_variant} already holds a model (config.json); remove it first")
    config = (tiny_model.qwen3_config() if shape == "tiny"
              else tiny_model.with_local_tokenizer(published_shape(names[shape])))
    if weights and (why := tiny_model.random_weights_refusal(config, path)):
        fail(f"--shape {shape} --weights: {why}")
    out = tiny_model.build(path, config=config)
    if weights:
        tiny_model.save_random_weights(out, device=device)
    console.print(f"model written to {out}" + ("" if weights else " (no weights: serve it with "
                                                "--load-format dummy)"))
    if fp8_variant is not None:
        variant = tiny_model.save_fp8_variant(out, fp8_variant, device=device)
        console.print(f"FP8 (torchao) variant written to {variant}")


def register(app: typer.Typer) -> None:
    """Add ``tune model`` to the CLI."""
    app.add_typer(model_app, name="model")
