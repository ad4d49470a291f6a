"""`lmlab generate`: continue a prompt, printing text as it arrives (or one JSON object).

The sampling flags defined here are shared with `lmlab chat`: `sampling_config` maps them to a
`GenerationConfig`, which checks every value.
"""

import argparse
import json
import sys
from dataclasses import replace

from lmlab.cli.common.adapter_arg import add_adapter_arg, load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg, loaded_mode, say_gguf_kernels
from lmlab.errors import LmlabError

DRAFT_TOKENS = 5  # tokens a speculative round drafts unless --draft-tokens says otherwise


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="continue a prompt with a model",
        description="Continue PROMPT (plain text, no special tokens unless --add-bos). Samples at temperature "
                    "1.0 unless --greedy, --temperature or --beams say otherwise; stops at the tokenizer's "
                    "end-of-text tokens, a --stop string, or after --max-new-tokens.",
        epilog="examples:\n"
               "  lmlab generate --model runs/quickstart --prompt 'Zini' --max-new-tokens 40 --seed 1\n"
               "  lmlab generate --model smollm2-135m-instruct --prompt 'The capital of France is' --greedy --json\n"
               "  lmlab generate --model smollm2-135m-instruct --prompt 'Once upon a time' --beams 4",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model directory, lmlab run directory, .gguf file or zoo name")
    add_dtype_arg(p)
    add_adapter_arg(p)
    add_compile_arg(p)
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument("--add-bos", action="store_true", help="put the tokenizer's bos token before the prompt")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (text, token_ids, finish_reason, stop, prompt_tokens) at the end")
    decoding = add_sampling_args(p, max_new_tokens=64)
    decoding.add_argument("--beams", type=int, default=1, metavar="K",
                          help="beam search with K beams (deterministic, prints at the end; default 1)")
    decoding.add_argument("--length-penalty", type=float, default=1.0, metavar="P",
                          help="beam score = sum logprob / length**P, P in [-4, 4]; > 0 favours longer outputs "
                               "(default 1.0)")
    p.set_defaults(run=run)


def add_compile_arg(p: argparse.ArgumentParser) -> None:
    """`--compile`, shared with `lmlab chat`: run the decoding steps through `compiled_decoder`."""
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the one-token decoding step (greedy and sampling, not beams): ~1.3x faster "
                        "for small models on the CPU (SmolLM2-135M int4: 84 against 63 tokens/s), after a first "
                        "compile of ~45 s (~8 s once inductor's cache in $LMLAB_CACHE/inductor, default "
                        "~/.cache/lmlab/inductor, is warm)")


def add_sampling_args(p: argparse.ArgumentParser, max_new_tokens: int):
    """The decoding flags `generate` and `chat` share; returns their argument group."""
    g = p.add_argument_group("decoding")
    g.add_argument("--max-new-tokens", type=int, default=max_new_tokens, metavar="N",
                   help=f"stop after N new tokens (default {max_new_tokens})")
    how = g.add_mutually_exclusive_group()
    how.add_argument("--greedy", action="store_true", help="always take the most likely token")
    how.add_argument("--temperature", type=float, metavar="T",
                     help="sampling temperature: 0 = greedy, else at least 0.01 (default 1.0)")
    g.add_argument("--top-k", type=int, metavar="K", help="sample among the K most likely tokens only")
    g.add_argument("--top-p", type=float, metavar="P",
                   help="sample among the smallest set of tokens whose probability reaches P, in (0, 1]")
    g.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R",
                   help="R > 1 discourages tokens already in the prompt or output, R < 1 favours them; in "
                        "[0.01, 100] (default 1.0 = off)")
    g.add_argument("--stop", nargs="+", action="extend", default=[], metavar="STR",
                   help="stop when the text contains STR (not printed); \\n and \\t mean newline and tab")
    g.add_argument("--seed", type=int, metavar="S",
                   help="random seed, for reproducible sampling: any integer in [-2**63, 2**64 - 1]")
    add_speculation_args(g, "")
    return g


def add_speculation_args(p, when: str) -> None:
    """--speculate and --draft-tokens, shared with `lmlab serve`, which speculates `when` (e.g. "while one
    request runs, ")."""
    p.add_argument("--speculate", metavar="lookup|MODEL",
                   help=f"speculative decoding: {when}draft tokens by prompt lookup (copied from the prompt and reply: "
                        "fast where the reply quotes its input) or with MODEL, a smaller decoder of the same "
                        "tokenizer, and check them in one pass of --model; greedy gives the same tokens, sampling "
                        "the same distribution")
    p.add_argument("--draft-tokens", type=int, metavar="K",
                   help=f"with --speculate, draft up to K tokens a round (default {DRAFT_TOKENS})")


