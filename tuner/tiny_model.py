"""A tiny Qwen3-architecture model built locally, so tests and the demo drive a real engine offline.

Nothing is downloaded: the tokenizer is a byte-level BPE trained on text that every Python install
carries (the standard library's own sources), and the model is only a config. Engines start it with
``--load-format dummy`` (random weights), which is all a serving benchmark needs.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sysconfig
import tempfile
from pathlib import Path

import psutil

from tuner.errors import InputError
from tuner.files import nearest_existing

VOCAB_SIZE = 8192
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Enough text for a stable 8k vocabulary while keeping training to a few seconds on 2 cores.
_TRAINING_TEXT_BYTES = 6_000_000


def qwen3_config(
    *,
    hidden_size: int = 256,
    intermediate_size: int = 512,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    head_dim: int = 64,
    max_position_embeddings: int = 4096,
) -> dict:
    """The HF config.json of a Qwen3 model; defaults give the tiny shape used on CPU."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "head_dim": head_dim,
        "max_position_embeddings": max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": num_hidden_layers,
        "initializer_range": 0.02,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }


def with_local_tokenizer(published: dict) -> dict:
    """A published config.json with the local tokenizer's special tokens (its vocabulary is far
    smaller than the model's, so the published ids would name tokens it never produces); the
    shapes, the vocabulary size, the embedding tying, the dtype and a quantized checkpoint's
    ``quantization_config`` stay as published, so a dummy-weight launch builds the same layers
    and kernels as the real checkpoint and a benchmark costs what the real model costs."""
    cfg = {**qwen3_config(), **published}
    cfg.update(bos_token_id=0, eos_token_id=2, pad_token_id=0, max_window_layers=cfg["num_hidden_layers"])
    return cfg


def parameter_count(cfg: dict) -> int:
    """Parameters of the Qwen3 config ``cfg`` (an untied output layer counted)."""
    n = sum(math.prod(shape) for shape in qwen3_tensor_shapes(cfg).values())
    return n if cfg.get("tie_word_embeddings", True) else n + cfg["vocab_size"] * cfg["hidden_size"]


def random_weights_refusal(cfg: dict, out_dir: Path) -> str | None:
    """Why random weights for ``cfg`` cannot be written here, or None. A published shape's weights
    are built whole in memory before they are saved (float32 without torch), so a 14B shape needs
    about 56 GB: refuse before the process is killed for memory, naming the size and the way out."""
    if "quantization_config" in cfg:
        return ("random weights of a quantized checkpoint cannot be written; vLLM and SGLang load "
                "its shape with --load-format dummy: leave out --weights")
    try:
        import torch  # noqa: F401
        per = 2
    except ImportError:
        per = 4
    size = parameter_count(cfg) * per
    memory = psutil.virtual_memory().available
    out_dir = out_dir.expanduser().resolve()
    probe = next(p for p in (out_dir, *out_dir.parents) if p.exists())
    disk = shutil.disk_usage(probe).free
    if size > memory // 2 or size > disk:
        return (f"random weights for this shape are {size / 2**30:.1f} GiB "
                f"({memory / 2**30:.1f} GiB of memory available, {disk / 2**30:.1f} GiB free on "
                f"{probe}); vLLM and SGLang need none (--load-format dummy): use --no-weights")
    return None


def save_random_weights(out_dir: Path, *, device: str = "cuda", dtype: str = "bfloat16") -> None:
    """Random weights for a built model folder, so engines that cannot use ``--load-format dummy``
    (transformers serve) load a model of the real size. With torch (the GPU machine) the model is
    built on ``device`` in seconds even at 8B parameters; without it, numpy writes float32 weights,
    which is fine for the tiny shape."""
    try:
        import torch
    except ImportError:
        _save_random_weights_numpy(out_dir)
        return
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(out_dir)
    torch_dtype = getattr(torch, dtype)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.save_pretrained(out_dir, safe_serialization=True)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def fp8_variant_missing() -> str | None:
    """Why this machine cannot write an FP8 variant (a package is missing), or None."""
    missing = [m for m in ("torch", "torchao", "transformers") if importlib.util.find_spec(m) is None]
    return (f"an FP8 variant needs {', '.join(missing)} (pip install torchao for the FP8 "
            "quantizer)") if missing else None


