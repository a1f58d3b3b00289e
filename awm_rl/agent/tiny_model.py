"""A tiny Qwen3 model and tokenizer built locally (no downloads) for CPU tests and demos.

No generative weights can be downloaded here, so tests use a randomly initialised Qwen3 of a few
hundred thousand parameters with a byte-level BPE tokenizer trained on the spot with
`tokenizers`. The tokenizer has Qwen's special tokens and TRL's Qwen3 chat template (the exact
file TRL recognises, so GRPOTrainer's tool-call parsing works). Built once per cache folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>",
    "</tool_response>", "<think>", "</think>",
]
MODEL_FOLDER = "tiny-qwen3"


def qwen3_chat_template() -> str:
    """TRL's shipped Qwen3 template (`trl/chat_templates/qwen3.jinja`)."""
    import trl

    path = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    if not path.is_file():
        raise FileNotFoundError(f"TRL's Qwen3 chat template is missing: {path}")
    return path.read_text(encoding="utf-8")


def _training_corpus() -> list[str]:
    """Text resembling rollouts: the template, tool schemas, tool calls, JSON answers, English."""
    from awm_rl.agent.qwen3 import DEFAULT_SYSTEM_PROMPT, META_TOOLS, call_tool_turn, list_tools_turn, tools_block

    texts = [qwen3_chat_template(), DEFAULT_SYSTEM_PROMPT, tools_block(), json.dumps(META_TOOLS), list_tools_turn()]
    for i in range(50):
        texts.append(call_tool_turn(f"I need item {i}; the task names it.", f"get_item_{i % 7}",
                                    {"item_id": i, "name": f"thing {i}", "quantity": i % 5, "active": i % 2 == 0}))
        texts.append(json.dumps({"id": i, "status": "ok", "items": [{"id": i, "price": i * 1.5}], "detail": None}))
    texts.append("The quick brown fox jumps over the lazy dog. 0123456789 abcdefghijklmnopqrstuvwxyz "
                 "ABCDEFGHIJKLMNOPQRSTUVWXYZ {}[]()<>:;,.'\"!?-_/\\|@#$%^&*+=~`")
    return texts


def build_tokenizer(vocab_size: int = 1024, *, extra_texts: Sequence[str] = (), merge_across_words: bool = False) -> Any:
    """A byte-level BPE tokenizer with Qwen special tokens and the Qwen3 chat template.

    `extra_texts` join the training corpus (e.g. the tool listings a run will show); with
    `merge_across_words`, merges may span spaces and punctuation, so repeated JSON such as tool
    schemas becomes a few tokens and prompts get several times shorter (CPU runs on long listings).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not merge_across_words)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    raw.train_from_iterator(_training_corpus() + list(extra_texts), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None, unk_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    tokenizer.chat_template = qwen3_chat_template()
    return tokenizer


def tiny_model_folder(cache_dir: Path | str | None = None, *, vocab_size: int = 1024, extra_texts: Sequence[str] = (),
                      merge_across_words: bool = False) -> Path:
    """Where `build_tiny_qwen3` keeps the model built with these arguments: `cache_dir/tiny-qwen3`, or, for a
    tokenizer fitted to other texts, `tiny-qwen3-<digest of them>` (each set of texts its own tokenizer)."""
    if cache_dir is None:
        from awm_resources.store import default_home

        cache_dir = default_home() / "models"
    if not extra_texts and not merge_across_words and vocab_size == 1024:
        return Path(cache_dir) / MODEL_FOLDER
    digest = hashlib.sha256(json.dumps([vocab_size, merge_across_words, list(extra_texts)]).encode()).hexdigest()
    return Path(cache_dir) / f"{MODEL_FOLDER}-{digest[:12]}"


def build_tiny_qwen3(cache_dir: Path | str | None = None, *, seed: int = 0, hidden_size: int = 64,
                     layers: int = 2, vocab_size: int = 1024, extra_texts: Sequence[str] = (),
                     merge_across_words: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer): loaded from `tiny_model_folder(...)` when present, else built and saved there.

    `cache_dir` defaults to `$AWM_HOME/models`; `extra_texts` and `merge_across_words` go to `build_tokenizer`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config

    folder = tiny_model_folder(cache_dir, vocab_size=vocab_size, extra_texts=extra_texts,
                               merge_across_words=merge_across_words)
    if (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForCausalLM.from_pretrained(str(folder))
        model.eval()
        return model, tokenizer
    tokenizer = build_tokenizer(vocab_size, extra_texts=extra_texts, merge_across_words=merge_across_words)
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden_size // 4,
        max_position_embeddings=32_768, tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = AutoModelForCausalLM.from_config(config)
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return model, tokenizer
