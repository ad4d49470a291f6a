"""Task data that lives beside these YAMLs: lm-eval hands `dataset_kwargs.data_files` to `datasets`
unchanged, which reads relative paths from the working directory; this loader reads them from this
folder, so the tasks run offline from wherever lm-eval is started."""

from pathlib import Path

import datasets

HERE = Path(__file__).parent


def jsonl(data_files: dict[str, str], **metadata) -> datasets.DatasetDict:
    """The JSONL split files `data_files` (split -> file name in this folder), one split each;
    `metadata` is what lm-eval passes to every custom loader (model arguments, version), unused."""
    return datasets.load_dataset("json", data_files={split: str(HERE / name) for split, name in data_files.items()})
