"""Decoding steps run each linear layer in the layout timed fastest for its shape and row count
(`decoding_view`, `layout_timing`, `layout_cache`): every layout gives `nn.Linear`'s products up to
float rounding, the choice follows the timings (a fake timer here: no test times anything), the
timings are cached per CPU and a bad cache file is measured again, parameters are shared rather
than copied, the copies follow the weights, and the greedy tokens are the model's."""

import json

import pytest
import torch
from torch import nn

from lmlab.generation import GenerationConfig, generate_batch, layout, layout_cache
from lmlab.generation.layout import LayoutLinear, decoding_view
from lmlab.generation.layout_timing import BUCKETS, LAYOUTS, REPEATS, StreamTimer, arrange, choose, measure, panel_width
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset


def tiny_llama():
    torch.manual_seed(0)
    return build_decoder(preset("llama-tiny", vocab_size=64, context_length=48, n_layers=2)).eval()


def speeds_where(fastest: dict[int, str], slow: float = 1.0, fast: float = 5.0) -> dict[int, dict[str, float]]:
    """Speeds (GB/s) of one shape: `fastest[rows]` fast in its bucket, every other layout slow."""
    return {rows: {name: fast if fastest[rows] == name else slow for name in LAYOUTS} for rows in BUCKETS}


class FakeTimer:
    """Stands in for `StreamTimer`: the speeds `speeds_where(fastest)` for every shape, counting its calls."""

    def __init__(self, fastest: dict[int, str]):
        self.fastest, self.calls = fastest, 0

    def __call__(self, weights, stream_bytes):  # the StreamTimer constructor's place
        return self.time_once

    def time_once(self, shape, bucket, name):
        self.calls += 1
        return speeds_where(self.fastest)[bucket][name]


@pytest.fixture
def timed(monkeypatch):
    """Models of any size are timed (with the fake timer that `timed(fastest)` installs), in a fresh process memory."""
    monkeypatch.setattr(layout, "MIN_BYTES", 0)
    monkeypatch.setattr(layout_cache, "_MEASURED", {})
    monkeypatch.setattr(layout_cache, "load_per_core", lambda: 0.0)  # a quiet machine, unless a test says

    def install(fastest: dict[int, str]) -> FakeTimer:
        timer = FakeTimer(fastest)
        monkeypatch.setattr(layout_cache, "StreamTimer", timer)
        layout_cache._MEASURED.clear()
        return timer
    return install


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_layout_equals_linear(name):
    torch.manual_seed(0)
    for bias in (True, False):
        linear = nn.Linear(40, 37, bias=bias)  # 37 outputs: not a multiple of any panel width
        width = panel_width(name, 37)
        view = LayoutLinear(linear, (name,) * len(BUCKETS), None if width is None else arrange(linear.weight, width))
        for rows in (1, 3, 16, 64, 65):  # every bucket, and plain above them
            x = torch.randn(rows, 1, 40)
            torch.testing.assert_close(view(x), linear(x), rtol=1e-5, atol=1e-6)


def test_choose_takes_one_layout_besides_plain_where_it_is_faster():
    assert choose(speeds_where({1: "panels16", 4: "panels16", 16: "plain", 64: "plain"})) == (
        "panels16", "panels16", "plain", "plain")
    # panels8 is best at one row, panels32 at 2-16 rows: one copy only, the one row's, used where it wins
    speeds = speeds_where({1: "panels8", 4: "panels32", 16: "panels32", 64: "plain"})
    speeds[4]["panels8"] = 2.0
    assert choose(speeds) == ("panels8", "panels8", "plain", "plain")
    speeds[1]["panels32"] = 4.6  # within 10% of panels8 at one row: a tie, which goes to the first in LAYOUTS
    assert choose(speeds) == ("panels32", "panels32", "panels32", "plain")
    # plain is fastest at one row (MKL on some CPUs): the copy is the fastest at 2-4 rows
    assert choose(speeds_where({1: "plain", 4: "panels16", 16: "panels32", 64: "plain"})) == (
        "plain", "panels16", "plain", "plain")
    assert choose(speeds_where(dict.fromkeys(BUCKETS, "plain"))) == ("plain",) * len(BUCKETS)


