"""``qwen-ui batch`` on the shipped demo model: 50 rows, 3 of them bad (a missing file, a
corrupt image, an empty question), interrupted and resumed, through the local engine and
against a real server process with an API token."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.tokens import add_token, new_token
from qwen_ui.cli import main
from qwen_ui.demo import scenes
from qwen_ui.demo.evaluate import normalize
from qwen_ui.settings import Settings
from tests.support.auth import add_tenants, local_tenant
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.slow]

ROWS = 50
BAD = {5: "image_missing", 17: "image_unsupported", 33: "no_question"}  # row number: code


@dataclass(frozen=True)
class Dataset:
    folder: Path
    rows: list[dict[str, object]]  # id, images (relative paths), question, expect

    def write_csv(self, path: Path) -> Path:
        """Without ids: they default to the row numbers."""
        with path.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["images", "question"])
            for row in self.rows:
                writer.writerow(["|".join(row["images"]), row["question"]])  # type: ignore[arg-type]
        return path

    def write_jsonl(self, path: Path) -> Path:
        with path.open("w") as file:
            for row in self.rows:
                record = {k: row[k] for k in ("id", "images", "question")}
                file.write(json.dumps(record, ensure_ascii=False) + "\n")
        return path


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    folder = tmp_path_factory.mktemp("batch")
    (folder / "img").mkdir()
    (folder / "img" / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    samples = iter(scenes.held_out(ROWS - len(BAD), seed=0))
    rows: list[dict[str, object]] = []
    for number in range(1, ROWS + 1):
        row: dict[str, object] = {"id": f"q{number:02d}", "question": "What is this?"}
        if number in BAD:
            code = BAD[number]
            where = {"image_missing": "img/nope.png", "image_unsupported": "img/corrupt.png"}
            row["images"] = [where.get(code, "img/corrupt.png")]
            row["question"] = "   " if code == "no_question" else "What is this?"
            if code == "no_question":
                row["images"] = [str(rows[0]["images"][0])]  # type: ignore[index]
        else:
            sample = next(samples)
            paths = []
            for i, picture in enumerate(sample.images()):
                paths.append(f"img/{number}_{i}.png")
                picture.save(folder / paths[-1])
            row.update(images=paths, question=sample.question, expect=sample.answer)
        rows.append(row)
    return Dataset(folder, rows)


def records(path: Path) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a torn line from the killed run
            continue
    return out


def check_complete(path: Path, dataset: Dataset, ids: list[str]) -> None:
    """Every row exactly once, the bad ones with their typed error, the others answered
    and (nearly all: the demo model is ~98 % right) correctly."""
    found = records(path)
    assert sorted(str(r["id"]) for r in found) == sorted(ids)
    by_id = {str(r["id"]): r for r in found}
    right = 0
    for number, (row, row_id) in enumerate(zip(dataset.rows, ids, strict=True), start=1):
        record = by_id[row_id]
        assert record["row"] == number
        if number in BAD:
            assert record["answer"] is None
            assert record["error"]["code"] == BAD[number]  # type: ignore[index]
            continue
        assert record["error"] is None, record
        assert isinstance(record["answer"], str) and record["timings"]["row"] > 0  # type: ignore[index]
        right += normalize(str(record["answer"])) == normalize(str(row["expect"]))
    assert right >= 0.9 * (ROWS - len(BAD))


def test_local_engine_limit_then_resume(
    dataset: Dataset,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("QWEN_UI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("QWEN_UI_DEVICE", "cpu")
    rows = dataset.write_csv(dataset.folder / "rows.csv")
    out = tmp_path / "answers.jsonl"
    first = main(["batch", str(rows), "-o", str(out), "--limit", "20", "--concurrency", "3"])
    assert len(records(out)) == 20
    assert "rows 50, done before 0, answered 18, failed 2," in capsys.readouterr().out
    second = main(["batch", str(rows), "-o", str(out), "--concurrency", "3"])
    assert "rows 50, done before 20, answered 29, failed 1," in capsys.readouterr().out
    assert first == second == 1  # rows failed (5 and 17, then 33)
    check_complete(out, dataset, [str(n) for n in range(1, ROWS + 1)])
    third = main(["batch", str(rows), "-o", str(out)])  # nothing left to do
    assert third == 0 and "answered 0, failed 0" in capsys.readouterr().out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    home = tmp_path_factory.mktemp("home")
    settings = Settings(home=home)
    add_tenants(settings.tenants_path, local_tenant("acme"))
    token, record = new_token("batch")
    current = tenants_file.load(settings.tenants_path, allow_insecure=True)
    tenant = add_token(current.tenants["acme"], record)
    tenants_file.save(settings.tenants_path, tenants_file.with_tenant(current, tenant))
    env = {"QWEN_UI_DEVICE": "cpu", "GRADIO_ANALYTICS_ENABLED": "False"}
    process = ServerProcess(home, env=env)
    try:
        process.wait_for("/login", timeout=240)  # a loaded CI machine starts slowly
        yield process, token
    finally:
        process.stop()
    assert token not in process.output()


@pytest.mark.e2e
def test_server_killed_mid_run_then_resumed(
    dataset: Dataset, tmp_path: Path, server: tuple[ServerProcess, str]
) -> None:
    process, token = server
    rows = dataset.write_jsonl(dataset.folder / "rows.jsonl")
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    out = tmp_path / "answers.jsonl"
    args = ["batch", str(rows), "-o", str(out), "--server", process.url]
    args += ["--token-file", str(token_file), "--concurrency", "4"]
    with (tmp_path / "batch.log").open("w") as log:
        batch = subprocess.Popen([sys.executable, "-m", "qwen_ui.cli", *args], stderr=log)
        try:
            deadline = time.monotonic() + 240
            while len(records(out)) < 10 and batch.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            batch.kill()
            batch.wait(10)
    written = len(records(out))
    assert 10 <= written < ROWS, "the run should be stopped part way"
    assert main([*args, "--no-progress"]) == 1  # the 3 bad rows failed
    check_complete(out, dataset, [str(row["id"]) for row in dataset.rows])


@pytest.mark.e2e
def test_server_with_a_wrong_token_stops_before_any_row(
    dataset: Dataset, tmp_path: Path, server: tuple[ServerProcess, str]
) -> None:
    process, _ = server
    rows = dataset.write_jsonl(dataset.folder / "rows.jsonl")
    out = tmp_path / "answers.jsonl"
    args = ["batch", str(rows), "-o", str(out), "--server", process.url, "--token", "qwu_wrong"]
    assert main(args) == 2
    assert records(out) == []