def save_fp8_variant(src: Path, dst: Path, *, device: str = "cuda") -> Path:
    """A pre-quantized FP8 copy of a built model with weights, for ``model.variants: {fp8: DST}``.

    torchao's ``Float8DynamicActivationFloat8WeightConfig`` (FP8 weights, FP8 activations scaled
    per call) through transformers' ``TorchAoConfig``: the FP8 that runs offline on an H200
    (docs/findings/h200-quality-guardrail.md; transformers' own fine-grained FP8 fetches its kernels
    from the Hub at run time through the ``kernels`` package). transformers serve loads the folder
    like any checkpoint. Needs torch, transformers and torchao; FP8 matmuls need a GPU of compute
    capability 8.9 or newer.
    """
    try:
        import torch
        from torchao.quantization import Float8DynamicActivationFloat8WeightConfig
        from transformers import AutoModelForCausalLM, TorchAoConfig
    except ImportError as exc:
        raise InputError(f"{fp8_variant_missing() or 'an FP8 variant cannot be written'} "
                         f"({exc})") from None
    dst = dst.expanduser().resolve()
    if (dst / "config.json").exists():
        raise InputError(f"{dst} already holds a model (config.json); remove it first")
    quantization = TorchAoConfig(Float8DynamicActivationFloat8WeightConfig())
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16, device_map=device,
                                                 quantization_config=quantization)
    tmp = dst.with_name(dst.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "chat_template.jinja"):
        if (src / name).exists():
            (tmp / name).write_bytes((src / name).read_bytes())
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    tmp.rename(dst)
    return dst


def qwen3_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of Qwen3ForCausalLM (tied embeddings: no lm_head)."""
    h, inter, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], h), "model.norm.weight": (h,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        })
    return shapes


def _save_random_weights_numpy(out_dir: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    cfg = json.loads((out_dir / "config.json").read_text())
    rng = np.random.default_rng(0)
    tensors = {name: (np.ones(shape, np.float32) if len(shape) == 1
                      else rng.normal(0, cfg["initializer_range"], shape).astype(np.float32))
               for name, shape in qwen3_tensor_shapes(cfg).items()}
    # float32 on disk; config.json keeps bfloat16, which engines load the weights as.
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def _training_files() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files, total = [], 0
    for path in sorted(stdlib.glob("*.py")):
        files.append(path)
        total += path.stat().st_size
        if total >= _TRAINING_TEXT_BYTES:
            break
    if not files:
        raise RuntimeError(f"no Python sources found under {stdlib} to train the tokenizer on")
    return files


def train_tokenizer(out_dir: Path) -> None:
    """Train and save a fast tokenizer readable by transformers 4.x and 5.x."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(p) for p in _training_files()], trainer)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {
        # transformers 5 would write "TokenizersBackend", which 4.x cannot read.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 4096,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {
                "content": t, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True,
            }
            for t in SPECIAL_TOKENS
        },
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2))
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE)


def check_target(out_dir: Path) -> Path:
    """``out_dir`` resolved, if a model can be written there: it is absent or an empty folder, and
    the folder above it takes new entries. Otherwise InputError naming the path and what is wrong."""
    out_dir = out_dir.expanduser().resolve()
    base = out_dir.parent
    try:
        base = nearest_existing(out_dir.parent)
        if out_dir.is_dir():
            if (out_dir / "config.json").exists():
                raise InputError(f"{out_dir} already holds a model (config.json); remove it first")
            if any(out_dir.iterdir()):
                raise InputError(f"{out_dir} is a folder that is not empty; name a new or empty one")
        elif out_dir.exists():
            raise InputError(f"{out_dir} is a file, not a folder")
        if not base.is_dir():
            raise InputError(f"{out_dir}: {base} is a file, not a folder")
        # Creating a folder is the one test that covers permissions, read-only mounts and /proc.
        os.rmdir(tempfile.mkdtemp(prefix=".tune-probe-", dir=base))
    except OSError as exc:
        raise InputError(f"{out_dir}: cannot create a folder in {base} ({exc.strerror or exc})") from None
    return out_dir


def build(out_dir: Path, *, config: dict | None = None) -> Path:
    """Write config, generation config and tokenizer into ``out_dir`` atomically.

    The folder is assembled beside the target and renamed into place, so an interrupted or failed
    build never leaves a half-written model that a later run would take for a finished one.
    """
    out_dir = check_target(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        cfg = config or qwen3_config()
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        (tmp / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
             "pad_token_id": cfg["pad_token_id"], "do_sample": False}, indent=2))
        train_tokenizer(tmp)
        if out_dir.exists():
            out_dir.rmdir()  # the empty folder check_target let through
        tmp.rename(out_dir)
    except OSError as exc:
        raise InputError(f"{out_dir}: cannot write the model there ({exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # after the rename, nothing is left to remove
    return out_dir


def is_built(path: Path) -> bool:
    return all((path / f).exists() for f in ("config.json", "tokenizer.json", "tokenizer_config.json"))