def test_measure_keeps_the_best_of_interleaved_rounds():
    order, rounds = [], {}

    def time_once(shape, bucket, name):
        order.append((shape, bucket, name))
        count = rounds[shape, bucket, name] = rounds.get((shape, bucket, name), 0) + 1
        slowed = count != 2 and name == "panels16"  # another process took the core in two rounds of three
        return {"plain": 2.0, "panels16": 1.0 if slowed else 3.0}.get(name, 0.5)

    speeds = measure(["a", "b"], time_once)
    assert speeds["a"][1]["plain"] == 2.0 and speeds["b"][64]["panels16"] == 3.0
    assert set(rounds.values()) == {REPEATS} and choose(speeds["a"]) == ("panels16",) * len(BUCKETS)
    assert order[:3] == [("a", 1, "plain"), ("b", 1, "plain"), ("a", 1, "panels16")]  # shapes in turn, as a step reads them


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_stream_timer_runs_every_layout_on_the_weights_dtype(dtype):
    """The real timer on two small shapes (its speeds are not checked: no test here times anything)."""
    weights = {"a": [torch.randn(96, 64, dtype=dtype) for _ in range(3)], "b": [torch.randn(40, 96, dtype=dtype)]}
    timer = StreamTimer(weights, stream_bytes=2 * 96 * 64 * dtype.itemsize)  # two of the three a's
    assert len(timer.weights["a"]) == 2 and len(timer.weights["b"]) == 1
    for bucket in BUCKETS:
        for name in LAYOUTS:
            assert timer("a", bucket, name) > 0 and timer("b", bucket, name) > 0


def test_view_uses_the_chosen_layouts_and_shares_the_parameters(timed):
    timed({1: "panels16", 4: "panels16", 16: "plain", 64: "transposed"})
    model = tiny_llama()
    view = decoding_view(model)
    assert view is not model and not any(isinstance(m, LayoutLinear) for m in model.modules())
    linears = [m for m in view.modules() if isinstance(m, LayoutLinear)]
    assert len(linears) == sum(isinstance(m, nn.Linear) for m in model.modules())
    assert {m.layouts for m in linears} == {("panels16", "panels16", "plain", "plain")}  # one copy: panels16
    assert {id(p) for p in view.parameters()} == {id(p) for p in model.parameters()}
    ids = torch.tensor([[5, 9, 2]])
    torch.testing.assert_close(view(ids), model(ids), rtol=1e-5, atol=1e-5)


def test_a_model_plain_is_fastest_for_or_that_fits_in_cache_is_its_own_view(timed):
    model = tiny_llama()
    timed(dict.fromkeys(BUCKETS, "plain"))
    assert decoding_view(model) is model
    layout.MIN_BYTES = 1 << 30  # the fixture puts it back
    timed(dict.fromkeys(BUCKETS, "panels16"))
    assert decoding_view(model) is model


def test_greedy_tokens_are_the_models_in_every_layout(timed):
    model, config = tiny_llama(), GenerationConfig(max_new_tokens=12)
    prompts = [[5, 9, 2], [7, 1, 1, 3, 8]]
    layout.MIN_BYTES = 1 << 30
    plain = [out.token_ids for out in generate_batch(model, prompts, config)]
    layout.MIN_BYTES = 0
    for name in LAYOUTS[1:]:
        layout_cache.cache_file(layout_cache.cpu_key()).unlink(missing_ok=True)
        timed(dict.fromkeys(BUCKETS, name))
        assert next(m for m in decoding_view(model).modules() if isinstance(m, LayoutLinear)).layouts[0] == name
        assert [out.token_ids for out in generate_batch(model, prompts, config)] == plain, name


def test_timings_are_cached_per_cpu_and_reused(timed):
    model = tiny_llama()
    first = timed({1: "panels32", 4: "panels32", 16: "plain", 64: "plain"})
    decoding_view(model)
    assert first.calls > 0
    path = layout_cache.cache_file(layout_cache.cpu_key())
    stored = json.loads(path.read_text())
    assert stored["cpu"] == layout_cache.cpu_key() and set(stored["shapes"]) == {
        "128x128:float32", "256x128:float32", "704x128:float32", "128x352:float32", "64x128:float32"}
    again = timed(dict.fromkeys(BUCKETS, "panels8"))  # a new process: reads the file, times nothing
    view = decoding_view(model)
    assert again.calls == 0 and next(m for m in view.modules() if isinstance(m, LayoutLinear)).layouts[0] == "panels32"


