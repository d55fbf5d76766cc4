#!/usr/bin/env python3
"""mlx-lm as the peer of `rlx-host generate`: its own model code and its own
generation loop, on a checkpoint directory.

    python3 scripts/mlx_lm_peer.py tokens DIR --prompt-ids 1,2,3 --max-tokens 32
    python3 scripts/mlx_lm_peer.py bench DIR --prompt-tokens 128 --generation-tokens 128 [--trials 5]

Both print one JSON object.

The model is loaded by mlx-lm's `mlx_lm.utils.load_model` (config.json, the
safetensors, `nn.quantize` for a quantized checkpoint) and tokens come from
its `mlx_lm.generate.generate_step` (greedy: its default sampler; the
prompt's KV cache filled first, then one step per token, step n+1 handed to
MLX with `mx.async_eval` before token n is read). mlx-lm's package imports
`transformers` and `huggingface_hub` for tokenizers and the model hub, which
neither function uses: where they are not installed, empty modules stand in
for them, so the code that runs is mlx-lm's own, unchanged.

`tokens`: the greedy tokens after the prompt and, for each, the log
probabilities over the vocabulary (`logprobs`, mlx-lm's `logits -
logsumexp(logits)`), for parity tests. `--float32` casts the model's float
parameters to float32 first (`Module.set_dtype`): a bf16 checkpoint then
computes as rlx-lm computes it, in f32 on its widened weights (mlx-lm
would otherwise compute in bf16).

`bench`: timed as `mlx_lm.benchmark` does (random prompt tokens drawn with
`mx.random.seed(0)` and `mx.random.randint(0, vocab, (1, P))`, or the
`--prompt-ids` given, greedy,
end-of-sequence ignored, one warm-up, then `--trials` trials), each trial
reporting `prefill_ms` (from the call to the first token read back, the
prompt's prefill and the first token's step) and `decode_ms_per_token`
(from the first token to the last, per token after the first): the
definitions `rlx-host generate` reports. `peak_bytes` is MLX's peak memory.
"""

import argparse
import importlib
import json
import sys
import time
import types
from pathlib import Path


def import_mlx_lm():
    """mlx_lm's `generate` and `utils` modules, standing in empty
    `transformers` / `huggingface_hub` modules where those are missing."""
    for name in ("transformers", "huggingface_hub"):
        try:
            importlib.import_module(name)
        except ImportError:
            stand_in(name)
    return importlib.import_module("mlx_lm.generate"), importlib.import_module("mlx_lm.utils")


def stand_in(name):
    class Unused:
        """What mlx-lm names from the missing package at import time."""

        @classmethod
        def register(cls, *args, **kwargs):
            pass

    module = types.ModuleType(name)
    if name == "transformers":
        for attr in ("AutoTokenizer", "PreTrainedTokenizer", "PreTrainedTokenizerFast", "AutoProcessor"):
            setattr(module, attr, Unused)
        base = types.ModuleType("transformers.tokenization_utils_base")
        base.PreTrainedTokenizerBase = Unused
        sys.modules[base.__name__] = base
    else:
        module.snapshot_download = None
    sys.modules[name] = module


def load(path):
    _, utils = import_mlx_lm()
    model, config = utils.load_model(Path(path))
    return model, config


def greedy(model, prompt_ids, max_tokens, with_logprobs):
    import mlx.core as mx

    generate, _ = import_mlx_lm()
    prompt = mx.array(prompt_ids)
    tokens, logprobs, stamps = [], [], []
    start = time.perf_counter()
    for token, lp in generate.generate_step(prompt, model, max_tokens=max_tokens):
        stamps.append(time.perf_counter())
        tokens.append(int(token))
        if with_logprobs:
            logprobs.append(lp.astype(mx.float32).tolist())
        if len(tokens) == max_tokens:
            break
    return tokens, logprobs, start, stamps


def cmd_tokens(args):
    model, _ = load(args.model)
    if args.float32:
        import mlx.core as mx

        model.set_dtype(mx.float32)
    ids = [int(t) for t in args.prompt_ids.split(",") if t.strip()]
    tokens, logprobs, _, _ = greedy(model, ids, args.max_tokens, True)
    print(json.dumps({"tokens": tokens, "logprobs": logprobs}))


def cmd_bench(args):
    import mlx.core as mx

    model, config = load(args.model)
    if args.prompt_ids:
        prompt = [int(t) for t in args.prompt_ids.split(",") if t.strip()]
    else:
        vocab = config.get("vocab_size") or config["text_config"]["vocab_size"]
        mx.random.seed(0)
        prompt = mx.random.randint(0, vocab, (1, args.prompt_tokens)).tolist()[0]
    trials = []
    for i in range(args.trials + 1):
        mx.reset_peak_memory()
        tokens, _, start, stamps = greedy(model, prompt, args.generation_tokens, False)
        prefill_ms = (stamps[0] - start) * 1e3
        decode = (stamps[-1] - stamps[0]) * 1e3 / max(1, len(stamps) - 1)
        if i == 0:
            continue  # the warm-up
        trials.append(
            {
                "prefill_ms": prefill_ms,
                "decode_ms_per_token": decode,
                "tokens": len(tokens),
                "peak_bytes": mx.get_peak_memory(),
            }
        )
    print(
        json.dumps(
            {
                "peer": "mlx-lm",
                "mlx_lm": importlib.import_module("mlx_lm._version").__version__,
                "mlx": mx.__version__,
                "device": str(mx.default_device()),
                "prompt_tokens": len(prompt),
                "generation_tokens": args.generation_tokens,
                "trials": trials,
                "tokens": tokens,
            }
        )
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens")
    t.add_argument("model")
    t.add_argument("--prompt-ids", required=True)
    t.add_argument("--max-tokens", type=int, default=32)
    t.add_argument(
        "--float32",
        action="store_true",
        help="compute in float32 (a bf16 checkpoint's weights widened, as rlx-lm computes)",
    )
    b = sub.add_parser("bench")
    b.add_argument("model")
    b.add_argument("--prompt-tokens", type=int, default=128)
    b.add_argument("--prompt-ids", help="the prompt's token ids, comma-separated (else random)")
    b.add_argument("--generation-tokens", type=int, default=128)
    b.add_argument("--trials", type=int, default=5)
    args = p.parse_args()
    {"tokens": cmd_tokens, "bench": cmd_bench}[args.cmd](args)


if __name__ == "__main__":
    main()
