"""``bench/bench_concurrency.py`` runs end to end on the CPU with the tiny architecture and
reports every figure for the engine (users together and as a Poisson stream) and the
stock batched ``generate``; its timings are not checked."""

from __future__ import annotations

import importlib.util
import io
import json
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench() -> ModuleType:
    """The script as a module (registered: its dataclasses need ``sys.modules``)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(
        "bench_concurrency", BENCH / "bench_concurrency.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_concurrency"] = module
    spec.loader.exec_module(module)
    return module


def test_tiny_cpu_run_reports_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--arch", "tiny", "--device", "cpu", "--users", "1,3", "--poisson-users", "2",
        "--rate", "50", "--new-tokens", "4", "--size", "224x224", "--workdir", str(tmp_path),
    ]  # fmt: skip
    assert load_bench().main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True and result["device"] == "cpu"
    engine = result["engine"]
    assert isinstance(engine, dict)
    startup = engine["startup"]
    assert startup["decode_mode"] == "eager" and startup["preload"] is False  # CPU defaults
    assert startup["first_question_outcome"] == "done"
    runs = engine["runs"]
    assert [(r["users"], r["arrival"]) for r in runs] == [
        (1, "together"),
        (3, "together"),
        (2, "poisson"),
    ]
    for run in runs:
        assert run["outcomes"] == {"done": run["users"]}
        assert 1 <= run["images"] / run["users"] <= 3
        assert run["new_tokens"] <= 4 * run["users"]
        assert run["ttft_ms_p50"] > 0 and run["ttft_ms_p95"] >= run["ttft_ms_p50"]
        assert {"encoding", "prefill", "ttft"} <= set(run["stages_ms_p50"]), run
        assert run["peak_gib"] > 0 and run["cuda_ooms"] == 0
    stock = result["stock_generate_bf16_static"]
    assert isinstance(stock, list)
    assert [r["users"] for r in stock] == [1, 3]
    assert all(r["new_tokens"] == 4 * r["users"] for r in stock)


def test_qwen3_architecture_runs_through_engine_and_stock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--arch qwen3-tiny``: the Qwen3-VL layout (DeepStack, 16-px patches) through the
    engine and the stock batched ``generate``, as ``--arch qwen3-8b`` runs on the GPU."""
    argv = [
        "--arch", "qwen3-tiny", "--device", "cpu", "--users", "2", "--poisson-users", ",",
        "--new-tokens", "4", "--size", "224x224", "--workdir", str(tmp_path),
    ]  # fmt: skip
    assert load_bench().main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True and result["arch"].startswith("qwen3-tiny-")
    config = json.loads((tmp_path / result["arch"] / "config.json").read_text())
    assert config["model_type"] == "qwen3_vl"
    (run,) = result["engine"]["runs"]
    assert run["outcomes"] == {"done": 2} and run["arrival"] == "together"
    (stock,) = result["stock_generate_bf16_static"]
    assert stock["new_tokens"] == 8


def test_peer_runs_the_engine_again_with_settings_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--peer max_batch=1``: a second engine phase in the same process, one request at a
    time, reported beside the default one."""
    argv = [
        "--arch", "tiny", "--device", "cpu", "--users", "2", "--poisson-users", ",",
        "--new-tokens", "4", "--size", "224x224", "--skip-stock", "--peer", "max_batch=1",
        "--workdir", str(tmp_path),
    ]  # fmt: skip
    assert load_bench().main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    peer = result["engine_peer"]
    assert result["ok"] is True and peer["settings"] == {"max_batch": "1"}
    for phase in (result["engine"], peer):
        (run,) = phase["runs"]
        assert run["outcomes"] == {"done": 2}


def test_varied_sizes_and_a_peer_without_cudnn_attention(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--size varied:LO-HI --peer-no-cudnn``: images of sizes drawn per image, and a
    second engine phase with cuDNN's attention off, the switch restored afterwards."""
    import torch

    before = torch.backends.cuda.cudnn_sdp_enabled()
    argv = [
        "--arch", "tiny", "--device", "cpu", "--users", "2", "--poisson-users", ",",
        "--new-tokens", "4", "--size", "varied:64-300", "--skip-stock", "--peer-no-cudnn",
        "--workdir", str(tmp_path),
    ]  # fmt: skip
    assert load_bench().main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True and result["image_size"] == "varied 64-300"
    peer = result["engine_peer"]
    assert peer["settings"] == {} and peer["cudnn_attention"] is False
    for phase in (result["engine"], peer):
        (run,) = phase["runs"]
        assert run["outcomes"] == {"done": 2}
    assert torch.backends.cuda.cudnn_sdp_enabled() is before