def test_timings_taken_on_a_busy_machine_are_taken_again_once_it_is_quieter(timed, monkeypatch):
    model = tiny_llama()
    path = layout_cache.cache_file(layout_cache.cpu_key())
    for load, fastest, measured in [(3.0, "panels16", True), (2.0, "panels8", False), (1.4, "panels32", True),
                                    (0.9, "panels64", False)]:
        monkeypatch.setattr(layout_cache, "load_per_core", lambda load=load: load)
        timer = timed(dict.fromkeys(BUCKETS, fastest))
        decoding_view(model)
        assert (timer.calls > 0) == measured, load
    assert {entry[0] for entry in layout_cache.read_entries(path, layout_cache.cpu_key()).values()} == {1.4}


def rewrite(path, edit):
    stored = json.loads(path.read_text())
    edit(stored)
    path.write_text(json.dumps(stored))


def reseal(stored):
    stored["checksum"] = layout_cache._checksum(stored["cpu"], stored["shapes"])


def first_speeds(stored):
    return next(iter(stored["shapes"].values()))["1"]


@pytest.mark.parametrize("damage", [
    lambda path: path.write_text("{not json"),
    lambda path: path.write_bytes(b"\xff\xfe"),
    lambda path: path.write_text(" " * (layout_cache.MAX_BYTES + 1) + "{}"),
    lambda path: rewrite(path, lambda s: first_speeds(s).update(plain=1e3)),  # a hand edit: the checksum fails
    lambda path: rewrite(path, lambda s: (first_speeds(s).update(plain=-1.0), reseal(s))),
    lambda path: rewrite(path, lambda s: (first_speeds(s).pop("panels8"), reseal(s))),
    lambda path: rewrite(path, lambda s: (next(iter(s["shapes"].values())).update(load=float("nan")), reseal(s))),
    lambda path: rewrite(path, lambda s: (s["shapes"].update({"../x:float32": s["shapes"]["128x128:float32"]}), reseal(s))),
    lambda path: rewrite(path, lambda s: (s.update(cpu="another CPU"), reseal(s))),
    lambda path: rewrite(path, lambda s: s.update(format="lmlab fp32 decoding layouts 0")),
])
def test_a_bad_cache_file_is_measured_again_and_replaced(timed, damage):
    model = tiny_llama()
    timed(dict.fromkeys(BUCKETS, "panels16"))
    decoding_view(model)
    path = layout_cache.cache_file(layout_cache.cpu_key())
    damage(path)
    timer = timed(dict.fromkeys(BUCKETS, "panels64"))
    view = decoding_view(model)
    assert timer.calls > 0 and next(m for m in view.modules() if isinstance(m, LayoutLinear)).layouts[0] == "panels64"
    assert set(layout_cache.read_entries(path, layout_cache.cpu_key())) == set(json.loads(path.read_text())["shapes"])


def test_copies_follow_the_weights_after_training(timed):
    timed(dict.fromkeys(BUCKETS, "panels16"))
    model = tiny_llama()
    ids = torch.tensor([[5, 9, 2]])
    decoding_view(model)(ids)  # copies made from the initial weights
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)  # updates without a version bump
    for _ in range(3):
        model(torch.tensor([[5, 9, 2, 7]])).logsumexp(-1).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    # stale copies would be off by the size of the updates, not by rounding
    torch.testing.assert_close(decoding_view(model)(ids), model(ids), rtol=1e-4, atol=1e-4)


def test_copies_follow_rows_that_trade_places(timed):
    """Swapping two rows in place keeps the weight's plain bit sum: the panels must be cut again anyway."""
    timed(dict.fromkeys(BUCKETS, "panels16"))
    model = tiny_llama()
    ids = torch.tensor([[5, 9, 2]])
    decoding_view(model)(ids)
    with torch.no_grad():
        for block in model.blocks:
            weight = block.feed_forward.down.weight
            weight[[0, 1]] = weight[[1, 0]]
    torch.testing.assert_close(decoding_view(model)(ids), model(ids), rtol=1e-5, atol=1e-5)
