"""Documents -> token-id lines -> the segments and rows encoder pre-training packs.

A line is the unit of text here (a sentence in prose, a statement in code). Sentence-pair
objectives (NSP, SOP) need segments: runs of consecutive lines of one document, cut to a length.
Single-sequence objectives (RoBERTa's MLM, SpanBERT, ELECTRA) take "full sentences": rows filled
with consecutive lines, crossing from one document into the next with a [SEP] between them.
"""

from tokenizers import Tokenizer

Line = list[int]


def document_lines(texts: list[str], tokenizer: Tokenizer) -> list[list[Line]]:
    """The token ids (no [CLS]/[SEP]) of each non-blank line of each document; empty documents dropped."""
    lines = [[line for line in text.splitlines() if line.strip()] for text in texts]
    flat = tokenizer.encode_batch([line for doc in lines for line in doc], add_special_tokens=False)
    documents, at = [], 0
    for doc in lines:
        ids = [encoding.ids for encoding in flat[at:at + len(doc)] if encoding.ids]
        at += len(doc)
        if ids:
            documents.append(ids)
    return documents


def segments(lines: list[Line], max_tokens: int) -> list[Line]:
    """Consecutive lines joined while they fit in `max_tokens`; a longer line is cut into pieces."""
    out, current = [], []
    for line in lines:
        for start in range(0, len(line), max_tokens):
            piece = line[start:start + max_tokens]
            if current and len(current) + len(piece) > max_tokens:
                out.append(current)
                current = []
            current = current + piece
    if current:
        out.append(current)
    return out


def full_sentence_rows(documents: list[list[Line]], max_tokens: int, sep_id: int) -> list[Line]:
    """Rows of at most `max_tokens` ids holding consecutive lines, documents following one another
    with `sep_id` between them (RoBERTa's FULL-SENTENCES input)."""
    rows, current = [], []
    for doc in documents:
        if current and len(current) < max_tokens:
            current = current + [sep_id]
        for piece in segments(doc, max_tokens):
            if current and len(current) + len(piece) > max_tokens:
                rows.append(current)
                current = []
            current = current + piece
    if current:
        rows.append(current)
    return rows
