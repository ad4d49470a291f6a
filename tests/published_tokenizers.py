"""Regexes and pipeline layouts as the published tokenizers' tokenizer.json files have them (GPT-2's,
Llama-3's, Qwen2's and GPT-4o's split patterns; the `deepseek_*` ones in the style of DeepSeek's sequence
of splits; SmolLM2's digits-then-bytes; SentencePiece conversions such as Llama-2's and T5's), for the
tests that check lmlab's bounds on tokenizer files still let real ones through."""

PUBLISHED = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
             r"\s+(?!\S)|\s+",
    "gpt4o": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
             r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
             r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
             r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
             r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "deepseek_digits": r"\p{N}{1,3}",
    "deepseek_cjk": r"[一-龥\u3040-ゟ゠-ヿ]+",
    "deepseek_words": r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
                      r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "t5_spaces": r" {2,}",
}

TEXT = "Hello  world, it's 2024!\nNumbers 12345 and café ▁x"
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
SPLIT = {"type": "Split", "pattern": {"Regex": PUBLISHED["llama3"]}, "behavior": "Isolated", "invert": False}
REAL_STYLE = {  # pipeline parts as the published tokenizer.json files have them
    "gpt2": {},
    "llama3": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [SPLIT, BYTE_LEVEL]},
               "post_processor": {"type": "TemplateProcessing",
                                  "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                                             {"Sequence": {"id": "A", "type_id": 0}}],
                                  "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                           {"Sequence": {"id": "B", "type_id": 1}}],
                                  "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [0],
                                                                 "tokens": ["<|bos|>"]}}}},
    "qwen2": {"normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [SPLIT,
                                                                                                    BYTE_LEVEL]}},
    "smollm2": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, BYTE_LEVEL | {"use_regex": True}]}},
    "sentencepiece_bpe": {
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "▁"}]},
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}},
    "t5_metaspace": {
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"Regex": " {2,}"},
                                                            "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}]},
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}},
}
