"""`lmlab inspect attention`: the attention maps of one text, per layer and head, with each head's
entropy and mean attention distance; `--png` draws one layer's heads as a grid of heatmaps.

Decoders and encoders show their self-attention. An encoder-decoder reads --text as the source and
shows three kinds of map: the encoder's self-attention, the decoder's causal self-attention and the
decoder's cross-attention over the source. The decoder input is the decoder start token followed by
--target's tokens, or, without --target, by the model's own greedy output (what it would write).
"""

import json
import math

from lmlab.errors import LmlabError
from lmlab.io.outputs import check_file_output

MAX_TOKENS = 512  # each head's map is T x T numbers in the JSON
GRID_PIXELS = 2400  # the PNG's heads together are about this wide at most (cells shrink for long texts)
GREEDY_TOKENS = 32  # an encoder-decoder without --target writes at most this many tokens
KINDS = {"attentions": "self-attention", "decoder_attentions": "decoder self-attention",
         "cross_attentions": "cross-attention"}
PNG_MAPS = {"encoder": "attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("attention", help="attention maps of one text: per layer and head, with each head's "
                                                "entropy and mean attention distance")
    p.add_argument("--model", required=True, help="zoo name, .gguf file, model or run directory (decoder, encoder "
                                                  "or encoder-decoder)")
    p.add_argument("--text", required=True, help="the text to read (an encoder-decoder's source)")
    p.add_argument("--target", help="encoder-decoders: the decoder's input after its start token (default: the "
                                    f"model's greedy output, at most {GREEDY_TOKENS} tokens)")
    p.add_argument("--layer", type=int, help="only this layer, 0-based (the PNG's default: the last layer)")
    p.add_argument("--head", type=int, help="only this head, 0-based (default: every head)")
    p.add_argument("--png", help="draw the layer's heads (or the one --head) as heatmaps into this PNG")
    p.add_argument("--png-maps", choices=sorted(PNG_MAPS), default="cross",
                   help="encoder-decoders: which maps the PNG draws (default: cross)")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"tokens": [...], "attentions": {"<layer>": [heads][query][key]}, '
                        '"head_indices": {"attentions": [...]}, "summary": {"attentions": {"<layer>": {"entropy": '
                        '[...], "distance": [...]}}}}, plus "target_tokens", "decoder_attentions" and '
                        '"cross_attentions" for encoder-decoders')
    p.set_defaults(run=run_attention)


def run_attention(args) -> None:
    from lmlab.inspect.attention import attention_maps
    from lmlab.inspect.subject import load_subject

    if args.png:
        check_file_output(args.png, "--png")
    subject = load_subject(args.model)
    if args.target is not None and subject.kind != "encoder-decoder":
        raise LmlabError(f"--target is the decoder input of an encoder-decoder and {args.model} is not one; "
                         "drop --target")
    ids, tokens = _text_tokens(subject, args.text)
    target_ids, target_tokens = _decoder_input(subject, ids, args.target)
    views = _views(attention_maps(subject.model, ids, target_ids), tokens, target_tokens)
    picked = {key: _selection(maps, args.layer, args.head) for key, (maps, _, _) in views.items()}
    if args.json:
        print(json.dumps(_as_json(views, picked, tokens, target_tokens)))
    else:
        _print_table(args.model, views, picked, tokens, target_tokens)
    if args.png:
        _save_png(args, views, picked)


def _text_tokens(subject, text: str) -> tuple:  # (a Subject, text) -> (ids (1, T), token strings)
    """--text as ids (1, T) and token strings, at most MAX_TOKENS and what the model (or its encoder) reads."""
    ids, tokens = subject.tokens(text)
    if not tokens:
        raise LmlabError("--text gives no tokens; give some text")
    config = subject.model.config
    limit = min(MAX_TOKENS, getattr(config, "context_length", None) or config.max_source_length)
    if len(tokens) > limit:
        raise LmlabError(f"--text has {len(tokens)} tokens; attention maps are drawn for at most {limit}, "
                         "shorten it")
    return ids, tokens


def _decoder_input(subject, ids, target: str | None):  # a Subject, ids (1, T)
    """(decoder input ids (1, T), their tokens) of an encoder-decoder, else (None, None)."""
    import torch

    from lmlab.generation.config import GenerationConfig
    from lmlab.generation.encoder_decoder import generate_encoder_decoder

    if subject.kind != "encoder-decoder":
        return None, None
    model, tokenizer = subject.model, subject.tokenizer
    if target is None:
        room = min(GREEDY_TOKENS, model.config.max_target_length - 1)  # the start token takes one place
        written = generate_encoder_decoder(model, ids, None, GenerationConfig(max_new_tokens=room))[0]
    else:
        written = tokenizer.encode(target).ids
    target_ids = [model.config.decoder_start_id] + written
    limit = min(MAX_TOKENS, model.config.max_target_length)
    if len(target_ids) > limit:
        raise LmlabError(f"--target has {len(target_ids)} tokens with the start token; the decoder reads at most "
                         f"{limit}, shorten it")
    return torch.tensor([target_ids], device=ids.device), [tokenizer.id_to_token(i) for i in target_ids]