def test_image_sizes_fixed_or_varied() -> None:
    from PIL import Image

    bench = load_bench()
    assert bench.parse([]).size == ("fixed", (1024, 768))
    assert bench.parse(["--size", "varied"]).size == ("varied", (320, 1600))
    assert bench.parse(["--size", "varied:100-200"]).size == ("varied", (100, 200))
    for bad in ("1024", "0x5", "varied:200-100", "varied:10-20", "big"):
        with pytest.raises(SystemExit):
            bench.parse(["--size", bad])
    bench.SIZE[0] = ("varied", (100, 200))
    rng = random.Random(0)
    sizes = {Image.open(io.BytesIO(bench.image_of(rng))).size for _ in range(20)}
    assert len(sizes) == 20 and all(100 <= s <= 200 for size in sizes for s in size)
    bench.SIZE[0] = ("fixed", (64, 48))
    assert Image.open(io.BytesIO(bench.image_of(rng))).size == (64, 48)


def test_peer_settings_must_be_known() -> None:
    bench = load_bench()
    assert bench.parse(["--peer", "dense_weight_share=0.25"]).peer == {"dense_weight_share": "0.25"}
    for bad in ("no_such_setting=1", "max_batch"):
        with pytest.raises(SystemExit):
            bench.parse(["--peer", bad])


def test_unknown_architecture_is_refused() -> None:
    with pytest.raises(SystemExit):
        load_bench().parse(["--arch", "qwen3-9b"])


def test_figures_and_arrivals() -> None:
    bench = load_bench()
    UserRun, arrivals, figures, percentile = (
        bench.UserRun,
        bench.arrivals,
        bench.figures,
        bench.percentile,
    )
    assert percentile([], 95) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0
    assert arrivals(3, "together", 1.0, random.Random(0)) == [0.0, 0.0, 0.0]
    stream = arrivals(50, "poisson", 10.0, random.Random(0))
    assert stream[0] == 0.0 and stream == sorted(stream) and 2.0 < stream[-1] < 10.0
    runs = [
        UserRun(0.0, 1, [0.1, 0.2, 0.3], "done", stages={"prefill": 0.05, "ttft": 0.1}),
        UserRun(0.0, 2, [0.5, 0.6], "done", stages={"prefill": 0.2, "ttft": 0.5}),
    ]
    out = figures(runs)
    assert out["stages_ms_p50"] == {"prefill": 50.0, "ttft": 100.0}
    assert out["new_tokens"] == 5 and out["aggregate_tok_s"] == 10.0  # 5 tokens in 0.5 s
    assert out["ttft_ms_p95"] == 500.0 and out["inter_token_ms_p95"] == pytest.approx(100.0)
    assert out["outcomes"] == {"done": 2} and out["images"] == 3


def test_stock_peer_is_timed_on_its_second_call_of_each_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``generate`` compiles its static-cache step per batch shape: each N's timed call
    follows an untimed one with the same image counts and new tokens."""
    bench = load_bench()
    calls: list[tuple[list[int], int]] = []
    real = bench._stock_batch

    def recording(*call: Any) -> Any:
        calls.append((list(call[3]), call[4]))  # the image counts and new tokens
        return real(*call)

    monkeypatch.setattr(bench, "_stock_batch", recording)
    argv = ["--arch", "tiny", "--device", "cpu", "--new-tokens", "3", "--size", "224x224",
            "--workdir", str(tmp_path)]  # fmt: skip
    args = bench.parse(argv)
    args.stock_users = [1, 2]
    bench.SIZE[0] = ("fixed", (224, 224))
    _, path = bench.arch_checkpoint(args.workdir, args.arch)
    results = bench.stock_phase(args, path)
    assert [r["users"] for r in results] == [1, 2]
    assert len(calls) == 4 and calls[0] == calls[1] and calls[2] == calls[3]
    assert [len(c[0]) for c in calls] == [1, 1, 2, 2] and {c[1] for c in calls} == {3}
