"""Incremental detokenization: text pieces as tokens arrive, never half a character, never a stop string.

Decoding one token at a time is wrong twice over. A byte-level BPE token can hold part of a UTF-8
character (the decoder shows it as U+FFFD until the rest arrives), and SentencePiece-style decoders
drop a leading space that belongs there mid-text. So each new token is decoded together with the
tokens of the previous piece (the context) and only the difference is new text, released once it
no longer ends in U+FFFD. Stop strings add one rule: text that could be the start of a stop string
is held back until the next tokens show whether it is one.
"""

REPLACEMENT = "\ufffd"  # what the decoder shows for an incomplete UTF-8 sequence


class IncrementalDetokenizer:
    """Feed it token ids with `add`; it returns the text that is safe to show so far.

    `text` is everything decoded (cut before the first stop string, if one appeared); `stopped_by`
    is that stop string, or None. Call `finish` after the last token to release what was held.
    """

    def __init__(self, tokenizer, stop_strings: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop_strings = stop_strings
        self.ids: list[int] = []
        self.text = ""
        self.stopped_by: str | None = None
        self._context = 0  # ids[_context:_decoded] were decoded last time: the context for the next
        self._decoded = 0  # ids[:_decoded] are in `text`
        self._released = 0  # text[:_released] has been handed out

    def add(self, token_id: int) -> str:
        """Take one more token; return the new text that is now safe to show (may be "")."""
        if self.stopped_by is not None:
            return ""
        self.ids.append(token_id)
        context, full = self._decode_tail()
        if full.endswith(REPLACEMENT) or not full.startswith(context):
            return ""  # a character is incomplete: wait for the next token
        self.text += full[len(context):]
        self._context, self._decoded = self._decoded, len(self.ids)
        return self._release(final=False)

    def finish(self) -> str:
        """No more tokens: return the rest (an incomplete character shows as U+FFFD)."""
        if self.stopped_by is None and self._decoded < len(self.ids):
            context, full = self._decode_tail()
            self.text += full[len(context):]
            self._decoded = len(self.ids)
        return self._release(final=True)

    @property
    def stopped(self) -> bool:
        return self.stopped_by is not None

    def _decode_tail(self) -> tuple[str, str]:
        decode = self.tokenizer.decode
        return decode(self.ids[self._context:self._decoded]), decode(self.ids[self._context:])

    def _release(self, final: bool) -> str:
        start = self._released
        hits = [(i, s) for s in self.stop_strings if (i := self.text.find(s, start)) >= 0]
        if hits:  # a stop string is complete: cut the text before it
            end, self.stopped_by = min(hits)
            self.text = self.text[:end]
        else:
            end = len(self.text) - (0 if final else self._could_start_stop(self.text[start:]))
        self._released = end
        return self.text[start:end]

    def _could_start_stop(self, tail: str) -> int:
        """Length of the longest end of `tail` that is the beginning of a stop string."""
        longest = 0
        for s in self.stop_strings:
            for n in range(min(len(s) - 1, len(tail)), longest, -1):
                if tail.endswith(s[:n]):
                    longest = n
                    break
        return longest
