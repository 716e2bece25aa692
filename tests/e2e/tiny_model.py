"""Write a tiny random Qwen2 model and its tokenizer into a folder, for the end-to-end run.

Runs in the e2e venv (transformers, tokenizers, torch): `python tiny_model.py OUT [OUT ...]`.
No download: the tokenizer is a byte-level BPE trained here on a few sentences, the weights are
random, seeded by the folder's position: two folders hold models of the same shapes and tokenizer
and different weights (the negative control). initializer_range 0.5 keeps greedy output from
collapsing to one repeated token, so outputs differ from prompt to prompt and a wrong KV cache
shows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CORPUS = [
    "Hello, how are you? I am fine, thank you.",
    "The quick brown fox jumps over the lazy dog.",
    "Prefill computes the KV cache of the prompt; decode generates the answer token by token.",
    "Mooncake and NIXL move the KV cache from the prefill engine to the decode engine.",
    "Kubernetes schedules pods on nodes; Volcano schedules them as a gang.",
    "Tell me a story about a cat, a dog and a mouse who lived in a small house.",
    "What is the capital of France? Paris is the capital of France.",
    "One two three four five six seven eight nine ten eleven twelve.",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def write_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return len(fast)


def write_model(out: Path, vocab: int, seed: int, kv_heads: int = 0) -> None:
    """kv_heads 0: 4 attention heads over 2 KV heads of 32 (hidden 128); N: N heads, N KV heads
    of 32 (hidden 32 x N), for a connector that needs the KV head count to be the block size."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    heads, kv = (kv_heads, kv_heads) if kv_heads else (4, 2)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=32 * heads,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=1024,
        initializer_range=0.5,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
        eos_token_id=2,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # vLLM reads generation_config.json; greedy decoding is set per request.
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, nargs="+", help="folders to write models into (created); seeds 0, 1, ...")
    parser.add_argument("--kv-heads", type=int, default=0, help="as many attention and KV heads (0: 4 over 2)")
    args = parser.parse_args()
    for seed, out in enumerate(args.out):
        out.mkdir(parents=True, exist_ok=True)
        vocab = write_tokenizer(out)
        write_model(out, vocab, seed, args.kv_heads)


if __name__ == "__main__":
    main()
