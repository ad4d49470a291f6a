"""One meaning per name (docs/development.md, "Names"): "seq2seq" is the RNN encoder-decoder and nothing else,
"encoder_decoder" the transformer ones (T5, BART, the original Transformer); "finetune" is task tuning of
encoders and encoder-decoders (`lmlab finetune`), "post_training" the tuning of a trained decoder (SFT, reward
models, PPO, DPO). The test parses src/lmlab and fails on a module, a definition or an import that gives one
of these words its other meaning again."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lmlab"

# The only places a module, class or function may be named "seq2seq": the RNN encoder-decoder's own.
# (training/recipe_configs.py holds the settings of those recipes, torch-free for the CLI's parsers.)
SEQ2SEQ = ("models/seq2seq/", "recipes/seq2seq.py", "generation/seq2seq.py", "cli/seq2seq.py", "training/recipe_configs.py")
# The only places one may be named "finetune": tuning encoders and encoder-decoders with `lmlab finetune`.
FINETUNE = ("cli/finetune/", "recipes/finetune_encoder.py", "recipes/finetune_encoder_decoder.py",
            "models/finetuned_encoder.py", "models/encoder_task_files.py", "training/recipe_configs.py")
OWNERS = {"seq2seq": SEQ2SEQ, "finetun": FINETUNE}


def sources() -> dict[str, ast.Module]:
    return {path.relative_to(SRC).as_posix(): ast.parse(path.read_text()) for path in SRC.rglob("*.py")}


def owned(word: str, where: str) -> bool:
    return where.startswith(OWNERS[word])


def test_modules_named_seq2seq_or_finetune_are_the_ones_of_that_meaning():
    misplaced = [path for path in sources() for word in OWNERS if word in path.lower() and not owned(word, path)]
    assert not misplaced, f"modules whose name means something else here: {misplaced}"


def test_classes_and_functions_named_seq2seq_or_finetune_live_with_that_meaning():
    misplaced = [f"{path}: {node.name}" for path, tree in sources().items() for node in ast.walk(tree)
                 if isinstance(node, (ast.ClassDef, ast.FunctionDef)) for word in OWNERS
                 if word in node.name.lower() and not owned(word, path)]
    assert not misplaced, f"definitions whose name means something else here: {misplaced}"


def test_imports_of_a_seq2seq_module_are_imports_of_the_rnn():
    rnn = {"lmlab.models.seq2seq", "lmlab.recipes.seq2seq", "lmlab.generation.seq2seq"}
    wrong = [f"{path}: {node.module}" for path, tree in sources().items() for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module and "seq2seq" in node.module
             and not any(node.module == m or node.module.startswith(m + ".") for m in rnn)]
    assert not wrong, f"imports of a 'seq2seq' module that is not the RNN's: {wrong}"