def _views(maps, tokens: list[str], target_tokens: list[str] | None) -> dict:
    """JSON key -> (per-layer maps (H, T, S), query tokens, key tokens), for each kind of map the model has."""
    views = {"attentions": (maps.self_maps, tokens, tokens)}
    if maps.decoder_maps is not None:
        views["decoder_attentions"] = (maps.decoder_maps, target_tokens, target_tokens)
        views["cross_attentions"] = (maps.cross_maps, target_tokens, tokens)
    return views


def _selection(maps: list, layer: int | None, head: int | None) -> tuple[list[int], list[int]]:
    """The layers and heads of `maps` (one (H, T, S) per layer) that --layer and --head pick (default: all)."""
    n_layers, n_heads = len(maps), maps[0].size(0)
    if layer is not None and not 0 <= layer < n_layers:
        raise LmlabError(f"--layer {layer} is out of range: the model has layers 0..{n_layers - 1}")
    if head is not None and not 0 <= head < n_heads:
        raise LmlabError(f"--head {head} is out of range: the model has heads 0..{n_heads - 1}")
    return ([layer] if layer is not None else list(range(n_layers)),
            [head] if head is not None else list(range(n_heads)))


def _head_summary(key: str, attention) -> dict[str, list[float]]:
    """Entropy per head, and mean distance for self-attention (source and target positions have none)."""
    from lmlab.inspect.attention import head_distance, head_entropy

    summary = {"entropy": head_entropy(attention).tolist()}
    if key != "cross_attentions":
        summary["distance"] = head_distance(attention).tolist()
    return summary


def _as_json(views: dict, picked: dict, tokens, target_tokens) -> dict:
    """The maps of the picked layers and heads, each layer's heads in "head_indices" order, and their summaries."""
    result = {"tokens": tokens}
    if target_tokens is not None:
        result["target_tokens"] = target_tokens
    result["head_indices"], result["summary"] = {}, {}
    for key, (maps, _, _) in views.items():
        layers, heads = picked[key]
        result[key] = {str(i): maps[i][heads].tolist() for i in layers}
        result["head_indices"][key] = heads
        result["summary"][key] = {str(i): _head_summary(key, maps[i][heads]) for i in layers}
    return result


def _print_table(model: str, views: dict, picked: dict, tokens, target_tokens) -> None:
    from lmlab.figures import axis_label

    print(f"{model}: {len(tokens)} tokens: {' '.join(axis_label(t) for t in tokens)}")
    if target_tokens is not None:
        print(f"decoder input: {len(target_tokens)} tokens: {' '.join(axis_label(t) for t in target_tokens)}")
    for key, (maps, _, _) in views.items():
        layers, heads = picked[key]
        distance = key != "cross_attentions"
        print(f"\n{KINDS[key]}: entropy (nats){' / mean distance (tokens)' if distance else ''} per head")
        width = 11 if distance else 6
        print("layer " + "".join(f"{f'head {h}':>{width}}" for h in heads))
        for i in layers:
            summary = _head_summary(key, maps[i][heads])
            cells = [f"{e:.2f}/{d:.2f}" for e, d in zip(summary["entropy"], summary["distance"])] if distance \
                else [f"{e:.2f}" for e in summary["entropy"]]
            print(f"{i:>5} " + "".join(f"{c:>{width}}" for c in cells))


def _save_png(args, views: dict, picked: dict) -> None:
    """One layer's picked heads (default: the last layer) of the maps --png-maps names, as a grid of heatmaps."""
    from lmlab.figures import axis_label, heatmap_grid, heatmap_image, write_png

    key = PNG_MAPS[args.png_maps] if "cross_attentions" in views else "attentions"
    maps, queries, keys = views[key]
    layer, heads = picked[key][0][-1], picked[key][1]
    rows, cols = [axis_label(t) for t in queries], [axis_label(t) for t in keys]
    columns = math.ceil(math.sqrt(len(heads)))
    cell = max(1, min(20, GRID_PIXELS // (columns * max(len(rows), len(cols)))))
    images = [heatmap_image(maps[layer][h].numpy(), rows, cols, title=f"head {h}", cell=cell, value_range=(0.0, 1.0))
              for h in heads]
    write_png(args.png, heatmap_grid(images, columns, f"{args.model}: layer {layer} {KINDS[key]}"))
    if not args.json:
        print(f"attention maps saved to {args.png}")
