"""Retrieved passages put into a chat: the template of an open-book question.

The last user message is rewritten as

    Answer the question using these passages.

    [1] (source) text of the best passage
    [2] (source) text of the next one
    …

    Question: the user's own message

and the chat is then rendered by the model's own chat template (`tokenizers.chat.chat_prompt`), so
the passages reach any chat model the way its training data put user text. The earlier turns and
any system message stay as they were. The closed-book prompt is the user's message alone.
"""

from lmlab.errors import LmlabError
from lmlab.rag.retrieve import Hit

INSTRUCTION = "Answer the question using these passages."
PASSAGE = "[{number}] ({source}) {text}"
OPEN_BOOK = "{instruction}\n\n{passages}\n\nQuestion: {question}"


def open_book_text(question: str, hits: list[Hit]) -> str:
    """The user message that carries `hits` (best first) and `question`; the question alone for no hits."""
    if not hits:
        return question
    passages = "\n".join(PASSAGE.format(number=i, source=h.passage.source, text=h.passage.text)
                         for i, h in enumerate(hits, start=1))
    return OPEN_BOOK.format(instruction=INSTRUCTION, passages=passages, question=question)


def last_user_text(messages: list[dict]) -> str:
    """The content of the last user message: what retrieval searches for."""
    for message in reversed(messages):
        if message["role"] == "user":
            return message["content"]
    raise LmlabError("retrieval needs a user message to search for; the chat has none")


def with_passages(messages: list[dict], hits: list[Hit]) -> list[dict]:
    """`messages` with the last user message rewritten to carry `hits` (a new list; the input is kept)."""
    last_user_text(messages)  # there is one
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    rewritten = {**messages[last], "content": open_book_text(messages[last]["content"], hits)}
    return [*messages[:last], rewritten, *messages[last + 1:]]


def augment_chat(retriever, messages: list[dict], k: int) -> tuple[list[dict], list[Hit]]:
    """(messages with the top-k passages for the last user message, the hits): what `lmlab serve --rag`
    does to a chat before its template renders it."""
    hits = retriever.retrieve([last_user_text(messages)], k)[0]
    return with_passages(messages, hits), hits
