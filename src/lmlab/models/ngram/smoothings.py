"""The smoothing methods an n-gram model is fitted with, by name, in a module without torch, so that
`lmlab ngram --help` lists them at once."""

SMOOTHINGS = {
    "kn": "interpolated Kneser-Ney, one discount per order",
    "mkn": "modified Kneser-Ney (Chen & Goodman), three discounts per order",
    "addk": "add-k (Laplace when k = 1) at the highest order",
    "mle": "maximum likelihood, no smoothing (unseen n-grams get probability 0)",
    "stupid": "stupid backoff (alpha 0.4): fast scores, not probabilities",
    "arpa": "read from an ARPA file, scored by backoff",
}