def sampling_config(args, extra_stops: tuple[str, ...] = ()):
    """The `GenerationConfig` the flags ask for, checked before any model is loaded (a bad value is a
    one-line LmlabError). The caller adds the tokenizer's stop ids with `dataclasses.replace`."""
    from lmlab.generation.config import GenerationConfig

    beams = getattr(args, "beams", 1)  # chat has no beam flags
    temperature = args.temperature
    if temperature is None:
        temperature = 0.0 if args.greedy or beams > 1 else 1.0
    stops = tuple(s.replace("\\n", "\n").replace("\\t", "\t") for s in args.stop) + extra_stops
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens, temperature=temperature, top_k=args.top_k, top_p=args.top_p,
        repetition_penalty=args.repetition_penalty, num_beams=beams,
        length_penalty=getattr(args, "length_penalty", 1.0),
        stop_strings=stops, seed=args.seed, draft_tokens=draft_tokens(args))


def draft_tokens(args) -> int:
    """The tokens a step that --speculate and --draft-tokens ask for (0: no speculation); one line when out of range."""
    from lmlab.generation.config import MAX_DRAFT

    if args.speculate is None:
        if args.draft_tokens is not None:
            raise LmlabError("--draft-tokens sets how many tokens --speculate drafts; add --speculate lookup or MODEL")
        return 0
    k = DRAFT_TOKENS if args.draft_tokens is None else args.draft_tokens
    if not 1 <= k <= MAX_DRAFT:
        raise LmlabError(f"--draft-tokens {k} must be in 1..{MAX_DRAFT}")
    return k


def load_draft(args, model, tokenizer):
    """The draft model `--speculate MODEL` names (as --dtype), None for prompt lookup or no speculation; one line
    when its tokenizer is not the model's."""
    if args.speculate is None or args.speculate == "lookup":
        return None
    from lmlab.generation.draft_model import check_draft_model
    from lmlab.models.load import load

    draft, draft_tokenizer = load(args.speculate, args.dtype, activations=args.activations)
    if draft_tokenizer.backend.get_vocab() != tokenizer.backend.get_vocab():
        raise LmlabError(f"--speculate {args.speculate} has another tokenizer than --model {args.model}; a draft "
                         "model must share the model's vocabulary (or use --speculate lookup)")
    check_draft_model(model, draft)
    return draft


def say_acceptance(acceptance) -> None:
    """One stderr line of an `Acceptance`: how many drafted tokens the model kept, and tokens per pass of the model."""
    print(f"lmlab: speculation kept {acceptance.accepted} of {acceptance.drafted} drafted tokens "
          f"({acceptance.rate:.0%}); {acceptance.tokens} tokens in {acceptance.passes + 1} passes of the model",
          file=sys.stderr)


def run(args) -> None:
    from lmlab.generation.batch import check_token_ids
    from lmlab.generation.compiled import compiled_decoder
    from lmlab.generation.fused import fused_step_refusal
    from lmlab.generation.generate import generate_batch, stream_text
    from lmlab.generation.speculative import Acceptance

    config = sampling_config(args)
    model, tokenizer = load_decoder(args)
    say_gguf_kernels(args.model, args.dtype, model)
    mode = loaded_mode(model)
    if args.compile:
        model = compiled_decoder(model)
    if mode and (reason := fused_step_refusal(model)):
        print(f"lmlab: this model decodes through its modules, not the fused {mode} step: {reason}",
              file=sys.stderr)
    config = replace(config, eos_id=tokenizer.stop_ids)
    draft, acceptance = load_draft(args, model, tokenizer), Acceptance()
    prompt_ids = tokenizer.encode(args.prompt, add_bos=args.add_bos)
    check_token_ids(model, [prompt_ids])  # before the prompt is printed
    if args.json or config.num_beams > 1:
        result = generate_batch(model, [prompt_ids], config, tokenizer, acceptance, draft)[0]
        if args.json:
            speculation = {"speculation": {"drafted": acceptance.drafted, "accepted": acceptance.accepted,
                                           "acceptance_rate": acceptance.rate, "passes": acceptance.passes + 1}}
            print(json.dumps({"text": result.text, "token_ids": result.token_ids,
                              "finish_reason": result.finish_reason, "stop": result.stop,
                              "prompt_tokens": len(prompt_ids), **(speculation if config.draft_tokens else {})},
                             ensure_ascii=False))
        else:
            print(args.prompt + result.text)
        return
    sys.stdout.write(args.prompt)
    sys.stdout.flush()
    for piece in stream_text(model, tokenizer, prompt_ids, config, acceptance, draft):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    if config.draft_tokens:
        say_acceptance(acceptance)
